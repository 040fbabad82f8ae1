package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	core "k8s.io/client-go/testing"

	"github.com/vigil-storage/vigil"
)

var nodesResource = corev1.SchemeGroupVersion.WithResource("nodes")

// nodeServer makes the fake clientset answer Node patches the way the API
// server does, which the fake's tracker does not: a patch whose
// metadata.resourceVersion is not the Node's current one is a 409 Conflict, and
// every write moves the resourceVersion on. meanwhile, when set, runs before
// the first patch is judged: another writer changing the Node between the
// controller's GET and its PATCH.
type nodeServer struct {
	t         *testing.T
	f         *fixture
	patches   int
	conflicts int
	meanwhile func(*corev1.Node)
}

func serveNodes(f *fixture) *nodeServer {
	s := &nodeServer{t: f.t, f: f}
	f.client.PrependReactor("patch", "nodes", s.patch)
	return s
}

func (s *nodeServer) current(name string) *corev1.Node {
	obj, err := s.f.client.Tracker().Get(nodesResource, "", name)
	if err != nil {
		s.t.Fatal(err)
	}
	return obj.(*corev1.Node)
}

func (s *nodeServer) write(n *corev1.Node) {
	rv, _ := strconv.Atoi(n.ResourceVersion)
	n.ResourceVersion = strconv.Itoa(rv + 1)
	if err := s.f.client.Tracker().Update(nodesResource, n, ""); err != nil {
		s.t.Fatal(err)
	}
}

func (s *nodeServer) patch(a core.Action) (bool, runtime.Object, error) {
	p := a.(core.PatchAction)
	s.patches++
	if s.meanwhile != nil {
		n := s.current(p.GetName())
		s.meanwhile(n)
		s.write(n)
		s.meanwhile = nil
	}
	cur := s.current(p.GetName())
	var pre struct {
		Metadata struct{ ResourceVersion string }
	}
	if err := json.Unmarshal(p.GetPatch(), &pre); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	if pre.Metadata.ResourceVersion != "" && pre.Metadata.ResourceVersion != cur.ResourceVersion {
		s.conflicts++
		return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), cur.Name,
			errors.New("the object has been modified; please apply your changes to the latest version and try again"))
	}
	old, _ := json.Marshal(cur)
	merged, err := strategicpatch.StrategicMergePatch(old, p.GetPatch(), corev1.Node{})
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	out := &corev1.Node{}
	if err := json.Unmarshal(merged, out); err != nil {
		return true, nil, err
	}
	out.ResourceVersion = cur.ResourceVersion
	s.write(out)
	return true, out, nil
}

func taintKeys(n *corev1.Node) []string {
	var out []string
	for _, t := range n.Spec.Taints {
		out = append(out, t.Key)
	}
	return out
}

// TestModifyNode_TaintAddedMeanwhileIsAConflictNotLost: someone taints the node
// between the controller's GET and its PATCH. The patch names the
// resourceVersion read, so the server answers 409; the controller reads again
// and sends both taints.
func TestModifyNode_TaintAddedMeanwhileIsAConflictNotLost(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	f.objects = append(f.objects, newNode("node-1", corev1.ConditionUnknown, -time.Hour))
	f.start()
	srv := serveNodes(f)
	srv.meanwhile = func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule})
	}
	if err := f.ctrl.fence.taintFenced(context.Background(), "node-1", FenceReasonNodeDown); err != nil {
		t.Fatal(err)
	}
	got := taintKeys(srv.current("node-1"))
	if srv.conflicts != 1 || srv.patches != 2 || len(got) != 2 || got[0] != "example.com/maintenance" || got[1] != vigil.FencedTaintKey {
		t.Fatalf("%d patches, %d conflicts, taints %v: want a conflict, a second patch and both taints", srv.patches, srv.conflicts, got)
	}
}

// TestModifyNode_VolumeReportedMeanwhileIsAConflictNotLost: the kubelet reports
// a new volume in use while the controller takes another out; the new entry
// survives.
func TestModifyNode_VolumeReportedMeanwhileIsAConflictNotLost(t *testing.T) {
	f := attachFixture(t, AttachmentImmediate)
	f.start()
	srv := serveNodes(f)
	const added = "kubernetes.io/csi/driver.vigil.io^handle-pv-new"
	srv.meanwhile = func(n *corev1.Node) { n.Status.VolumesInUse = append(n.Status.VolumesInUse, added) }
	if err := f.ctrl.attach.clearVolumeInUse(context.Background(), "node-1", "kubernetes.io/csi/driver.vigil.io^handle-pv-a"); err != nil {
		t.Fatal(err)
	}
	got := srv.current("node-1").Status.VolumesInUse
	want := []corev1.UniqueVolumeName{"kubernetes.io/csi/driver.vigil.io^handle-pv-z", added}
	if srv.conflicts != 1 || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("%d conflicts, volumesInUse %v: want a conflict and %v", srv.conflicts, got, want)
	}
	if got := f.actions(); len(got) != 4 || got[3] != "patch nodes/status /node-1 application/strategic-merge-patch+json" {
		t.Errorf("actions %q: want get, patch, get, patch of the status", got)
	}
}

// TestModifyNode_OnlyA409IsAConflict: a node named test-node-1 whose patch is
// refused with a 400 or a 422 that mention "test" is not mistaken for a
// conflict: the error comes back as the server gave it, after one patch.
func TestModifyNode_OnlyA409IsAConflict(t *testing.T) {
	for name, refusal := range map[string]error{
		"400": apierrors.NewBadRequest(`admission webhook "policy.example.com" denied the request: node "test-node-1" is under test`),
		"422": apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", corev1.Resource("nodes"), "test-node-1",
			"the server rejected our request due to an error in our request", 0, false),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, PolicyDeleteStatefulSetPod)
			f.objects = append(f.objects, newNode("test-node-1", corev1.ConditionUnknown, -time.Hour))
			f.start()
			patches := 0
			f.client.PrependReactor("patch", "nodes", func(core.Action) (bool, runtime.Object, error) {
				patches++
				return true, nil, refusal
			})
			err := f.ctrl.fence.taintFenced(context.Background(), "test-node-1", FenceReasonNodeDown)
			if patches != 1 || apierrors.IsConflict(err) || apierrors.ReasonForError(err) != apierrors.ReasonForError(refusal) {
				t.Fatalf("%d patches, err %v: want one patch and the server's own %s", patches, err, apierrors.ReasonForError(refusal))
			}
		})
	}
}

// TestModifyNode_NoResourceVersionNoWrite: a Node read without a
// resourceVersion gives no precondition, so it is not written at all.
func TestModifyNode_NoResourceVersionNoWrite(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	n := newNode("node-1", corev1.ConditionUnknown, -time.Hour)
	n.ResourceVersion = ""
	f.objects = append(f.objects, n)
	f.start()
	err := f.ctrl.fence.taintFenced(context.Background(), "node-1", FenceReasonNodeDown)
	if err == nil {
		t.Fatal("a node without a resourceVersion was patched")
	}
	f.expectActions("get nodes /node-1")
	if live, _ := f.client.CoreV1().Nodes().Get(context.Background(), "node-1", metav1.GetOptions{}); fencedTaint(live) != nil {
		t.Fatal("tainted")
	}
}
