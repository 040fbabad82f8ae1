package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/vigil-storage/vigil"
)

var alwaysReady = func() bool { return true }

// fixture follows sample-controller's: objects go into both the fake clientset
// and the informer indexers, the sync function is called directly, and the
// client's actions are compared with the expected list.
type fixture struct {
	t        *testing.T
	objects  []runtime.Object
	settings *fakeSettings
	// reader, when set, replaces settings (real settings, for instance), and
	// actBlocked is the Config's ActBlocked.
	reader     SettingsReader
	actBlocked func() error
	backend    *fakeBackend // nil: the manager runs without a fencing back end
	recorder   *record.FakeRecorder
	client     *fake.Clientset
	ctrl       *Controller
	factory    informers.SharedInformerFactory
	registry   *prometheus.Registry
	now        time.Time
}

func newFixture(t *testing.T, policy PodDeletionPolicy) *fixture {
	return &fixture{t: t, settings: newFakeSettings(policy), backend: newFakeBackend(), recorder: record.NewFakeRecorder(200), now: t0}
}

// start builds the reaper over the fixture's objects; listerOnly objects go only
// into the informer caches (a cache that has not seen a deletion yet).
func (f *fixture) start(listerOnly ...runtime.Object) {
	f.client = fake.NewClientset(f.objects...)
	factory := informers.NewSharedInformerFactoryWithOptions(f.client, 0, informers.WithTransform(TransformForCache))
	f.registry = prometheus.NewRegistry()
	m, err := NewMetrics(f.registry)
	if err != nil {
		f.t.Fatal(err)
	}
	cfg := Config{Client: f.client, Informers: factory, Settings: f.settings, ActBlocked: f.actBlocked,
		Recorder: f.recorder, Metrics: m, Now: func() time.Time { return f.now }}
	if f.reader != nil {
		cfg.Settings = f.reader
	}
	if f.backend != nil {
		cfg.FenceBackend = f.backend
	}
	r, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	r.synced = []cache.InformerSynced{alwaysReady}
	for _, o := range append(append([]runtime.Object{}, f.objects...), listerOnly...) {
		slim, _ := TransformForCache(o.DeepCopyObject())
		var err error
		switch o := o.(type) {
		case *corev1.Pod:
			err = r.podsByNode.Add(toCachedPod(o))
		case *corev1.Node:
			err = factory.Core().V1().Nodes().Informer().GetIndexer().Add(slim)
		case *corev1.PersistentVolumeClaim:
			err = factory.Core().V1().PersistentVolumeClaims().Informer().GetIndexer().Add(slim)
		case *corev1.PersistentVolume:
			err = factory.Core().V1().PersistentVolumes().Informer().GetIndexer().Add(slim)
		case *storagev1.VolumeAttachment:
			err = factory.Storage().V1().VolumeAttachments().Informer().GetIndexer().Add(slim)
		case *appsv1.ReplicaSet:
			err = factory.Apps().V1().ReplicaSets().Informer().GetIndexer().Add(slim)
		}
		if err != nil {
			f.t.Fatal(err)
		}
	}
	f.client.ClearActions()
	f.ctrl, f.factory = r, factory
}

// actions lists the client's actions (lists and watches excluded) as strings.
func (f *fixture) actions() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "list" || a.GetVerb() == "watch" {
			continue
		}
		out = append(out, describeAction(a))
	}
	return out
}

func describeAction(a core.Action) string {
	s := fmt.Sprintf("%s %s %s", a.GetVerb(), a.GetResource().Resource, a.GetNamespace())
	if sub := a.GetSubresource(); sub != "" {
		s = fmt.Sprintf("%s %s/%s %s", a.GetVerb(), a.GetResource().Resource, sub, a.GetNamespace())
	}
	switch a := a.(type) {
	case core.PatchAction:
		s += "/" + a.GetName() + " " + string(a.GetPatchType())
	case core.GetAction:
		if a.GetVerb() == "get" {
			s += "/" + a.GetName()
		}
	}
	if d, ok := a.(core.DeleteAction); ok {
		s += "/" + d.GetName()
		o := d.GetDeleteOptions()
		if o.GracePeriodSeconds != nil {
			s += fmt.Sprintf(" grace=%d", *o.GracePeriodSeconds)
		}
		if o.Preconditions != nil && o.Preconditions.UID != nil {
			s += " uid=" + string(*o.Preconditions.UID)
		}
	}
	return s
}

func (f *fixture) expectActions(want ...string) {
	f.t.Helper()
	if got := f.actions(); !reflect.DeepEqual(got, want) {
		f.t.Errorf("actions:\n got %q\nwant %q", got, want)
	}
}

// events drains the recorder.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// expectEvents checks the drained events' "type reason" prefixes, in order.
func (f *fixture) expectEvents(want ...string) []string {
	f.t.Helper()
	evs := f.events()
	var got []string
	for _, e := range evs {
		parts := strings.SplitN(e, " ", 3)
		got = append(got, parts[0]+" "+parts[1])
	}
	if !reflect.DeepEqual(got, want) {
		f.t.Errorf("events:\n got %q\nwant %q", evs, want)
	}
	return evs
}

// statefulSetOnDownNode is a StatefulSet pod with two vigil volumes, terminating
// past its deadline on node-1 (Ready Unknown), with attachments on node-1 and a
// replacement's attachment of the first PV on node-2.
func statefulSetOnDownNode(f *fixture) *corev1.Pod {
	pod := terminating(newPod("app", "db-0", "node-1", controllerRef("apps/v1", "StatefulSet", "db", "uid-sts"),
		pvcVolume("data", "data-db-0"), pvcVolume("logs", "logs-db-0")), -time.Second)
	f.objects = append(f.objects, pod,
		newNode("node-1", corev1.ConditionUnknown, -time.Minute), newNode("node-2", corev1.ConditionTrue, -time.Hour),
		newPVC("app", "data-db-0", "pv-a", nil), newPV("pv-a", vigil.DriverName),
		newPVC("app", "logs-db-0", "pv-b", nil), newPV("pv-b", vigil.DriverName),
		newVA("va-a1", "pv-a", "node-1"), newVA("va-b1", "pv-b", "node-1"), newVA("va-a2", "pv-a", "node-2"))
	return pod
}

func TestController_SyncPod_DeletesNodeAttachmentsThenPod(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	f.start()
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions(
		"delete volumeattachments /va-a1 uid=uid-va-va-a1",
		"delete volumeattachments /va-b1 uid=uid-va-va-b1",
		"delete pods app/db-0 grace=0 uid=uid-app-db-0")
	evs := f.expectEvents(
		"Normal "+EventVolumeAttachmentDeleted, "Normal "+EventVolumeAttachmentDeleted,
		"Normal "+EventVolumeAttachmentDeleted, "Normal "+EventVolumeAttachmentDeleted,
		"Normal "+EventPodForceDeleted) // attachments on the pod and the node, the pod's delete on the pod
	if last := evs[len(evs)-1]; !strings.Contains(last, string(PolicyDeleteStatefulSetPod)) || !strings.Contains(last, string(ReasonPastDeadline)) ||
		!strings.Contains(last, "relying on: its driver.vigil.io volumes are granted to another node only after this node is fenced from them") {
		t.Errorf("event %q does not name the policy, the reason and what the reap relies on", last)
	}
	m := f.ctrl.metrics
	if got := testutil.ToFloat64(m.PodsDeleted.WithLabelValues("StatefulSet", string(PolicyDeleteStatefulSetPod))); got != 1 {
		t.Errorf("pods deleted = %v", got)
	}
	if got := testutil.ToFloat64(m.AttachmentsDeleted); got != 2 {
		t.Errorf("attachments deleted = %v", got)
	}
	if got := testutil.ToFloat64(m.Decisions.WithLabelValues("delete", string(ReasonPastDeadline))); got != 1 {
		t.Errorf("decisions = %v", got)
	}
	if _, err := f.client.StorageV1().VolumeAttachments().Get(context.Background(), "va-a2", metav1GetOptions); err != nil {
		t.Errorf("the replacement's attachment on node-2 is gone: %v", err)
	}
}

func TestController_SyncPod_DryRunDeletesNothing(t *testing.T) {
	f := newFixture(t, PolicyDeleteBoth)
	f.settings.dryRun = true
	statefulSetOnDownNode(f)
	f.start()
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	evs := f.expectEvents(
		"Normal "+EventWouldDeleteVolumeAttachment, "Normal "+EventWouldDeleteVolumeAttachment,
		"Normal "+EventWouldDeleteVolumeAttachment, "Normal "+EventWouldDeleteVolumeAttachment,
		"Normal "+EventWouldForceDelete, "Normal "+EventWouldForceDelete)
	if !strings.Contains(evs[4], "would force-delete pod app/db-0") {
		t.Errorf("event %q", evs[4])
	}
	if got := testutil.ToFloat64(f.ctrl.metrics.Decisions.WithLabelValues("would-delete", string(ReasonPastDeadline))); got != 1 {
		t.Errorf("decisions = %v", got)
	}
	// A resync decides the same and says nothing new.
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents()
}

func TestController_SyncPod_NonActionOnDownNodeIsAnEventOnce(t *testing.T) {
	f := newFixture(t, PolicyDeleteDeploymentPod)
	statefulSetOnDownNode(f)
	f.start()
	for range 3 {
		if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
			t.Fatal(err)
		}
	}
	f.expectActions()
	evs := f.expectEvents("Normal " + EventPodNotReaped) // on the pod only
	if len(evs) == 0 {
		t.FailNow()
	}
	if !strings.Contains(evs[0], string(ReasonOwnerNotCovered)) || !strings.Contains(evs[0], string(PolicyDeleteDeploymentPod)) {
		t.Errorf("event %q does not name the policy and the reason", evs[0])
	}
	if got := testutil.ToFloat64(f.ctrl.metrics.Decisions.WithLabelValues("skip", string(ReasonOwnerNotCovered))); got != 3 {
		t.Errorf("decisions = %v", got)
	}
}

func TestController_SyncPod_HealthyNodeNoActionNoEvent(t *testing.T) {
	f := newFixture(t, PolicyDeleteBoth)
	pod := statefulSetOnDownNode(f)
	pod.Spec.NodeName = "node-2"
	f.start()
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	f.expectEvents()
}

func TestController_SyncPod_ResumesAfterCrashBetweenSteps(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	// The previous leader deleted va-a1 and crashed; this cache has not seen it go.
	stale := newVA("va-a1", "pv-a", "node-1")
	var objs []runtime.Object
	for _, o := range f.objects {
		if va, ok := o.(*storagev1.VolumeAttachment); !ok || va.Name != "va-a1" {
			objs = append(objs, o)
		}
	}
	f.objects = objs
	f.start(stale)
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions(
		"delete volumeattachments /va-a1 uid=uid-va-va-a1",
		"delete volumeattachments /va-b1 uid=uid-va-va-b1",
		"delete pods app/db-0 grace=0 uid=uid-app-db-0")
	if got := testutil.ToFloat64(f.ctrl.metrics.AttachmentsDeleted); got != 1 {
		t.Errorf("attachments deleted = %v, want 1 (va-a1 was already gone)", got)
	}
}

func TestController_SyncPod_AttachmentFailureKeepsPod(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	f.start()
	f.client.PrependReactor("delete", "volumeattachments", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is sad")
	})
	err := f.ctrl.syncPod(context.Background(), "app", "db-0")
	if err == nil || !strings.Contains(err.Error(), "va-a1") {
		t.Fatalf("err = %v, want a retryable error naming va-a1", err)
	}
	f.expectActions("delete volumeattachments /va-a1 uid=uid-va-va-a1")
	f.expectEvents("Warning " + EventReapFailed)
}

func TestController_SyncPod_ReplacedPodIsLeftAlone(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	f.start()
	f.client.PrependReactor("delete", "pods", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "db-0", errors.New("UID precondition failed"))
	})
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatalf("a UID conflict means the pod was replaced; got %v", err)
	}
	if got := testutil.ToFloat64(f.ctrl.metrics.PodsDeleted.WithLabelValues("StatefulSet", string(PolicyDeleteStatefulSetPod))); got != 0 {
		t.Errorf("pods deleted = %v, want 0", got)
	}
}

func TestController_SyncPod_GonePodIsNil(t *testing.T) {
	f := newFixture(t, PolicyDeleteBoth)
	f.start()
	if err := f.ctrl.syncPod(context.Background(), "app", "nope"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
}

func TestController_SyncPod_DeploymentPodOnDeletedNode(t *testing.T) {
	f := newFixture(t, PolicyDeleteDeploymentPod)
	pod := terminating(newPod("app", "web-5d9-x", "gone", controllerRef("apps/v1", "ReplicaSet", "web-5d9", "uid-rs"),
		pvcVolume("data", "data-web")), -time.Second)
	f.objects = append(f.objects, pod,
		newRS("app", "web-5d9", "uid-rs", controllerRef("apps/v1", "Deployment", "web", "uid-d")),
		newPVC("app", "data-web", "pv-w", nil), newPV("pv-w", vigil.DriverName), newVA("va-w", "pv-w", "gone"))
	f.start()
	if err := f.ctrl.syncPod(context.Background(), "app", "web-5d9-x"); err != nil {
		t.Fatal(err)
	}
	// A node missing from the cache is confirmed deleted by a live GET before its
	// deletion counts as proof.
	f.expectActions("get nodes /gone", "delete volumeattachments /va-w uid=uid-va-va-w", "delete pods app/web-5d9-x grace=0 uid=uid-app-web-5d9-x")
	if got := testutil.ToFloat64(f.ctrl.metrics.PodsDeleted.WithLabelValues("Deployment", string(PolicyDeleteDeploymentPod))); got != 1 {
		t.Errorf("pods deleted = %v", got)
	}
}

// A reap deletes only the attachments that are attached: one Kubernetes still
// attaches is left to it (see attachmentGoes).
func TestController_SyncPod_LeavesAnAttachInProgress(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	for _, o := range f.objects {
		if va, ok := o.(*storagev1.VolumeAttachment); ok && va.Name == "va-b1" {
			va.Status.Attached = false
		}
	}
	f.start()
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions(
		"delete volumeattachments /va-a1 uid=uid-va-va-a1",
		"delete pods app/db-0 grace=0 uid=uid-app-db-0")
}

// TestController_SyncPod_InlineNetworkVolumeStopsTheFastReap: a pod whose vigil
// volume is proven fenced but which also mounts an inline nfs share is not
// force-deleted (the zombie could still write to the share), and the Event names
// the share. The pod goes through the reaper's slim cache, as in production.
func TestController_SyncPod_InlineNetworkVolumeStopsTheFastReap(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	pod := f.objects[0].(*corev1.Pod)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "share",
		VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas.example.com", Path: "/exports/db"}}})
	f.start()
	ctx := context.Background()
	f.ctrl.nodes.setIsolated("node-1", true, t0.Add(-4*time.Second))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	// The pod will never be reaped on the fast trigger, so its claim is not
	// fenced either: a fence would strand it.
	if !f.ctrl.nodes.fenced("node-1") || !f.backend.live("node-1", "handle-pv-a") {
		t.Fatalf("node-1 fenced %t, the pod's claim live %t; want the node fenced and the claim left live",
			f.ctrl.nodes.fenced("node-1"), f.backend.live("node-1", "handle-pv-a"))
	}
	f.events()
	f.client.ClearActions()
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	evs := f.expectEvents("Normal " + EventPodNotReaped)
	if len(evs) == 1 && (!strings.Contains(evs[0], `volume "share" (inline nfs)`) || !strings.Contains(evs[0], string(ReasonUnprovableVolume))) {
		t.Errorf("event %q does not name the nfs volume that stopped the reap", evs[0])
	}
	if got := testutil.ToFloat64(f.ctrl.metrics.Decisions.WithLabelValues("skip", string(ReasonUnprovableVolume))); got != 1 {
		t.Errorf("decisions = %v", got)
	}
}
