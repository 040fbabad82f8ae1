package controller

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vigil-storage/vigil"
)

// The dimensions of the decision table test.
type (
	ownerDim  int
	nodeDim   int
	podDim    int
	volumeDim int
	fastDim   int
)

const (
	ownStatefulSet ownerDim = iota
	ownDeployment           // a ReplicaSet controlled by a Deployment
	ownBareRS
	ownDaemonSet
	ownJob
	ownNone
)

const (
	nodeReady nodeDim = iota
	nodeFalseWithinDebounce
	nodeFalseAfterDebounce
	nodeUnknown
	nodeDeleted
	nodeOutOfService
	nodeIsolated // Ready to Kubernetes, silent at the datapath
)

const (
	podRunning podDim = iota
	podTerminatingBeforeDeadline
	podTerminatingAfterDeadline
)

const (
	volVigilPVC volumeDim = iota
	volVigilEphemeral
	volOtherCSI
	volNone
	volVigilAndNFS       // a vigil PVC and an inline nfs volume
	volVigilAndInlineCSI // a vigil PVC and an inline CSI volume
	volVigilAndOtherPVC  // a vigil PVC and a PVC of an unprotected driver
	volVigilAndHostPath  // a vigil PVC and node-local hostPath, emptyDir, secret, downwardAPI volumes
)

const (
	fastOff       fastDim = iota
	fastProven            // Vigil fenced the node; the back end proves every vigil volume fenced
	fastUnproven          // Vigil fenced the node; the back end still lists live grants
	fastNotFenced         // the back end would prove it, but Vigil has not fenced the node
)

var allAttachPolicies = []AttachmentPolicy{AttachmentNever, AttachmentWait, AttachmentImmediate}

type tableCase struct {
	policy PodDeletionPolicy
	owner  ownerDim
	node   nodeDim
	pod    podDim
	volume volumeDim
	optOut bool
	fast   fastDim
	attach AttachmentPolicy
}

func (c tableCase) String() string {
	return fmt.Sprintf("policy=%s/owner=%d/node=%d/pod=%d/volume=%d/optout=%t/fast=%d/attach=%s",
		c.policy, c.owner, c.node, c.pod, c.volume, c.optOut, c.fast, c.attach)
}

// vigilFenced: Vigil fenced the node in the case's episode.
func (c tableCase) vigilFenced() bool { return c.fast == fastProven || c.fast == fastUnproven }

// oracle says whether the pod is force-deleted, written plainly from the decision
// table of docs/architecture.md, independent of decide. Every down state in the table test began at
// least 45 s before now, past the 30 s grace.
func oracle(c tableCase) (reap bool, rowOK [5]bool) {
	coversSTS := c.policy == PolicyDeleteStatefulSetPod || c.policy == PolicyDeleteBoth
	coversDeploy := c.policy == PolicyDeleteDeploymentPod || c.policy == PolicyDeleteBoth
	row1 := !c.optOut && ((c.owner == ownStatefulSet && coversSTS) || (c.owner == ownDeployment && coversDeploy))
	usesProtected := c.volume != volOtherCSI && c.volume != volNone
	othersNodeLocal := c.volume != volVigilAndNFS && c.volume != volVigilAndInlineCSI && c.volume != volVigilAndOtherPVC
	row2 := usesProtected && othersNodeLocal
	row3 := c.node == nodeFalseAfterDebounce || c.node == nodeUnknown || c.node == nodeDeleted || c.node == nodeOutOfService ||
		(c.node == nodeIsolated && c.vigilFenced())
	fencedByNode := c.node == nodeDeleted || c.node == nodeOutOfService
	allFenced := fencedByNode || (c.fast == fastProven && row2 && c.volume != volNone)
	row4 := c.pod == podTerminatingAfterDeadline || (c.fast != fastOff && row3 && allFenced)
	return row1 && row2 && row3 && row4, [5]bool{true, row1, row2, row3, row4}
}

// oracleAttachmentFirst says whether a reap deletes the pod's attachment on its
// node first: only under the immediate policy, and only where the node is proven
// fenced on it or the driver's unpublish fences it (the datapath's own).
func oracleAttachmentFirst(c tableCase) bool {
	vigilVolume := c.volume != volOtherCSI && c.volume != volNone
	return c.attach == AttachmentImmediate && (vigilVolume || c.node == nodeDeleted || c.node == nodeOutOfService)
}

// reasonRow maps each non-action reason to the table row whose failure it names.
var reasonRow = map[Reason]int{
	ReasonNodeReady: 3, ReasonNodeDebouncing: 3,
	ReasonOptedOut: 1, ReasonPolicyDoNothing: 1, ReasonOwnerNotCovered: 1,
	ReasonNoProtectedVolume: 2, ReasonUnprovableVolume: 2,
	ReasonNotTerminating: 4, ReasonDeadlineNotPassed: 4, ReasonWithinGrace: 4, ReasonNotProvenFenced: 4,
}

// build turns a case into objects, a snapshot through the real listers, and settings.
func (c tableCase) build() (*Snapshot, *Settings) {
	const ns, node = "app", "node-1"
	var objs []runtime.Object
	var owner = controllerRef("apps/v1", "StatefulSet", "db", "uid-sts")
	switch c.owner {
	case ownDeployment:
		owner = controllerRef("apps/v1", "ReplicaSet", "web-5d9", "uid-rs")
		objs = append(objs, newRS(ns, "web-5d9", "uid-rs", controllerRef("apps/v1", "Deployment", "web", "uid-deploy")))
	case ownBareRS:
		owner = controllerRef("apps/v1", "ReplicaSet", "bare", "uid-bare")
		objs = append(objs, newRS(ns, "bare", "uid-bare", nil))
	case ownDaemonSet:
		owner = controllerRef("apps/v1", "DaemonSet", "agent", "uid-ds")
	case ownJob:
		owner = controllerRef("batch/v1", "Job", "batch", "uid-job")
	case ownNone:
		owner = nil
	}
	var vols []corev1.Volume
	pod := newPod(ns, "p-0", node, owner)
	switch c.volume {
	case volVigilAndNFS:
		vols = append(vols, corev1.Volume{Name: "share", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nas", Path: "/x"}}})
	case volVigilAndInlineCSI:
		vols = append(vols, corev1.Volume{Name: "inline", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: vigil.DriverName}}})
	case volVigilAndOtherPVC:
		vols = append(vols, pvcVolume("other", "other-p-0"))
		objs = append(objs, newPVC(ns, "other-p-0", "pv-2", nil), newPV("pv-2", otherDriver))
	case volVigilAndHostPath:
		vols = append(vols, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var"}}},
			corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}},
			corev1.Volume{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}})
	}
	switch c.volume {
	case volVigilPVC, volOtherCSI, volVigilAndNFS, volVigilAndInlineCSI, volVigilAndOtherPVC, volVigilAndHostPath:
		vols = append(vols, pvcVolume("data", "data-p-0"))
		driver := vigil.DriverName
		if c.volume == volOtherCSI {
			driver = otherDriver
		}
		objs = append(objs, newPVC(ns, "data-p-0", "pv-1", nil), newPV("pv-1", driver))
	case volVigilEphemeral:
		vols = append(vols, ephemeralVolume("scratch"))
		objs = append(objs, newPVC(ns, "p-0-scratch", "pv-1", controllerRef("v1", "Pod", "p-0", pod.UID)), newPV("pv-1", vigil.DriverName))
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, vols...)
	// The pod's attachment on its node, the same PV attached to a healthy node (a
	// replacement's), and another PV's attachment on the down node.
	objs = append(objs, newVA("va-here", "pv-1", node), newVA("va-elsewhere", "pv-1", "node-2"), newVA("va-other", "pv-9", node))
	switch c.node {
	case nodeReady:
		objs = append(objs, newNode(node, corev1.ConditionTrue, -time.Hour))
	case nodeFalseWithinDebounce:
		objs = append(objs, newNode(node, corev1.ConditionFalse, -5*time.Second))
	case nodeFalseAfterDebounce:
		objs = append(objs, newNode(node, corev1.ConditionFalse, -60*time.Second))
	case nodeUnknown:
		objs = append(objs, newNode(node, corev1.ConditionUnknown, -60*time.Second))
	case nodeOutOfService:
		objs = append(objs, newNode(node, corev1.ConditionFalse, -5*time.Second, outOfService(-60*time.Second)))
	case nodeIsolated:
		objs = append(objs, newNode(node, corev1.ConditionTrue, -time.Hour))
	}
	switch c.pod {
	case podTerminatingBeforeDeadline:
		terminating(pod, 10*time.Second)
	case podTerminatingAfterDeadline:
		terminating(pod, -time.Second)
	}
	if c.optOut {
		pod.Annotations = map[string]string{vigil.ReapAnnotation: "false"}
	}
	set := &Settings{Policy: c.policy, AttachmentPolicy: c.attach, NotReadyDebounce: 15 * time.Second,
		NodeDownGracePeriod: 30 * time.Second, FastFencedTrigger: c.fast != fastOff, BackendDriver: vigil.DriverName}
	l := testListers(objs...)
	nodeObj, _ := l.nodes.Get(node)
	tracker := newNodeTracker()
	// The manager first saw the node not Ready a minute ago (the Ready=False
	// cases' lastTransitionTime says otherwise: the manager's clock wins).
	seen := t0.Add(-60 * time.Second)
	if c.node == nodeFalseWithinDebounce {
		seen = t0.Add(-5 * time.Second)
	}
	tracker.observedDown(node, nodeObj == nil || !isNodeReady(nodeObj), seen)
	if c.node == nodeIsolated {
		tracker.setIsolated(node, true, t0.Add(-60*time.Second))
	}
	if c.vigilFenced() {
		tracker.markFenced(node, t0.Add(-50*time.Second), fencePlan{})
	}
	obs := tracker.observe(node, nodeObj, t0)
	proof := proofOf(func(string) bool { return c.fast == fastProven || c.fast == fastNotFenced })
	// Decided on the pod as the reaper's slim cache gives it back.
	return l.snapshot(context.Background(), toCachedPod(pod).pod(), nodeObj, obs, set, proof), set
}

var allPolicies = []PodDeletionPolicy{PolicyDoNothing, PolicyDeleteStatefulSetPod, PolicyDeleteDeploymentPod, PolicyDeleteBoth}

func allTableCases() []tableCase {
	var out []tableCase
	for _, p := range allPolicies {
		for o := ownStatefulSet; o <= ownNone; o++ {
			for n := nodeReady; n <= nodeIsolated; n++ {
				for pd := podRunning; pd <= podTerminatingAfterDeadline; pd++ {
					for v := volVigilPVC; v <= volVigilAndHostPath; v++ {
						for _, opt := range []bool{false, true} {
							for f := fastOff; f <= fastNotFenced; f++ {
								for _, a := range allAttachPolicies {
									out = append(out, tableCase{p, o, n, pd, v, opt, f, a})
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

// TestDecide_Table_CrossProduct is the specification: every policy × owner × node
// state × pod state × volume × opt-out × fast trigger × attachment policy,
// against the oracle.
func TestDecide_Table_CrossProduct(t *testing.T) {
	cases := allTableCases()
	if len(cases) != 4*6*7*3*8*2*4*3 {
		t.Fatalf("generated %d cases", len(cases))
	}
	reaped := 0
	for _, c := range cases {
		snap, set := c.build()
		d := decide(snap, set, t0)
		want, rows := oracle(c)
		if got := d.Kind == DecisionDelete; got != want {
			t.Errorf("%s: decision %s (%s), oracle says reap=%t", c, d.Kind, d.Reason, want)
			continue
		}
		if want {
			reaped++
			var wantActions []Action
			if oracleAttachmentFirst(c) {
				wantActions = append(wantActions, Action{Kind: ActionDeleteVolumeAttachment, Name: "va-here", UID: "uid-va-va-here", PVName: "pv-1"})
			}
			wantActions = append(wantActions, Action{Kind: ActionForceDeletePod, Namespace: "app", Name: "p-0", UID: "uid-app-p-0"})
			if !reflect.DeepEqual(d.Actions, wantActions) {
				t.Errorf("%s: actions %+v, want %+v", c, d.Actions, wantActions)
			}
			continue
		}
		row, ok := reasonRow[d.Reason]
		if !ok || rows[row] {
			t.Errorf("%s: reason %q names table row %d, which holds (rows %v)", c, d.Reason, row, rows)
		}
		if (d.Kind == DecisionWait) != (row == 4) || len(d.Actions) != 0 {
			t.Errorf("%s: kind %s with reason %s and %d actions", c, d.Kind, d.Reason, len(d.Actions))
		}
	}
	if reaped == 0 {
		t.Fatal("no case reaps: the oracle or the fixture is broken")
	}
	t.Logf("%d cases, %d reaped", len(cases), reaped)
}
