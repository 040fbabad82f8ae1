package sandbox

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vigil-storage/vigil/deploy/deploytest"
	"github.com/vigil-storage/vigil/sandbox/images"
)

// The overlay built into the binary is deploy/overlays/sandbox as kustomize
// builds it from the tree.
func TestRenderDeploy_EmbeddedIsTheOverlay(t *testing.T) {
	got, err := RenderDeploy("")
	if err != nil {
		t.Fatal(err)
	}
	want, err := deploytest.Build(filepath.Join(deploytest.Dir(), InstallOverlay))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RenderDeploy(\"\") renders %d objects that differ from kustomize build deploy/%s (%d)", len(got), InstallOverlay, len(want))
	}
}

// Every image the overlay runs is one `make image` builds under that
// reference, and none would be pulled.
func TestRenderDeploy_ImagesBuiltHere(t *testing.T) {
	objs, err := RenderDeploy("")
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := ImagesOf(objs)
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]bool{}
	for _, n := range images.Names() {
		ref, _ := images.Ref(n, "dev", Pins())
		built[ref] = true
	}
	for _, img := range imgs {
		if !built[img] {
			t.Errorf("the sandbox overlay runs %s, which `make image` does not build (%v)", img, built)
		}
	}
	if len(imgs) == 0 {
		t.Error("no image")
	}
}

func TestImagesOf_RefusesPulls(t *testing.T) {
	for _, tc := range []struct {
		image  string
		policy corev1.PullPolicy
	}{
		{"localhost/vigil:latest", ""},
		{"localhost/vigil", ""},
		{"localhost:5000/vigil", corev1.PullIfNotPresent},
		{"localhost/vigil:dev", corev1.PullAlways},
	} {
		d := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: metav1.ObjectMeta{Name: "d"}}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Image: tc.image, ImagePullPolicy: tc.policy}}
		u, err := toUnstructured(d)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ImagesOf([]*unstructured.Unstructured{u})
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.image) || !strings.Contains(err.Error(), "never pulls") {
			t.Errorf("%s (%q): %v, want ErrInvalidConfig naming the image and saying the sandbox never pulls", tc.image, tc.policy, err)
		}
	}
}

func TestComponentStates(t *testing.T) {
	two := int32(2)
	dep := func(gen, obs int64, upd, avail, total int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: &two},
			Status: appsv1.DeploymentStatus{ObservedGeneration: obs, UpdatedReplicas: upd, AvailableReplicas: avail, Replicas: total}}
	}
	ss := func(ready int32, cur, upd string) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{ReadyReplicas: ready, UpdatedReplicas: ready, CurrentRevision: cur, UpdateRevision: upd}}
	}
	ds := func(desired, ready, updated int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, NumberReady: ready, UpdatedNumberScheduled: updated}}
	}
	job := func(t batchv1.JobConditionType) *batchv1.Job {
		return &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: t, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}}}
	}
	for _, tc := range []struct {
		name          string
		st            componentState
		ready, failed bool
		summary       string
	}{
		{"deployment ready", deploymentState(dep(3, 3, 2, 2, 2)), true, false, "2/2 available"},
		{"deployment one available", deploymentState(dep(3, 3, 2, 1, 2)), false, false, "1/2 available"},
		{"deployment old generation", deploymentState(dep(4, 3, 2, 2, 2)), false, false, ""},
		{"deployment rolling, a third pod", deploymentState(dep(3, 3, 2, 2, 3)), false, false, ""},
		{"statefulset ready", statefulSetState(ss(1, "r1", "r1")), true, false, "1/1 ready"},
		{"statefulset updating", statefulSetState(ss(1, "r1", "r2")), false, false, ""},
		{"statefulset not ready", statefulSetState(ss(0, "r1", "r1")), false, false, "0/1 ready"},
		{"daemonset ready", daemonSetState(ds(3, 3, 3)), true, false, "3/3 nodes ready"},
		{"daemonset on no node", daemonSetState(ds(0, 0, 0)), false, false, "0/0"},
		{"daemonset two of three", daemonSetState(ds(3, 2, 3)), false, false, "2/3"},
		{"job complete", jobState(job(batchv1.JobComplete)), true, false, ""},
		{"job failed", jobState(job(batchv1.JobFailed)), false, true, "failed: BackoffLimitExceeded"},
		{"job running", jobState(&batchv1.Job{Status: batchv1.JobStatus{Active: 1}}), false, false, "1 active"},
	} {
		if tc.st.ready != tc.ready || tc.st.failed != tc.failed || !strings.Contains(tc.st.summary, tc.summary) {
			t.Errorf("%s: ready %t failed %t %q; want %t %t and %q", tc.name, tc.st.ready, tc.st.failed, tc.st.summary, tc.ready, tc.failed, tc.summary)
		}
	}
}

func TestPodWaitingOn(t *testing.T) {
	cond := func(typ corev1.PodConditionType, s corev1.ConditionStatus, msg string) corev1.PodCondition {
		return corev1.PodCondition{Type: typ, Status: s, Message: msg}
	}
	now := metav1.NewTime(time.Now())
	for _, tc := range []struct {
		name    string
		pod     corev1.Pod
		warning string
		want    string
	}{
		{"ready", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionTrue, "")}}}, "", ""},
		{"succeeded", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, "", ""},
		{"unschedulable", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionFalse, "0/3 nodes are available:\n 3 node(s) didn't match")}}},
			"", "not scheduled: 0/3 nodes are available: 3 node(s) didn't match"},
		{"image missing", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "engine",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "image not present"}}}}}},
			"", "container engine ErrImageNeverPull: image not present"},
		{"creating, a mount failing", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "manager",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}},
			"FailedMount: secret \"vigil-manager-tls\" not found", "container manager ContainerCreating"},
		{"init waiting on a warning", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "c",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}}},
			"FailedMount: no disk", "FailedMount: no disk"},
		{"crashed", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "datapath",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}}},
			"", "container datapath exited 1 (Error)"},
		{"running, not ready", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "engine",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}},
			"", "container engine running, not ready yet"},
		{"deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, "", "being deleted"},
	} {
		if got := podWaitingOn(&tc.pod, tc.warning); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}
