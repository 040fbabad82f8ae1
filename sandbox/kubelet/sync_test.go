package kubelet

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/google/go-cmp/cmp"
	vigil "github.com/vigil-storage/vigil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

var (
	stage1   = "NodeStageVolume vol-1 plugins/kubernetes.io/csi/driver.vigil.io/" + sha("vol-1") + "/globalmount"
	unstage1 = "NodeUnstageVolume vol-1 plugins/kubernetes.io/csi/driver.vigil.io/" + sha("vol-1") + "/globalmount"
)

func sha(handle string) string {
	return filepath.Base(filepath.Dir(StagingPath("/", "d", handle, "pv", false)))
}

func publish(handle, pod, pv string) string {
	return "NodePublishVolume " + handle + " pods/uid-" + pod + "/volumes/kubernetes.io~csi/" + pv + "/mount"
}

func unpublish(handle, pod, pv string) string {
	return "NodeUnpublishVolume " + handle + " pods/uid-" + pod + "/volumes/kubernetes.io~csi/" + pv + "/mount"
}

func wantCalls(t *testing.T, f *fixture, want ...string) {
	t.Helper()
	if diff := cmp.Diff(want, f.csi.takeCalls()); diff != "" {
		t.Errorf("CSI calls (-want +got):\n%s", diff)
	}
}

func wantPatches(t *testing.T, f *fixture, want ...[]string) {
	t.Helper()
	if diff := cmp.Diff(want, f.inUsePatches()); diff != "" {
		t.Errorf("volumesInUse patches (-want +got):\n%s", diff)
	}
}

func TestKubelet_Sync_AttachedStagesAndPublishes(t *testing.T) {
	f := newFixture(t, append(volume1(), newPod("web", claimVolume("data", "claim-1")))...)
	f.sync()
	wantCalls(t, f, stage1, publish("vol-1", "web", "pv-1"))
	wantPatches(t, f, []string{inUse1})
	if got := f.nodeInUse(); !slices.Equal(got, []string{inUse1}) {
		t.Errorf("node volumesInUse = %v", got)
	}
	st := f.csi.lastStage()
	if st.GetPublishContext()[vigil.PublishContextEpochKey] != "3" {
		t.Errorf("stage publish context = %v, want the VA's attachmentMetadata (epoch 3)", st.GetPublishContext())
	}
	mnt := st.GetVolumeCapability().GetMount()
	if mnt.GetFsType() != "ext4" || !slices.Equal(mnt.GetMountFlags(), []string{"noatime"}) ||
		st.GetVolumeCapability().GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("stage capability = %v", st.GetVolumeCapability())
	}
	if st.GetVolumeContext()["size"] != "1Gi" {
		t.Errorf("stage volume context = %v, want the PV's volumeAttributes", st.GetVolumeContext())
	}
	pub := f.csi.publishes()[0]
	if pub.GetStagingTargetPath() != st.GetStagingTargetPath() || pub.GetReadonly() || pub.GetPublishContext()[vigil.PublishContextEpochKey] != "3" {
		t.Errorf("publish request = %v", pub)
	}
	if _, ok := pub.GetVolumeContext()[podUIDKey]; ok {
		t.Errorf("pod info in volume context without a CSIDriver asking for it: %v", pub.GetVolumeContext())
	}
	if ev := f.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal "+ReasonSuccessfulMount) {
		t.Errorf("events = %v, want one %s", ev, ReasonSuccessfulMount)
	}
	f.sync() // nothing changed: no call, no patch
	wantCalls(t, f)
	wantPatches(t, f, []string{inUse1})
}

func TestKubelet_Sync_NotAttachedDoesNothing(t *testing.T) {
	for name, va := range map[string]runtime.Object{
		"attached false": newVA("pv-1", "vol-1", false, ""),
		"other node": func() runtime.Object {
			v := newVA("pv-1", "vol-1", true, "3")
			v.Spec.NodeName = "node-b"
			return v
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, newPVC("claim-1", "pv-1"), newPV("pv-1", "vol-1"), va, newPod("web", claimVolume("data", "claim-1")))
			f.sync()
			wantCalls(t, f)
			// Reported in use as the kubelet does for a volume a pod waits for.
			wantPatches(t, f, []string{inUse1})
		})
	}
	t.Run("no attachment", func(t *testing.T) {
		f := newFixture(t, newPVC("claim-1", "pv-1"), newPV("pv-1", "vol-1"), newPod("web", claimVolume("data", "claim-1")))
		f.sync()
		wantCalls(t, f)
		f.add(newVA("pv-1", "vol-1", true, "7")) // the attacher catches up
		f.sync()
		wantCalls(t, f, stage1, publish("vol-1", "web", "pv-1"))
	})
}

func TestKubelet_Sync_PodDeletedUnpublishesAndUnstages(t *testing.T) {
	pod := newPod("web", claimVolume("data", "claim-1"))
	f := newFixture(t, append(volume1(), pod)...)
	f.sync()
	f.csi.takeCalls()
	target := TargetPath(f.root, pod.UID, "pv-1", false)
	if err := os.MkdirAll(target, 0o750); err != nil { // as the node service would
		t.Fatal(err)
	}
	f.remove(pod)
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "web", "pv-1"), unstage1)
	wantPatches(t, f, []string{inUse1}, nil)
	if got := f.nodeInUse(); len(got) != 0 {
		t.Errorf("node volumesInUse = %v, want none", got)
	}
	if _, err := os.Stat(filepath.Join(f.root, "pods", string(pod.UID))); !os.IsNotExist(err) {
		t.Errorf("pod directory left behind: %v", err)
	}
	st, err := loadActual(f.root)
	if err != nil || len(st.Volumes) != 0 {
		t.Errorf("state after teardown = %v, %v; want empty", st.Volumes, err)
	}
}

func TestKubelet_Sync_TerminalPodUnpublishes(t *testing.T) {
	pod := newPod("job", claimVolume("data", "claim-1"))
	f := newFixture(t, append(volume1(), pod)...)
	f.sync()
	f.csi.takeCalls()
	done := pod.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	f.update(done)
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "job", "pv-1"), unstage1)
	wantPatches(t, f, []string{inUse1}, nil)
}

func TestKubelet_Sync_TerminatingPodKeepsMountsButGetsNoNewOnes(t *testing.T) {
	pod := newPod("web", claimVolume("data", "claim-1"))
	f := newFixture(t, append(volume1(), pod)...)
	f.sync()
	f.csi.takeCalls()
	term := pod.DeepCopy()
	term.DeletionTimestamp = ptr.To(metav1.Now())
	f.update(term)
	f.sync()
	wantCalls(t, f)

	g := newFixture(t, append(volume1(), term)...)
	g.sync()
	wantCalls(t, g)
}

func TestKubelet_Sync_SharedRWXVolumeStagedOncePublishedTwice(t *testing.T) {
	a, b := newPod("a", claimVolume("data", "claim-1")), newPod("b", claimVolume("shared", "claim-1"))
	f := newFixture(t, newPVC("claim-1", "pv-1"), newPV("pv-1", "vol-1", corev1.ReadWriteMany),
		newVA("pv-1", "vol-1", true, "3"), a, b)
	f.sync()
	wantCalls(t, f, stage1, publish("vol-1", "a", "pv-1"), publish("vol-1", "b", "pv-1"))
	if m := f.csi.lastStage().GetVolumeCapability().GetAccessMode().GetMode(); m != csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER {
		t.Errorf("access mode = %v, want MULTI_NODE_MULTI_WRITER", m)
	}
	f.remove(a)
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "a", "pv-1"))
	f.remove(b)
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "b", "pv-1"), unstage1)
	wantPatches(t, f, []string{inUse1}, nil)
}

func TestKubelet_Sync_EphemeralVolume(t *testing.T) {
	pod := newPod("web", ephemeralVolume("scratch"))
	pvc := newPVC("web-scratch", "pv-e")
	pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web", UID: pod.UID, Controller: ptr.To(true)}}
	f := newFixture(t, pod, pvc, newPV("pv-e", "vol-e"), newVA("pv-e", "vol-e", true, "1"))
	f.sync()
	wantCalls(t, f, "NodeStageVolume vol-e plugins/kubernetes.io/csi/driver.vigil.io/"+sha("vol-e")+"/globalmount",
		publish("vol-e", "web", "pv-e"))
	wantPatches(t, f, []string{"kubernetes.io/csi/driver.vigil.io^vol-e"})
}

func TestKubelet_Sync_EphemeralClaimOfAnotherPodIsRefused(t *testing.T) {
	pod := newPod("web", ephemeralVolume("scratch"))
	pvc := newPVC("web-scratch", "pv-e")
	pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "uid-old-web", Controller: ptr.To(true)}}
	f := newFixture(t, pod, pvc, newPV("pv-e", "vol-e"), newVA("pv-e", "vol-e", true, "1"))
	f.sync()
	wantCalls(t, f)
	if w := f.warnings(); len(w) != 1 || !strings.Contains(w[0], "was not created for pod default/web") {
		t.Errorf("warnings = %v", w)
	}
}

func TestKubelet_Sync_OtherDriversIgnored(t *testing.T) {
	other := newPV("pv-o", "vol-o")
	other.Spec.CSI.Driver = "other.csi.example.com"
	host := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-h"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp"}}}}
	f := newFixture(t, newPVC("claim-o", "pv-o"), other, newPVC("claim-h", "pv-h"), host,
		newVA("pv-o", "vol-o", true, "1"),
		newPod("web", claimVolume("o", "claim-o"), claimVolume("h", "claim-h"),
			corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}))
	f.sync()
	wantCalls(t, f)
	wantPatches(t, f, nil) // the first sync clears whatever a previous run left
	if ev := f.events(); len(ev) != 0 {
		t.Errorf("events for volumes of another driver: %v", ev)
	}
}

func TestKubelet_Sync_UnboundClaimWaits(t *testing.T) {
	pvc := newPVC("claim-1", "")
	pvc.Status.Phase = corev1.ClaimPending
	f := newFixture(t, pvc, newPod("web", claimVolume("data", "claim-1")))
	f.sync()
	wantCalls(t, f)
	f.update(newPVC("claim-1", "pv-1"))
	f.add(newPV("pv-1", "vol-1"), newVA("pv-1", "vol-1", true, "3"))
	f.sync()
	wantCalls(t, f, stage1, publish("vol-1", "web", "pv-1"))
}

func TestKubelet_Sync_BadInputEventsAndNoCall(t *testing.T) {
	noHandle := newPV("pv-1", "")
	noCSI := newPV("pv-2", "vol-2")
	noCSI.Spec.CSI = nil
	noCSI.Annotations = map[string]string{provisionedByAnnotation: vigil.DriverName}
	noModes := newPV("pv-3", "vol-3")
	noModes.Spec.AccessModes = nil
	f := newFixture(t, newPVC("claim-1", "pv-1"), noHandle, newPVC("claim-2", "pv-2"), noCSI,
		newPVC("claim-3", "pv-3"), noModes, newVA("pv-3", "vol-3", true, "1"),
		newPod("web", claimVolume("a", "claim-1"), claimVolume("b", "claim-2"), claimVolume("c", "claim-3")))
	f.sync()
	f.sync() // the same problems are not reported twice
	wantCalls(t, f)
	w := f.warnings()
	if len(w) != 3 {
		t.Fatalf("warnings = %q, want 3", w)
	}
	for i, want := range []string{"empty spec.csi.volumeHandle", "has no spec.csi source", "spec.accessModes []"} {
		if !strings.HasPrefix(w[i], "Warning "+ReasonFailedMount) || !strings.Contains(w[i], want) {
			t.Errorf("warning %d = %q, want %s naming %q", i, w[i], ReasonFailedMount, want)
		}
	}
}

func TestKubelet_Sync_CSIErrorRetriedWithBackoffAndEvent(t *testing.T) {
	f := newFixture(t, append(volume1(), newPod("web", claimVolume("data", "claim-1")))...)
	f.csi.setFail("NodeStageVolume", status.Error(codes.Internal, "datapath unreachable"))
	f.sync()
	wantCalls(t, f, stage1)
	w := f.warnings()
	if len(w) != 1 || !strings.Contains(w[0], ReasonFailedMount+" MountVolume.MountDevice failed for volume \"pv-1\"") ||
		!strings.Contains(w[0], "datapath unreachable") {
		t.Errorf("warnings = %q", w)
	}
	f.sync() // still backing off
	wantCalls(t, f)
	f.clock.Step(DefaultBackoffInitial)
	f.sync() // fails again: the wait doubles
	wantCalls(t, f, stage1)
	f.clock.Step(DefaultBackoffInitial)
	f.sync()
	wantCalls(t, f)
	f.csi.setFail("NodeStageVolume", nil)
	f.clock.Step(DefaultBackoffInitial)
	f.sync()
	wantCalls(t, f, stage1, publish("vol-1", "web", "pv-1"))
}

func TestKubelet_Sync_PublishFailureIsTornDownWhenPodGoes(t *testing.T) {
	pod := newPod("web", claimVolume("data", "claim-1"))
	f := newFixture(t, append(volume1(), pod)...)
	f.csi.setFail("NodePublishVolume", status.Error(codes.Internal, "bind failed"))
	f.sync()
	wantCalls(t, f, stage1, publish("vol-1", "web", "pv-1"))
	if w := f.warnings(); len(w) != 1 || !strings.Contains(w[0], "MountVolume.SetUp failed") {
		t.Errorf("warnings = %q", w)
	}
	f.remove(pod) // the publish may have half-happened: it is undone
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "web", "pv-1"), unstage1)
	wantPatches(t, f, []string{inUse1}, nil)
}

func TestKubelet_Sync_UnstageFailureKeepsVolumeInUse(t *testing.T) {
	pod := newPod("web", claimVolume("data", "claim-1"))
	f := newFixture(t, append(volume1(), pod)...)
	f.sync()
	f.csi.takeCalls()
	f.csi.setFail("NodeUnstageVolume", status.Error(codes.Aborted, "busy"))
	f.remove(pod)
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "web", "pv-1"), unstage1)
	if got := f.nodeInUse(); !slices.Equal(got, []string{inUse1}) {
		t.Errorf("volumesInUse = %v: an entry may go only after unstage succeeded", got)
	}
	if w := f.warnings(); len(w) != 1 || !strings.Contains(w[0], ReasonFailedUnmount) {
		t.Errorf("warnings = %q", w)
	}
	f.csi.setFail("NodeUnstageVolume", nil)
	f.clock.Step(time.Second)
	f.sync()
	wantCalls(t, f, unstage1)
	wantPatches(t, f, []string{inUse1}, nil)
}

func TestKubelet_Sync_NewEpochRestages(t *testing.T) {
	f := newFixture(t, append(volume1(), newPod("web", claimVolume("data", "claim-1")))...)
	f.sync()
	f.csi.takeCalls()
	f.update(newVA("pv-1", "vol-1", true, "4"))
	f.sync()
	wantCalls(t, f, stage1)
	if e := f.csi.lastStage().GetPublishContext()[vigil.PublishContextEpochKey]; e != "4" {
		t.Errorf("restage epoch = %s, want 4", e)
	}
}

func TestKubelet_Sync_NothingMountedBeforeReportedInUse(t *testing.T) {
	f := newFixture(t, append(volume1(), newPod("web", claimVolume("data", "claim-1")))...)
	f.client.PrependReactor("patch", "nodes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, status.Error(codes.Unavailable, "apiserver down")
	})
	f.sync()
	wantCalls(t, f)
}

func TestKubelet_Sync_RestartTearsDownWhatThePreviousRunMounted(t *testing.T) {
	pod := newPod("web", claimVolume("data", "claim-1"))
	f := newFixture(t, append(volume1(), pod)...)
	f.sync()
	f.csi.takeCalls()
	// The node is powered off; meanwhile the pod is force-deleted. A new run
	// starts from the state file and the listers without the pod.
	f.remove(pod)
	k, err := newKubelet(f.k.cfg, f.k.csi, f.inf.pods, f.inf, f.rec)
	if err != nil {
		t.Fatal(err)
	}
	f.k = k
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "web", "pv-1"), unstage1)
	wantPatches(t, f, []string{inUse1}, []string{inUse1}, nil)
}

func TestKubelet_Sync_RestartMountsAgainForPodsStillHere(t *testing.T) {
	a, b := newPod("a", claimVolume("data", "claim-1")), newPod("b", claimVolume("data", "claim-1"))
	f := newFixture(t, newPVC("claim-1", "pv-1"), newPV("pv-1", "vol-1", corev1.ReadWriteMany), newVA("pv-1", "vol-1", true, "3"), a, b)
	f.sync()
	f.csi.takeCalls()
	// A reboot: the node service took everything down. The new run does not
	// trust its state file: it stages and publishes again for the pod that is
	// still here, and tears down for the one that went.
	f.remove(a)
	k, err := newKubelet(f.k.cfg, f.k.csi, f.inf.pods, f.inf, f.rec)
	if err != nil {
		t.Fatal(err)
	}
	f.k = k
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "a", "pv-1"), stage1, publish("vol-1", "b", "pv-1"))
	f.sync()
	wantCalls(t, f)
}

func TestKubelet_Sync_BlockVolume(t *testing.T) {
	pv := newPV("pv-b", "vol-b")
	pv.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	pod := newPod("db", claimVolume("dev", "claim-b"))
	f := newFixture(t, newPVC("claim-b", "pv-b"), pv, newVA("pv-b", "vol-b", true, "2"), pod)
	f.csi.setFail("NodePublishVolume", status.Error(codes.Internal, "no loop device"))
	f.sync()
	wantCalls(t, f, "NodeStageVolume vol-b plugins/kubernetes.io/csi/volumeDevices/staging/pv-b",
		"NodePublishVolume vol-b plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/uid-db")
	if f.csi.lastStage().GetVolumeCapability().GetBlock() == nil {
		t.Errorf("stage capability %v, want block", f.csi.lastStage().GetVolumeCapability())
	}
	if w := f.warnings(); len(w) != 1 || !strings.Contains(w[0], ReasonFailedMapVolume+" MapVolume.MapPodDevice failed") {
		t.Errorf("warnings = %q", w)
	}
}

func TestKubelet_Sync_PodInfoOnMountAndReadOnly(t *testing.T) {
	drv := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: vigil.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), PodInfoOnMount: ptr.To(true)}}
	vol := claimVolume("data", "claim-1")
	vol.PersistentVolumeClaim.ReadOnly = true
	f := newFixture(t, append(volume1(), drv, newPod("web", vol))...)
	f.sync()
	pub := f.csi.publishes()[0]
	vc := pub.GetVolumeContext()
	if vc[podNameKey] != "web" || vc[podNamespaceKey] != testNS || vc[podUIDKey] != "uid-web" || vc[serviceAccountKey] != "default" || vc["size"] != "1Gi" {
		t.Errorf("volume context = %v, want the pod's identity and the PV's attributes", vc)
	}
	if !pub.GetReadonly() {
		t.Error("publish of a read-only claim is not readonly")
	}
}

func TestKubelet_Sync_NoStageCapabilityPublishesOnly(t *testing.T) {
	pod := newPod("web", claimVolume("data", "claim-1"))
	f := newFixtureWith(t, func(n *fakeNode) { n.noStage = true }, append(volume1(), pod)...)
	f.sync()
	wantCalls(t, f, publish("vol-1", "web", "pv-1"))
	if p := f.csi.publishes()[0]; p.GetStagingTargetPath() != "" {
		t.Errorf("staging path %q sent to a driver that does not stage", p.GetStagingTargetPath())
	}
	f.remove(pod)
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "web", "pv-1"))
	wantPatches(t, f, []string{inUse1}, nil)
}

func TestKubelet_Sync_NoUnstageWhileAnUnpublishIsBackingOff(t *testing.T) {
	pod := newPod("web", claimVolume("data", "claim-1"))
	f := newFixture(t, append(volume1(), pod)...)
	f.sync()
	f.csi.takeCalls()
	f.csi.setFail("NodeUnpublishVolume", status.Error(codes.Internal, "target busy"))
	f.remove(pod)
	f.sync()
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "web", "pv-1"))
	f.csi.setFail("NodeUnpublishVolume", nil)
	f.clock.Step(time.Second)
	f.sync()
	wantCalls(t, f, unpublish("vol-1", "web", "pv-1"), unstage1)
}

func TestKubelet_Sync_NodeServiceDownStillReportsInUse(t *testing.T) {
	f := newFixture(t, append(volume1(), newPod("web", claimVolume("data", "claim-1")))...)
	f.csi.setFail("NodeGetCapabilities", status.Error(codes.Unavailable, "connection refused"))
	if _, err := f.k.syncOnce(t.Context(), func(plan) { t.Error("a plan without knowing the capabilities") }); err == nil ||
		!strings.Contains(err.Error(), "NodeGetCapabilities") {
		t.Errorf("sync = %v, want the NodeGetCapabilities error", err)
	}
	wantPatches(t, f, []string{inUse1})
	f.csi.setFail("NodeGetCapabilities", nil)
	f.sync()
	wantCalls(t, f, stage1, publish("vol-1", "web", "pv-1"))
}

func TestKubelet_NodeChanged_LostListIsRepaired(t *testing.T) {
	f := newFixture(t, append(volume1(), newPod("web", claimVolume("data", "claim-1")))...)
	f.sync()
	same := &corev1.Node{Status: corev1.NodeStatus{VolumesInUse: []corev1.UniqueVolumeName{inUse1}}}
	if f.k.nodeChanged(same) {
		t.Error("our own update marked dirty")
	}
	if !f.k.nodeChanged(&corev1.Node{}) { // someone wrote the status without our list
		t.Error("a node without our volumesInUse not marked dirty")
	}
	f.sync()
	wantPatches(t, f, []string{inUse1}, []string{inUse1})
	wantCalls(t, f, stage1, publish("vol-1", "web", "pv-1"))
}
