package controller

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	core "k8s.io/client-go/testing"

	"github.com/vigil-storage/vigil"
)

func TestDecideAttachment_Table(t *testing.T) {
	down := NodeVerdict{State: NodeDownUnknown}
	va := &Attachment{Name: "va", UID: "u", PVName: "pv", Attached: true}
	attaching := &Attachment{Name: "va", UID: "u", PVName: "pv"}
	del := Action{Kind: ActionDeleteVolumeAttachment, Name: "va", UID: "u", PVName: "pv"}
	clr := Action{Kind: ActionClearVolumeInUse, Name: "kubernetes.io/csi/driver.vigil.io^h", PVName: "pv"}
	base := func(mod func(v *volumeOnNode)) *volumeOnNode {
		v := &volumeOnNode{PVName: "pv", Driver: vigil.DriverName, Handle: "h", Attachment: va, InUse: true,
			UniqueName: "kubernetes.io/csi/driver.vigil.io^h", Replacement: "app/db-0", Proven: true}
		if mod != nil {
			mod(v)
		}
		return v
	}
	set := func(p AttachmentPolicy) *Settings {
		return &Settings{AttachmentPolicy: p, BackendDriver: vigil.DriverName, ExtraProtectedProvisioners: []string{otherDriver}}
	}
	cases := []struct {
		name   string
		vol    *volumeOnNode
		node   NodeVerdict
		set    *Settings
		reason Reason
		acts   []Action
		after  time.Duration
	}{
		{"a node that is not down keeps its attachments", base(nil), NodeVerdict{State: NodeReady}, set(AttachmentImmediate), ReasonAttachNodeNotDown, nil, 0},
		{"never does nothing", base(nil), down, set(AttachmentNever), ReasonAttachPolicyNever, nil, 0},
		{"a pod still on the node keeps it", base(func(v *volumeOnNode) { v.PodsOnNode = []string{"app/db-0"} }), down,
			set(AttachmentImmediate), ReasonAttachPodsOnNode, nil, 0},
		{"wait without a replacement waits", base(func(v *volumeOnNode) { v.Replacement = "" }), down, set(AttachmentWait),
			ReasonAttachNoReplacement, nil, 0},
		{"wait with a replacement frees it", base(nil), down, set(AttachmentWait), ReasonAttachFreed, []Action{del, clr}, 0},
		{"immediate frees it without a replacement", base(func(v *volumeOnNode) { v.Replacement = "" }), down, set(AttachmentImmediate),
			ReasonAttachFreed, []Action{del, clr}, 0},
		{"not yet proven: the attachment goes (its unpublish fences), volumesInUse waits for the proof",
			base(func(v *volumeOnNode) { v.Proven = false }), down, set(AttachmentImmediate), ReasonAttachFreed, []Action{del}, attachmentProofRecheck},
		{"attachment already going, not proven: wait for the proof",
			base(func(v *volumeOnNode) { v.Proven = false; v.Attachment = &Attachment{Name: "va", Deleting: true} }), down,
			set(AttachmentImmediate), ReasonAttachAwaitingFence, nil, attachmentProofRecheck},
		{"only volumesInUse left and proven: clear it", base(func(v *volumeOnNode) { v.Attachment = nil }), down, set(AttachmentImmediate),
			ReasonAttachFreed, []Action{clr}, 0},
		{"nothing left", base(func(v *volumeOnNode) { v.Attachment = nil; v.InUse = false }), down, set(AttachmentImmediate),
			ReasonAttachNothingToDo, nil, 0},
		{"an attachment Kubernetes still attaches is left to it; a proven volumesInUse entry still goes",
			base(func(v *volumeOnNode) { v.Attachment = attaching }), down, set(AttachmentImmediate), ReasonAttachFreed, []Action{clr}, 0},
		{"only an attachment Kubernetes still attaches: nothing to do, and the reason says why",
			base(func(v *volumeOnNode) { v.Attachment = attaching; v.InUse = false }), down, set(AttachmentWait), ReasonAttachAttaching, nil, 0},
		{"another driver on a node merely unknown is not proven: Kubernetes' timeout stands",
			base(func(v *volumeOnNode) { v.Driver = otherDriver }), down, set(AttachmentImmediate), ReasonAttachNotProvenFenced, nil, 0},
		{"another driver on an out-of-service node: the attachment may go, volumesInUse is Kubernetes' business",
			base(func(v *volumeOnNode) { v.Driver = otherDriver }), NodeVerdict{State: NodeDownOutOfService}, set(AttachmentImmediate),
			ReasonAttachFreed, []Action{del}, 0},
		{"an unprotected driver is never touched", base(func(v *volumeOnNode) { v.Driver = "nfs.example.com" }), down,
			set(AttachmentImmediate), ReasonAttachNotProtected, nil, 0},
		{"without a fencing back end nothing of Vigil's is proven", base(nil), down,
			&Settings{AttachmentPolicy: AttachmentImmediate}, ReasonAttachNotProvenFenced, nil, 0},
		{"a deleted node's status cannot be patched", base(nil), NodeVerdict{State: NodeDownDeleted}, set(AttachmentImmediate),
			ReasonAttachFreed, []Action{del}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decideAttachment(tc.vol, tc.node, tc.set)
			if d.Reason != tc.reason || !reflect.DeepEqual(d.Actions, tc.acts) || d.RecheckAfter != tc.after {
				t.Errorf("got %s %+v recheck %s, want %s %+v recheck %s", d.Reason, d.Actions, d.RecheckAfter, tc.reason, tc.acts, tc.after)
			}
		})
	}
}

func TestParseUniqueVolumeName(t *testing.T) {
	for in, want := range map[string][2]string{
		"kubernetes.io/csi/driver.vigil.io^vol-1": {"driver.vigil.io", "vol-1"},
		"kubernetes.io/csi/d^a^b":                 {"d", "a^b"},
	} {
		d, h, ok := parseUniqueVolumeName(in)
		if !ok || d != want[0] || h != want[1] {
			t.Errorf("%q → %q %q %t", in, d, h, ok)
		}
		if uniqueVolumeName(d, h) != in {
			t.Errorf("round trip of %q gives %q", in, uniqueVolumeName(d, h))
		}
	}
	for _, bad := range []string{"", "kubernetes.io/csi/", "kubernetes.io/csi/d^", "kubernetes.io/csi/^h", "kubernetes.io/aws-ebs/x", "d^h"} {
		if _, _, ok := parseUniqueVolumeName(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// attachFixture: node-1 down (Unknown) and fenced by Vigil, its pod already
// reaped; the replacement db-0 Pending on node-2; the volume still attached to
// node-1 and listed in its volumesInUse next to another volume.
func attachFixture(t *testing.T, policy AttachmentPolicy) *fixture {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	f.settings.attach, f.settings.fast = policy, true
	n1 := newNode("node-1", corev1.ConditionUnknown, -time.Hour)
	n1.Status.VolumesInUse = []corev1.UniqueVolumeName{"kubernetes.io/csi/driver.vigil.io^handle-pv-a", "kubernetes.io/csi/driver.vigil.io^handle-pv-z"}
	pv := newPV("pv-a", vigil.DriverName)
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "app", Name: "data-db-0"}
	repl := newPod("app", "db-0", "node-2", controllerRef("apps/v1", "StatefulSet", "db", "uid-sts"), pvcVolume("data", "data-db-0"))
	repl.UID, repl.Status.Phase = "uid-new", corev1.PodPending
	f.objects = append(f.objects, n1, newNode("node-2", corev1.ConditionTrue, -time.Hour), repl,
		newPVC("app", "data-db-0", "pv-a", nil), pv, newVA("va-a1", "pv-a", "node-1"))
	f.backend.grant("node-1", "handle-pv-a")
	return f
}

func TestController_SyncAttachments_WaitPolicyFreesForTheReplacement(t *testing.T) {
	f := attachFixture(t, AttachmentWait)
	f.start()
	ctx := context.Background()
	if _, err := f.backend.fenceAll(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.ctrl.nodes.markFenced("node-1", t0, fencePlan{})
	if err := f.ctrl.syncAttachments(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete volumeattachments /va-a1 uid=uid-va-va-a1",
		"get nodes /node-1", "patch nodes/status /node-1 "+string(types.StrategicMergePatchType))
	var patch struct {
		Metadata struct{ ResourceVersion string }
		Status   struct{ VolumesInUse []string }
	}
	for _, a := range f.client.Actions() {
		if p, ok := a.(core.PatchAction); ok {
			if err := json.Unmarshal(p.GetPatch(), &patch); err != nil {
				t.Fatal(err)
			}
		}
	}
	if patch.Metadata.ResourceVersion != "1" || !reflect.DeepEqual(patch.Status.VolumesInUse, []string{"kubernetes.io/csi/driver.vigil.io^handle-pv-z"}) {
		t.Errorf("patch %+v: want the list without handle-pv-a, under the resourceVersion read", patch)
	}
	n, _ := f.client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if len(n.Status.VolumesInUse) != 1 || n.Status.VolumesInUse[0] != "kubernetes.io/csi/driver.vigil.io^handle-pv-z" {
		t.Errorf("volumesInUse %v", n.Status.VolumesInUse)
	}
	f.expectEvents("Normal "+EventVolumeAttachmentDeleted, "Normal "+EventVolumeInUseCleared)
}

func TestController_SyncAttachments_NeverAndNoReplacementAndPodPresent(t *testing.T) {
	ctx := context.Background()
	f := attachFixture(t, AttachmentNever)
	f.start()
	if err := f.ctrl.syncAttachments(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	evs := f.expectEvents("Normal " + EventAttachmentNotFreed)
	if len(evs) == 1 && !strings.Contains(evs[0], "6-minute") {
		t.Errorf("event %q does not say Kubernetes' timeout applies", evs[0])
	}

	// The old pod is still there (not reaped): nothing moves, whatever the policy.
	f = attachFixture(t, AttachmentImmediate)
	f.objects = append(f.objects, newPod("app", "db-0-old", "node-1", nil, pvcVolume("data", "data-db-0")))
	f.start()
	if err := f.ctrl.syncAttachments(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
}

func TestController_SyncAttachments_NotProvenDeletesAttachmentKeepsVolumeInUse(t *testing.T) {
	f := attachFixture(t, AttachmentImmediate)
	f.start()
	ctx := context.Background()
	// Not fenced at the datapath (the fast trigger off, say): the attachment's
	// deletion fences through ControllerUnpublish; volumesInUse waits for proof.
	if err := f.ctrl.syncAttachments(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete volumeattachments /va-a1 uid=uid-va-va-a1")
	n, _ := f.client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if len(n.Status.VolumesInUse) != 2 {
		t.Errorf("volumesInUse changed without proof: %v", n.Status.VolumesInUse)
	}
}

// The chaos suite's stall: the attach-detach controller's pod watch missed a
// StatefulSet pod's force-delete (the API server had just restarted), so it
// attached the volume to the down node again for the pod it still believed
// there. Deleting that not-yet-attached VolumeAttachment made the controller
// wait out its 2-minute attach timeout on the volume, and the replacement's
// attach with it. An attachment that is not attached is left to Kubernetes.
func TestController_SyncAttachments_LeavesAnAttachInProgress(t *testing.T) {
	ctx := context.Background()
	f := attachFixture(t, AttachmentImmediate)
	for _, o := range f.objects {
		if va, ok := o.(*storagev1.VolumeAttachment); ok {
			va.Status.Attached = false
		}
	}
	f.start()
	if _, err := f.backend.fenceAll(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.ctrl.nodes.markFenced("node-1", t0, fencePlan{})
	if err := f.ctrl.syncAttachments(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	// volumesInUse is still cleared (the fence is proven); the attachment stays.
	f.expectActions("get nodes /node-1", "patch nodes/status /node-1 "+string(types.StrategicMergePatchType))
	if _, err := f.client.StorageV1().VolumeAttachments().Get(ctx, "va-a1", metav1.GetOptions{}); err != nil {
		t.Errorf("the attachment in progress was deleted: %v", err)
	}
	f.expectEvents("Normal " + EventVolumeInUseCleared)

	// Nothing but the attachment in progress: an Event says why nothing happens.
	f = attachFixture(t, AttachmentImmediate)
	for _, o := range f.objects {
		switch o := o.(type) {
		case *storagev1.VolumeAttachment:
			o.Status.Attached = false
		case *corev1.Node:
			o.Status.VolumesInUse = nil
		}
	}
	f.start()
	f.ctrl.nodes.markFenced("node-1", t0, fencePlan{})
	if err := f.ctrl.syncAttachments(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	evs := f.expectEvents("Normal " + EventAttachmentNotFreed)
	if len(evs) == 1 && !strings.Contains(evs[0], "not attached") {
		t.Errorf("event %q does not say the attachment is not attached", evs[0])
	}
}
