package controller

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/settings"
)

// t0 is the fixed "now" of the pure tests.
var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

const otherDriver = "ebs.csi.aws.com"

func at(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }

func newNode(name string, ready corev1.ConditionStatus, changed time.Duration, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: ready, LastTransitionTime: at(changed)},
		}},
	}
}

func outOfService(added time.Duration) corev1.Taint {
	t := at(added)
	return corev1.Taint{Key: vigil.OutOfServiceTaintKey, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute, TimeAdded: &t}
}

func controllerRef(apiVersion, kind, name string, uid types.UID) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: &yes}}
}

// newPod is a pod on node with a configMap volume (never protected) and the
// given PVC-backed volumes.
func newPod(ns, name, node string, owner []metav1.OwnerReference, vols ...corev1.Volume) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name),
			ResourceVersion: "1", OwnerReferences: owner},
		Spec: corev1.PodSpec{NodeName: node, Volumes: append([]corev1.Volume{{
			Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}},
		}}, vols...)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	return p
}

func pvcVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func ephemeralVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}
}

func terminating(p *corev1.Pod, deadline time.Duration) *corev1.Pod {
	ts, grace := at(deadline), int64(30)
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &grace
	return p
}

func newPVC(ns, name, pv string, owner []metav1.OwnerReference) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-pvc-" + name), OwnerReferences: owner},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv},
	}
}

func newPV(name, driver string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-pv-" + name)},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "handle-" + name}}},
	}
}

func newVA(name, pv, node string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-va-" + name)},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: vigil.DriverName, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true},
	}
}

func newRS(ns, name string, uid types.UID, owner []metav1.OwnerReference) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, OwnerReferences: owner}}
}

// testListers builds listers over plain indexers holding objs.
func testListers(objs ...runtime.Object) *listers {
	idx := func(extra cache.Indexers) cache.Indexer {
		ix := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
		for k, v := range extra {
			ix[k] = v
		}
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, ix)
	}
	nodes, pvcs, pvs, rss := idx(nil), idx(nil), idx(nil), idx(nil)
	vas := idx(cache.Indexers{attachmentByPVIndex: attachmentPV})
	for _, o := range objs {
		var err error
		switch o.(type) {
		case *corev1.Node:
			err = nodes.Add(o)
		case *corev1.PersistentVolumeClaim:
			err = pvcs.Add(o)
		case *corev1.PersistentVolume:
			err = pvs.Add(o)
		case *storagev1.VolumeAttachment:
			err = vas.Add(o)
		case *appsv1.ReplicaSet:
			err = rss.Add(o)
		}
		if err != nil {
			panic(err)
		}
	}
	return &listers{
		nodes: corelisters.NewNodeLister(nodes), pvcs: corelisters.NewPersistentVolumeClaimLister(pvcs),
		pvs: corelisters.NewPersistentVolumeLister(pvs), replicaSets: appslisters.NewReplicaSetLister(rss),
		attachmentsByPV: vas,
	}
}

// provenFunc says which volume handles a test's fencing back end proves fenced.
type provenFunc func(handle string) bool

// proofOf turns a provenFunc into a proofSource (nil stays nil: no back end).
func proofOf(f provenFunc) proofSource {
	if f == nil {
		return nil
	}
	return func(context.Context, string) (grantsView, error) {
		return grantsView{at: t0, live: liveUnless(f)}, nil
	}
}

func liveUnless(f provenFunc) map[string]bool {
	// grantsView.proven reads live[handle]; a map cannot compute, so the handles
	// the tests use are listed.
	m := map[string]bool{}
	for _, h := range []string{"handle-pv-1", "handle-pv-2", "handle-pv-9", "handle-pv-a", "handle-pv-b", "handle-pv-w"} {
		if !f(h) {
			m[h] = true
		}
	}
	return m
}

// fakeSettings is a SettingsReader whose values the test sets.
type fakeSettings struct {
	policy       PodDeletionPolicy
	attach       AttachmentPolicy
	fast         bool
	grace        time.Duration
	debounce     time.Duration
	extra        []string
	crashLoop    bool
	crashLimit   int
	connectivity time.Duration
	outagePct    int
	dryRun       bool
	changes      chan settings.Change
}

func newFakeSettings(policy PodDeletionPolicy) *fakeSettings {
	return &fakeSettings{policy: policy, attach: AttachmentImmediate, grace: 30 * time.Second, debounce: 15 * time.Second,
		crashLimit: 5, connectivity: 3 * time.Second, outagePct: 55, changes: make(chan settings.Change, 8)}
}

func (f *fakeSettings) NodeDownPodDeletionPolicy() PodDeletionPolicy { return f.policy }
func (f *fakeSettings) VolumeAttachmentRecoveryPolicy() AttachmentPolicy {
	return f.attach
}
func (f *fakeSettings) FastFencedTrigger() bool                          { return f.fast }
func (f *fakeSettings) NodeDownGracePeriod() time.Duration               { return f.grace }
func (f *fakeSettings) NotReadyDebounce() time.Duration                  { return f.debounce }
func (f *fakeSettings) ExtraProtectedProvisioners() []string             { return f.extra }
func (f *fakeSettings) CrashLoopPodDeletion() bool                       { return f.crashLoop }
func (f *fakeSettings) CrashLoopRestartLimit() int                       { return f.crashLimit }
func (f *fakeSettings) DatapathConnectivityLossThreshold() time.Duration { return f.connectivity }
func (f *fakeSettings) ControlPlaneOutageThreshold() int                 { return f.outagePct }
func (f *fakeSettings) DryRun() bool                                     { return f.dryRun }
func (f *fakeSettings) Subscribe() (<-chan settings.Change, func())      { return f.changes, func() {} }

var metav1GetOptions = metav1.GetOptions{}
