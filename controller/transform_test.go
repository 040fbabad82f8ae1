package controller

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil"
)

func TestTransformForCache_PodKeepsWhatDecideReadsAndIsIdempotent(t *testing.T) {
	p := terminating(realisticPodForTransform(), -time.Second)
	p.Annotations[vigil.ReapAnnotation] = "false"
	p.Spec.Volumes = append(p.Spec.Volumes, ephemeralVolume("scratch"))
	once, _ := TransformForCache(p.DeepCopy())
	twice, _ := TransformForCache(once)
	if !reflect.DeepEqual(once, twice) {
		t.Fatalf("not idempotent:\n%#v\n%#v", once, twice)
	}
	slim := once.(*corev1.Pod)
	if slim.Labels != nil || len(slim.ManagedFields) != 0 || len(slim.Spec.Containers) != 0 || len(slim.Annotations) != 1 {
		t.Errorf("kept what the reaper never reads: %#v", slim.ObjectMeta)
	}
	if len(slim.Spec.Volumes) != 2 || slim.Spec.Volumes[0].Name != "data" || slim.Spec.Volumes[1].Ephemeral == nil {
		t.Errorf("volumes %#v", slim.Spec.Volumes)
	}
	// The decision is the same on the original and on the cached form.
	set := defaultSet()
	objs := testListers(newNode("node-1", corev1.ConditionUnknown, -time.Minute), newPVC("app", "data-p", "pv-1", nil), newPV("pv-1", vigil.DriverName),
		newPVC("app", "p-scratch", "pv-2", controllerRef("v1", "Pod", "p", p.UID)), newPV("pv-2", vigil.DriverName))
	p.Annotations = nil
	slim.Annotations = nil
	fromCache := toCachedPod(slim).pod()
	node, _ := objs.nodes.Get("node-1")
	obs := newNodeTracker().observe("node-1", node, t0)
	a := decide(objs.snapshot(t.Context(), p, node, obs, set, nil), set, t0)
	b := decide(objs.snapshot(t.Context(), fromCache, node, obs, set, nil), set, t0)
	if !reflect.DeepEqual(a, b) || a.Kind != DecisionDelete {
		t.Errorf("original decides %+v, cached decides %+v", a, b)
	}
}

func realisticPodForTransform() *corev1.Pod {
	p := newPod("app", "p", "node-1", controllerRef("apps/v1", "StatefulSet", "db", "uid-sts"), pvcVolume("data", "data-p"))
	p.Labels = map[string]string{"app": "db"}
	p.Annotations = map[string]string{"other": "x"}
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	p.Spec.Containers = []corev1.Container{{Name: "db", Image: "db:1"}}
	return p
}

func TestController_OnPod_QueuesOnlyPodsThatMayMatter(t *testing.T) {
	f := newFixture(t, PolicyDeleteBoth)
	f.objects = append(f.objects, newNode("ok", corev1.ConditionTrue, -time.Hour), newNode("bad", corev1.ConditionUnknown, -time.Minute))
	f.start()
	cases := []struct {
		pod  *corev1.Pod
		want bool
	}{
		{newPod("app", "running-on-healthy", "ok", nil), false},
		{terminating(newPod("app", "terminating-on-healthy", "ok", nil), time.Second), true},
		{newPod("app", "on-down-node", "bad", nil), true},
		{newPod("app", "on-deleted-node", "gone", nil), true},
		{newPod("app", "unscheduled", "", nil), false},
	}
	for _, tc := range cases {
		before := f.ctrl.queue.Len()
		f.ctrl.onPod(toCachedPod(tc.pod))
		if got := f.ctrl.queue.Len() > before; got != tc.want {
			t.Errorf("%s: queued=%t, want %t", tc.pod.Name, got, tc.want)
		}
	}
}

func TestController_OnNodeUpdate_IgnoresHeartbeats(t *testing.T) {
	f := newFixture(t, PolicyDeleteBoth)
	f.start()
	old := newNode("n", corev1.ConditionTrue, -time.Hour)
	heartbeat := old.DeepCopy()
	heartbeat.ResourceVersion = "2"
	heartbeat.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0)
	f.ctrl.onNodeUpdate(old, heartbeat)
	if n := f.ctrl.queue.Len(); n != 0 {
		t.Fatalf("a heartbeat queued %d keys", n)
	}
	down := heartbeat.DeepCopy()
	down.ResourceVersion = "3"
	down.Status.Conditions[0].Status = corev1.ConditionUnknown
	f.ctrl.onNodeUpdate(heartbeat, down)
	if n := f.ctrl.queue.Len(); n != 1 {
		t.Fatalf("Ready turning Unknown queued %d keys, want 1", n)
	}
}
