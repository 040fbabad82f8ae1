package controller

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vigil-storage/vigil"
)

// namedSnapshotSeen builds the snapshot of one pod on node-1 from objs, the
// manager having first seen the node not Ready seenAgo ago (default a minute).
// With a proven function the node counts as fenced by Vigil (the datapath's
// driver) and the function says which volumes the back end proves fenced.
func namedSnapshotSeen(pod *corev1.Pod, set *Settings, proven provenFunc, seenAgo time.Duration, objs ...runtime.Object) *Snapshot {
	if seenAgo == 0 {
		seenAgo = time.Minute
	}
	return snapshotOf(pod, set, proven, t0.Add(-seenAgo), objs...)
}

func snapshotOf(pod *corev1.Pod, set *Settings, proven provenFunc, notReadySince time.Time, objs ...runtime.Object) *Snapshot {
	l := testListers(objs...)
	node, _ := l.nodes.Get(pod.Spec.NodeName)
	tracker := newNodeTracker()
	if node == nil || !isNodeReady(node) {
		tracker.observedDown(pod.Spec.NodeName, true, notReadySince)
	}
	obs := tracker.observe(pod.Spec.NodeName, node, t0)
	if proven != nil {
		set.BackendDriver = vigil.DriverName
		obs.Fenced, obs.FencedAt = true, notReadySince
	}
	return l.snapshot(context.Background(), pod, node, obs, set, proofOf(proven))
}

func stsPod(vols ...corev1.Volume) *corev1.Pod {
	return newPod("app", "p", "node-1", controllerRef("apps/v1", "StatefulSet", "db", "uid-sts"), vols...)
}

func defaultSet() *Settings {
	return &Settings{Policy: PolicyDeleteBoth, AttachmentPolicy: AttachmentImmediate, BackendDriver: vigil.DriverName,
		NotReadyDebounce: 15 * time.Second, NodeDownGracePeriod: 30 * time.Second}
}

func defaultSetWith(f func(*Settings)) *Settings {
	set := defaultSet()
	if f != nil {
		f(set)
	}
	return set
}

func volumeOf(name string, src corev1.VolumeSource) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: src}
}

func TestDecide_Named(t *testing.T) {
	vigilVol := []runtime.Object{newPVC("app", "data", "pv-1", nil), newPV("pv-1", vigil.DriverName)}
	otherVol := []runtime.Object{newPVC("app", "other", "pv-2", nil), newPV("pv-2", otherDriver)}
	unknown := newNode("node-1", corev1.ConditionUnknown, -time.Minute)
	cases := []struct {
		name       string
		pod        *corev1.Pod
		set        func(*Settings)
		proven     provenFunc
		objs       []runtime.Object
		wantKind   DecisionKind
		wantReason Reason
		wantAfter  time.Duration
		wantVAs    []string
		isolated   bool
		seen       time.Duration // the manager first saw the node not Ready this long ago (default a minute)
		wantVolume string        // the volume the decision names
	}{
		{name: "unscheduled pod is skipped", pod: func() *corev1.Pod { p := stsPod(); p.Spec.NodeName = ""; return p }(),
			wantKind: DecisionSkip, wantReason: ReasonUnscheduled},
		{name: "out-of-service taint on a Ready node is not down (as Kubernetes honours it)",
			pod:      terminating(stsPod(pvcVolume("d", "data")), -time.Second),
			objs:     append(vigilVol, newNode("node-1", corev1.ConditionTrue, -time.Hour, outOfService(-time.Minute))),
			wantKind: DecisionSkip, wantReason: ReasonNodeReady},
		{name: "not ready within debounce rechecks when the debounce ends",
			pod:      terminating(stsPod(pvcVolume("d", "data")), -time.Second),
			objs:     append(vigilVol, newNode("node-1", corev1.ConditionFalse, -5*time.Second)),
			seen:     5 * time.Second,
			wantKind: DecisionSkip, wantReason: ReasonNodeDebouncing, wantAfter: 10 * time.Second},
		{name: "terminating before deadline rechecks at the deadline",
			pod: terminating(stsPod(pvcVolume("d", "data")), 7*time.Second), objs: append(vigilVol, unknown),
			wantKind: DecisionWait, wantReason: ReasonDeadlineNotPassed, wantAfter: 7 * time.Second},
		{name: "opt-out annotation is case-insensitive",
			pod: func() *corev1.Pod {
				p := terminating(stsPod(pvcVolume("d", "data")), -time.Second)
				p.Annotations = map[string]string{vigil.ReapAnnotation: "False"}
				return p
			}(), objs: append(vigilVol, unknown), wantKind: DecisionSkip, wantReason: ReasonOptedOut},
		{name: "policy do-nothing names itself",
			pod: terminating(stsPod(pvcVolume("d", "data")), -time.Second), objs: append(vigilVol, unknown),
			set: func(s *Settings) { s.Policy = PolicyDoNothing }, wantKind: DecisionSkip, wantReason: ReasonPolicyDoNothing},
		{name: "a StatefulSet of another API group is not covered",
			pod: terminating(newPod("app", "p", "node-1", controllerRef("apps.kruise.io/v1beta1", "StatefulSet", "db", "u"),
				pvcVolume("d", "data")), -time.Second), objs: append(vigilVol, unknown),
			wantKind: DecisionSkip, wantReason: ReasonOwnerNotCovered},
		{name: "a ReplicaSet whose cached UID differs is not a Deployment's",
			pod: terminating(newPod("app", "p", "node-1", controllerRef("apps/v1", "ReplicaSet", "web", "uid-new"),
				pvcVolume("d", "data")), -time.Second),
			objs:     append(vigilVol, unknown, newRS("app", "web", "uid-old", controllerRef("apps/v1", "Deployment", "web", "d"))),
			wantKind: DecisionSkip, wantReason: ReasonOwnerNotCovered},
		{name: "an ephemeral claim the pod does not own is not the pod's volume",
			pod:      terminating(stsPod(ephemeralVolume("scratch")), -time.Second),
			objs:     []runtime.Object{unknown, newPVC("app", "p-scratch", "pv-1", nil), newPV("pv-1", vigil.DriverName)},
			wantKind: DecisionSkip, wantReason: ReasonNoProtectedVolume},
		{name: "an unbound claim protects nothing",
			pod:      terminating(stsPod(pvcVolume("d", "data")), -time.Second),
			objs:     []runtime.Object{unknown, newPVC("app", "data", "", nil)},
			wantKind: DecisionSkip, wantReason: ReasonNoProtectedVolume},
		{name: "an extra provisioner from settings is protected",
			pod: terminating(stsPod(pvcVolume("o", "other")), -time.Second), objs: append(otherVol, unknown),
			set:      func(s *Settings) { s.ExtraProtectedProvisioners = []string{"x", otherDriver} },
			wantKind: DecisionDelete, wantReason: ReasonPastDeadline},
		{name: "fast trigger waits for the grace",
			pod: stsPod(pvcVolume("d", "data")), objs: append(vigilVol, newNode("node-1", corev1.ConditionUnknown, -10*time.Second)),
			set:      func(s *Settings) { s.FastFencedTrigger = true },
			proven:   func(string) bool { return true },
			seen:     10 * time.Second,
			wantKind: DecisionWait, wantReason: ReasonWithinGrace, wantAfter: 20 * time.Second},
		{name: "fast trigger fires when every volume is proven fenced after the grace",
			pod: stsPod(pvcVolume("d", "data")), objs: append(vigilVol, unknown, newVA("va", "pv-1", "node-1")),
			set:      func(s *Settings) { s.FastFencedTrigger = true },
			proven:   func(h string) bool { return h == "handle-pv-1" },
			wantKind: DecisionDelete, wantReason: ReasonProvenFenced, wantVAs: []string{"va"}},
		{name: "fast trigger needs every volume, not just the vigil one (another driver's claim is never proven)",
			pod: stsPod(pvcVolume("d", "data"), pvcVolume("o", "other")), objs: append(append(vigilVol, otherVol...), unknown),
			set:      func(s *Settings) { s.FastFencedTrigger = true },
			proven:   func(string) bool { return true },
			wantKind: DecisionSkip, wantReason: ReasonUnprovableVolume,
			wantVolume: `volume "o" (claim other, PV pv-2 of driver ebs.csi.aws.com, not a protected provisioner)`},
		{name: "an inline nfs volume beside a proven vigil volume stops the fast trigger",
			pod:      stsPod(pvcVolume("d", "data"), volumeOf("share", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/x"}})),
			objs:     append(vigilVol, unknown, newVA("va", "pv-1", "node-1")),
			set:      func(s *Settings) { s.FastFencedTrigger = true },
			proven:   func(string) bool { return true },
			wantKind: DecisionSkip, wantReason: ReasonUnprovableVolume, wantVolume: `volume "share" (inline nfs)`},
		{name: "an inline nfs volume stops the compatible trigger too (decision table row 2)",
			pod:      terminating(stsPod(pvcVolume("d", "data"), volumeOf("share", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{}})), -time.Second),
			objs:     append(vigilVol, unknown),
			wantKind: DecisionSkip, wantReason: ReasonUnprovableVolume, wantVolume: `volume "share" (inline nfs)`},
		{name: "an inline CSI volume, even of Vigil's own driver, is never proven",
			pod:      stsPod(pvcVolume("d", "data"), volumeOf("scratch", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: vigil.DriverName}})),
			objs:     append(vigilVol, unknown),
			set:      func(s *Settings) { s.FastFencedTrigger = true },
			proven:   func(string) bool { return true },
			wantKind: DecisionSkip, wantReason: ReasonUnprovableVolume, wantVolume: `volume "scratch" (inline csi)`},
		{name: "inline iscsi, rbd, cephfs, glusterfs and fc volumes are named by their kind (the first one)",
			pod: terminating(stsPod(pvcVolume("d", "data"),
				volumeOf("lun", corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{}}),
				volumeOf("block", corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{}}),
				volumeOf("fs", corev1.VolumeSource{CephFS: &corev1.CephFSVolumeSource{}}),
				volumeOf("gl", corev1.VolumeSource{Glusterfs: &corev1.GlusterfsVolumeSource{}}),
				volumeOf("san", corev1.VolumeSource{FC: &corev1.FCVolumeSource{}})), -time.Second),
			objs:     append(vigilVol, unknown),
			wantKind: DecisionSkip, wantReason: ReasonUnprovableVolume, wantVolume: `volume "lun" (inline iscsi)`},
		{name: "a claim not bound to a volume beside the vigil one is never proven",
			pod:      terminating(stsPod(pvcVolume("d", "data"), pvcVolume("u", "unbound")), -time.Second),
			objs:     append(vigilVol, unknown, newPVC("app", "unbound", "", nil)),
			wantKind: DecisionSkip, wantReason: ReasonUnprovableVolume, wantVolume: `volume "u" (claim unbound, not bound to a volume of this pod)`},
		{name: "node-local volumes (emptyDir, hostPath, configMap, secret, projected, downwardAPI, image) do not stop the fast trigger",
			pod: stsPod(pvcVolume("d", "data"),
				volumeOf("tmp", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
				volumeOf("host", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/log"}}),
				volumeOf("token", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}),
				volumeOf("sa", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}),
				volumeOf("info", corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}),
				volumeOf("model", corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "models:1"}})),
			objs:     append(vigilVol, unknown, newVA("va", "pv-1", "node-1")),
			set:      func(s *Settings) { s.FastFencedTrigger = true },
			proven:   func(string) bool { return true },
			wantKind: DecisionDelete, wantReason: ReasonProvenFenced, wantVAs: []string{"va"}},
		{name: "an inline volume on a pod with no protected volume is simply not Vigil's",
			pod:      terminating(stsPod(volumeOf("share", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{}})), -time.Second),
			objs:     []runtime.Object{unknown},
			wantKind: DecisionSkip, wantReason: ReasonNoProtectedVolume},
		{name: "fast trigger needs the volume's grant revoked, not just the node fenced",
			pod: stsPod(pvcVolume("d", "data")), objs: append(vigilVol, unknown),
			set:      func(s *Settings) { s.FastFencedTrigger = true },
			proven:   func(string) bool { return false },
			wantKind: DecisionWait, wantReason: ReasonNotProvenFenced, wantAfter: fenceRecheck},
		{name: "fast trigger without a fencing back end never fires on a node merely unknown",
			pod: stsPod(pvcVolume("d", "data")), objs: append(vigilVol, unknown),
			set:      func(s *Settings) { s.FastFencedTrigger = true },
			wantKind: DecisionWait, wantReason: ReasonNotProvenFenced, wantAfter: fenceRecheck},
		{name: "attachment policy wait: the reap deletes the pod only (attachments follow the replacement)",
			pod: terminating(stsPod(pvcVolume("d", "data")), -time.Second), objs: append(vigilVol, unknown, newVA("va", "pv-1", "node-1")),
			set:      func(s *Settings) { s.AttachmentPolicy = AttachmentWait },
			wantKind: DecisionDelete, wantReason: ReasonPastDeadline},
		{name: "attachment policy never: the reap never deletes an attachment",
			pod: terminating(stsPod(pvcVolume("d", "data")), -time.Second), objs: append(vigilVol, unknown, newVA("va", "pv-1", "node-1")),
			set:      func(s *Settings) { s.AttachmentPolicy = AttachmentNever },
			wantKind: DecisionDelete, wantReason: ReasonPastDeadline},
		{name: "another driver's attachment is not deleted on a node merely unknown (not proven fenced)",
			pod:      terminating(stsPod(pvcVolume("o", "other")), -time.Second),
			objs:     append(otherVol, unknown, newVA("va-o", "pv-2", "node-1")),
			set:      func(s *Settings) { s.ExtraProtectedProvisioners = []string{otherDriver} },
			wantKind: DecisionDelete, wantReason: ReasonPastDeadline},
		{name: "another driver's attachment goes first on a deleted node (Kubernetes' proof)",
			pod:      terminating(stsPod(pvcVolume("o", "other")), -time.Second),
			objs:     append(otherVol, newVA("va-o", "pv-2", "node-1")),
			set:      func(s *Settings) { s.ExtraProtectedProvisioners = []string{otherDriver} },
			wantKind: DecisionDelete, wantReason: ReasonPastDeadline, wantVAs: []string{"va-o"}},
		{name: "a Ready node storage-isolated and fenced by Vigil is down",
			pod: stsPod(pvcVolume("d", "data")), objs: append(vigilVol, newNode("node-1", corev1.ConditionTrue, -time.Hour), newVA("va", "pv-1", "node-1")),
			set:      func(s *Settings) { s.FastFencedTrigger = true; s.NodeDownGracePeriod = 2 * time.Second },
			proven:   func(string) bool { return true },
			isolated: true,
			wantKind: DecisionDelete, wantReason: ReasonProvenFenced, wantVAs: []string{"va"}},
		{name: "attachments already deleting and on other nodes are left alone",
			pod: terminating(stsPod(pvcVolume("d", "data")), -time.Second),
			objs: append(vigilVol, unknown, newVA("va-2", "pv-1", "node-2"), newVA("va-1", "pv-1", "node-1"),
				func() runtime.Object {
					va := newVA("va-gone", "pv-1", "node-1")
					ts := at(-time.Second)
					va.DeletionTimestamp = &ts
					return va
				}()),
			wantKind: DecisionDelete, wantReason: ReasonPastDeadline, wantVAs: []string{"va-1"}},
		{name: "dry run lists the same actions",
			pod: terminating(stsPod(pvcVolume("d", "data")), -time.Second), objs: append(vigilVol, unknown, newVA("va", "pv-1", "node-1")),
			set:      func(s *Settings) { s.DryRun = true },
			wantKind: DecisionWouldDelete, wantReason: ReasonPastDeadline, wantVAs: []string{"va"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			set := defaultSet()
			if tc.set != nil {
				tc.set(set)
			}
			snap := namedSnapshotSeen(tc.pod, set, tc.proven, tc.seen, tc.objs...)
			if tc.isolated {
				snap.NodeObserved.Isolated, snap.NodeObserved.SilentSince = true, t0.Add(-5*time.Second)
			}
			d := decide(snap, set, t0)
			if d.Kind != tc.wantKind || d.Reason != tc.wantReason || d.RecheckAfter != tc.wantAfter {
				t.Fatalf("got %s/%s recheck %v, want %s/%s recheck %v", d.Kind, d.Reason, d.RecheckAfter, tc.wantKind, tc.wantReason, tc.wantAfter)
			}
			if d.Volume != tc.wantVolume {
				t.Errorf("names volume %q, want %q", d.Volume, tc.wantVolume)
			}
			// The reaper decides on its slim cache's copy of the pod: the same.
			cached := namedSnapshotSeen(toCachedPod(tc.pod).pod(), defaultSetWith(tc.set), tc.proven, tc.seen, tc.objs...)
			if tc.isolated {
				cached.NodeObserved.Isolated, cached.NodeObserved.SilentSince = true, t0.Add(-5*time.Second)
			}
			if dc := decide(cached, set, t0); !reflect.DeepEqual(dc, d) {
				t.Errorf("on the cached pod: %+v, on the pod: %+v", dc, d)
			}
			var vas []string
			for _, a := range d.Actions {
				if a.Kind == ActionDeleteVolumeAttachment {
					vas = append(vas, a.Name)
				}
			}
			if len(vas) != len(tc.wantVAs) || (len(vas) > 0 && vas[0] != tc.wantVAs[0]) {
				t.Errorf("attachments %v, want %v", vas, tc.wantVAs)
			}
			if n := len(d.Actions); (tc.wantKind == DecisionDelete || tc.wantKind == DecisionWouldDelete) && d.Actions[n-1].Kind != ActionForceDeletePod {
				t.Errorf("last action %+v is not the pod", d.Actions[n-1])
			}
		})
	}
}

// TestDecide_ReapBasis: every reap says what it relies on. On the compatible
// trigger that is the driver's own guarantee, and for an extra provisioner it
// says plainly that only that driver's detach stands between the old pod and
// its volume.
func TestDecide_ReapBasis(t *testing.T) {
	vigilVol := []runtime.Object{newPVC("app", "data", "pv-1", nil), newPV("pv-1", vigil.DriverName)}
	otherVol := []runtime.Object{newPVC("app", "other", "pv-2", nil), newPV("pv-2", otherDriver)}
	unknown := newNode("node-1", corev1.ConditionUnknown, -time.Minute)
	fast := func(s *Settings) { s.FastFencedTrigger = true }
	extra := func(s *Settings) { s.ExtraProtectedProvisioners = []string{otherDriver} }
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		objs   []runtime.Object
		set    func(*Settings)
		proven provenFunc
		want   string
	}{
		{name: "compatible, vigil volume: the fence before any new grant",
			pod: terminating(stsPod(pvcVolume("d", "data")), -time.Second), objs: append(vigilVol, unknown),
			want: "its driver.vigil.io volumes are granted to another node only after this node is fenced from them"},
		{name: "compatible, extra provisioner: nothing but the driver's detach",
			pod: terminating(stsPod(pvcVolume("o", "other")), -time.Second), objs: append(otherVol, unknown), set: extra,
			want: `Vigil does not fence volume "o" (driver ebs.csi.aws.com): nothing but that driver's own detach keeps the old node from writing to it`},
		{name: "compatible, both",
			pod: terminating(stsPod(pvcVolume("d", "data"), pvcVolume("o", "other")), -time.Second), objs: append(append(vigilVol, otherVol...), unknown), set: extra,
			want: `its driver.vigil.io volumes are granted to another node only after this node is fenced from them; Vigil does not fence volume "o" (driver ebs.csi.aws.com): nothing but that driver's own detach keeps the old node from writing to it`},
		{name: "fast, proven by the datapath",
			pod: stsPod(pvcVolume("d", "data")), objs: append(vigilVol, unknown), set: fast, proven: func(string) bool { return true },
			want: "every volume of the pod is fenced on the node at the datapath, so its writes are refused"},
		{name: "fast, node deleted: the operator's word",
			pod: stsPod(pvcVolume("o", "other")), objs: otherVol, set: func(s *Settings) { fast(s); extra(s) },
			want: "the Node object was deleted (confirmed by the API server), which Vigil takes to mean the machine is gone"},
		{name: "fast, out-of-service: the operator's word",
			pod: stsPod(pvcVolume("o", "other")), objs: append(otherVol, newNode("node-1", corev1.ConditionFalse, -time.Minute, outOfService(-time.Minute))),
			set:  func(s *Settings) { fast(s); extra(s) },
			want: "the node carries the out-of-service taint, which Vigil takes to mean the machine is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := defaultSetWith(tc.set)
			d := decide(namedSnapshotSeen(tc.pod, set, tc.proven, 0, tc.objs...), set, t0)
			if d.Kind != DecisionDelete || d.Basis != tc.want {
				t.Fatalf("%s/%s relying on %q, want a delete relying on %q", d.Kind, d.Reason, d.Basis, tc.want)
			}
		})
	}
}
