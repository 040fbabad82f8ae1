package controller

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vigil-storage/vigil"
)

// OwnerKind is the kind of a pod's controller as the reaper classifies it.
type OwnerKind string

// Owner kinds. Only StatefulSet and Deployment can be covered by a policy; a
// ReplicaSet that no Deployment controls is OwnerReplicaSet and never covered.
const (
	OwnerNone        OwnerKind = "None"
	OwnerStatefulSet OwnerKind = "StatefulSet"
	OwnerDeployment  OwnerKind = "Deployment"
	OwnerReplicaSet  OwnerKind = "ReplicaSet"
	OwnerDaemonSet   OwnerKind = "DaemonSet"
	OwnerJob         OwnerKind = "Job"
	OwnerOther       OwnerKind = "Other"
)

// Snapshot is everything decide needs to know about one pod, read from listers.
type Snapshot struct {
	Pod   *corev1.Pod
	Owner OwnerKind
	// Node is the pod's Node; nil when it is deleted.
	Node *corev1.Node
	// NodeObserved is what the manager knows about the node (its own times).
	NodeObserved nodeObservation
	// Volumes lists the pod's volumes that are not node-local: PVC and generic
	// ephemeral volumes, and inline volumes of any other kind.
	Volumes []VolumeInfo
	// Attachments lists the VolumeAttachments of the pod's PVs, on any node.
	Attachments []Attachment
}

// VolumeInfo is one volume of a pod that is not node-local: PVC-backed,
// resolved down to its PV, or inline.
type VolumeInfo struct {
	Name      string // the pod's volume name
	Claim     string // the PVC name; "" for an inline volume
	Ephemeral bool
	Inline    string // an inline volume's kind (nfs, csi, iscsi, …); "" for a claim
	PVName    string // "" when the claim is missing, unbound or not the pod's
	Driver    string // the PV's CSI driver; "" when not CSI or unresolved
	Handle    string // the PV's CSI volume handle
	Fenced    bool   // proven fenced on the pod's node by the fencing back end
}

// Attachment is one VolumeAttachment as the controller sees it.
type Attachment struct {
	Name     string
	UID      types.UID
	NodeName string
	PVName   string
	Deleting bool // already has a deletion timestamp
	// Attached is the VolumeAttachment's status.attached. One that is not
	// attached is an attach in progress: the attach-detach controller waits
	// for it (up to 2 minutes, on the volume's only operation slot), so
	// deleting it would only stall that controller; see attachmentGoes.
	Attached bool
}

// attachmentGoes reports whether Vigil may delete the VolumeAttachment a: one
// already being deleted needs nothing more, and one not attached is left to
// Kubernetes. The attach-detach controller creates it and then waits for
// status.attached; deleted before that, it waits out its full attach timeout
// (2 minutes) holding the volume's only operation slot, so the replacement's
// attach waits too. That happens when the controller's pod watch missed the
// force-delete of a StatefulSet pod (a relist saw the replacement of the same
// name as an update) and it still wants the volume on the down node; it drops
// that pod within a minute, detaches by itself, and the fence already keeps the
// node out of the volume.
func attachmentGoes(a *Attachment) bool {
	return a != nil && !a.Deleting && a.Attached
}

// Settings are the settings the decide functions read, taken once per sync.
type Settings struct {
	Policy                     PodDeletionPolicy
	AttachmentPolicy           AttachmentPolicy
	NotReadyDebounce           time.Duration
	FastFencedTrigger          bool
	NodeDownGracePeriod        time.Duration
	ExtraProtectedProvisioners []string
	CrashLoopPodDeletion       bool
	CrashLoopRestartLimit      int
	DryRun                     bool
	// BackendDriver is the CSI driver whose volumes the fencing back end can prove
	// fenced ("" without a back end). Not a setting: the manager's wiring.
	BackendDriver string
}

func readSettings(r SettingsReader, backendDriver string) Settings {
	return Settings{
		Policy:                     r.NodeDownPodDeletionPolicy(),
		AttachmentPolicy:           r.VolumeAttachmentRecoveryPolicy(),
		NotReadyDebounce:           r.NotReadyDebounce(),
		FastFencedTrigger:          r.FastFencedTrigger(),
		NodeDownGracePeriod:        r.NodeDownGracePeriod(),
		ExtraProtectedProvisioners: r.ExtraProtectedProvisioners(),
		CrashLoopPodDeletion:       r.CrashLoopPodDeletion(),
		CrashLoopRestartLimit:      r.CrashLoopRestartLimit(),
		DryRun:                     r.DryRun(),
		BackendDriver:              backendDriver,
	}
}

// DecisionKind is what the reaper does with a pod; it is the "decision" label
// of vigil_reaper_decisions_total.
type DecisionKind string

// Decision kinds.
const (
	DecisionDelete      DecisionKind = "delete"       // act: the actions are executed
	DecisionWouldDelete DecisionKind = "would-delete" // dry run: only Events
	DecisionWait        DecisionKind = "wait"         // covered, but no trigger yet
	DecisionSkip        DecisionKind = "skip"         // not Vigil's to delete
)

// Reason says why; it is the "reason" label of vigil_reaper_decisions_total and
// appears in Event messages.
type Reason string

// Reasons for each decision.
const (
	ReasonUnscheduled       Reason = "pod-not-scheduled"
	ReasonNodeReady         Reason = "node-ready"
	ReasonNodeDebouncing    Reason = "node-not-ready-within-debounce"
	ReasonOutageHeld        Reason = "node-held-control-plane-outage"
	ReasonOptedOut          Reason = "opted-out-by-annotation"
	ReasonPolicyDoNothing   Reason = "policy-do-nothing"
	ReasonOwnerNotCovered   Reason = "owner-not-covered-by-policy"
	ReasonNoProtectedVolume Reason = "no-protected-volume"
	ReasonUnprovableVolume  Reason = "volume-never-proven"
	ReasonNotTerminating    Reason = "not-terminating"
	ReasonDeadlineNotPassed Reason = "deletion-deadline-not-passed"
	ReasonWithinGrace       Reason = "node-down-within-grace"
	ReasonNotProvenFenced   Reason = "volumes-not-proven-fenced"
	ReasonPastDeadline      Reason = "terminating-past-deadline"
	ReasonProvenFenced      Reason = "proven-fenced-after-grace"
	// ReasonFencedNodeReturned: the node came back after Vigil fenced the
	// pod's volumes for it; the fence made the pod useless, so it is reaped.
	ReasonFencedNodeReturned Reason = "fenced-node-returned"
	// The fence's scope (decideFenceVolumes): why a pod's volumes keep their grant.
	ReasonVolumeNotProvable    Reason = "volume-not-provable-by-fencing-back-end"
	ReasonSharesUnfencedVolume Reason = "shares-volume-with-unreaped-pod"
	// ReasonVolumeServerSilent: the volume's datapath server does not
	// answer, so the node's grant on it can be neither fenced nor proven.
	ReasonVolumeServerSilent Reason = "volume-server-not-answering"
)

// ActionKind is one API call of the pod reaper or attachment recovery.
type ActionKind uint8

// Action kinds, in the order they are executed.
const (
	ActionDeleteVolumeAttachment ActionKind = iota + 1
	ActionForceDeletePod
)

// Action is one delete with a UID precondition.
type Action struct {
	Kind      ActionKind
	Namespace string // empty for VolumeAttachments
	Name      string
	UID       types.UID
	PVName    string // for VolumeAttachments: the PV it attaches
}

// Decision is decide's answer: actions, or a reason for doing nothing.
type Decision struct {
	Kind    DecisionKind
	Reason  Reason
	Node    NodeVerdict
	Actions []Action
	// Volume, with ReasonUnprovableVolume, names the volume that stopped the
	// reap: its name and what it is.
	Volume string
	// Basis, with a delete, says what keeps the old pod from writing once it
	// is force-deleted: what the reap relies on. Its Events carry it.
	Basis string
	// RecheckAfter, when positive, is when the answer may change without any
	// object changing (a debounce, a deadline or a grace period running out).
	RecheckAfter time.Duration
}

// fenceRecheck is how often a pod waiting only for a fence proof is looked at again.
const fenceRecheck = 2 * time.Second

// decide applies the decision table (docs/architecture.md, "The decision, in
// one table") to one pod. It is pure: the clock and the settings are
// parameters.
func decide(s *Snapshot, set *Settings, now time.Time) Decision {
	pod := s.Pod
	if pod.Spec.NodeName == "" {
		return Decision{Kind: DecisionSkip, Reason: ReasonUnscheduled}
	}
	d := Decision{Kind: DecisionSkip}
	obs := s.NodeObserved
	obs.Node = s.Node
	d.Node = nodeVerdict(obs, set.NotReadyDebounce, now)
	if !d.Node.State.Down() && obs.FencedPods[pod.UID] {
		return decideReturned(s, d, set)
	}
	switch {
	case d.Node.State == NodeNotReadyDebouncing:
		d.Reason, d.RecheckAfter = ReasonNodeDebouncing, d.Node.DownAt.Sub(now)
		return d
	case d.Node.State == NodeHeldControlPlaneOutage:
		d.Reason = ReasonOutageHeld
		return d
	case !d.Node.State.Down():
		d.Reason = ReasonNodeReady
		return d
	}
	if why, ok := coverage(pod, s.Owner, s.Volumes, set); !ok {
		d.Reason = why
		return d
	}
	if v := unprovableVolume(s.Volumes, set.ExtraProtectedProvisioners); v != nil {
		d.Reason, d.Volume = ReasonUnprovableVolume, describeVolume(v)
		return d
	}
	reason, met, recheck := trigger(s, d.Node, set, now)
	d.Reason, d.RecheckAfter = reason, recheck
	if !met {
		d.Kind = DecisionWait
		return d
	}
	d.Kind = DecisionDelete
	if set.DryRun {
		d.Kind = DecisionWouldDelete
	}
	d.Actions = reapActions(s, d.Node, set)
	d.Basis = reapBasis(s.Volumes, d.Node.State, reason)
	return d
}

// reapBasis says what a reap relies on. On the fast trigger, the proof: the
// node deleted or tainted out-of-service (an operator's word that the machine
// is gone), or the datapath's fence of every volume. On the Kubernetes-
// compatible trigger, which force-deletes where Kubernetes would only have
// evicted and waited for the kubelet, each driver's own guarantee: Vigil's
// volumes are granted to a new node only after the old one is fenced; an extra
// protected provisioner's, by nothing but that driver's detach.
func reapBasis(vols []VolumeInfo, state NodeState, reason Reason) string {
	if reason == ReasonFencedNodeReturned {
		return "every volume of the pod was fenced on the node at the datapath so that it be reaped, and its writes stay refused"
	}
	if reason == ReasonProvenFenced {
		switch state {
		case NodeDownDeleted:
			return "the Node object was deleted (confirmed by the API server), which Vigil takes to mean the machine is gone"
		case NodeDownOutOfService:
			return "the node carries the out-of-service taint, which Vigil takes to mean the machine is off"
		}
		return "every volume of the pod is fenced on the node at the datapath, so its writes are refused"
	}
	var parts, others []string
	for i := range vols {
		if vols[i].Driver != vigil.DriverName {
			others = append(others, fmt.Sprintf("%q (driver %s)", vols[i].Name, vols[i].Driver))
		}
	}
	if len(others) < len(vols) {
		parts = append(parts, "its "+vigil.DriverName+" volumes are granted to another node only after this node is fenced from them")
	}
	if len(others) > 0 {
		parts = append(parts, "Vigil does not fence volume "+strings.Join(others, ", ")+
			": nothing but that driver's own detach keeps the old node from writing to it")
	}
	return strings.Join(parts, "; ")
}

// decideReturned decides for a pod whose volumes Vigil fenced because it was to
// be reaped, on a node that is no longer down: the node came back (its engine
// heartbeats again, its kubelet reports) before the reap. The fence already
// ended the pod's I/O on those volumes for good, so waiting helps nothing: it
// is reaped at once, on the same proof as the fast trigger (every volume proven
// fenced on the node). Only pods the fence committed to are decided here, so a
// pod scheduled on the node after it came back is never taken for one.
func decideReturned(s *Snapshot, d Decision, set *Settings) Decision {
	if why, ok := coverage(s.Pod, s.Owner, s.Volumes, set); !ok {
		// Opted out or policy changed since the fence: left to a person.
		d.Reason = why
		return d
	}
	if v := unprovableVolume(s.Volumes, set.ExtraProtectedProvisioners); v != nil {
		d.Reason, d.Volume = ReasonUnprovableVolume, describeVolume(v)
		return d
	}
	if !allVolumesFenced(s.Volumes) {
		d.Kind, d.Reason, d.RecheckAfter = DecisionWait, ReasonNotProvenFenced, fenceRecheck
		return d
	}
	d.Kind, d.Reason = DecisionDelete, ReasonFencedNodeReturned
	if set.DryRun {
		d.Kind = DecisionWouldDelete
	}
	d.Basis = reapBasis(s.Volumes, d.Node.State, d.Reason)
	d.Actions = reapActions(s, d.Node, set)
	return d
}

// coverage is decision table rows 1 and 2: the policy covers the pod's owner,
// the pod is not opted out, and it uses a protected volume.
func coverage(pod *corev1.Pod, owner OwnerKind, vols []VolumeInfo, set *Settings) (Reason, bool) {
	switch {
	case isOptedOut(pod):
		return ReasonOptedOut, false
	case !policyCovers(set.Policy, owner):
		if !policyCovers(set.Policy, OwnerStatefulSet) && !policyCovers(set.Policy, OwnerDeployment) {
			return ReasonPolicyDoNothing, false
		}
		return ReasonOwnerNotCovered, false
	case !usesProtectedVolume(vols, set.ExtraProtectedProvisioners):
		return ReasonNoProtectedVolume, false
	}
	return "", true
}

// trigger checks decision table row 4: terminating past its deadline, or the fast
// trigger: down for the grace, and either Kubernetes proves the node gone
// (deleted, out-of-service) or Vigil has fenced and tainted it and every volume
// of the pod is proven fenced on it by the back end's attachment table.
func trigger(s *Snapshot, v NodeVerdict, set *Settings, now time.Time) (Reason, bool, time.Duration) {
	ts := s.Pod.DeletionTimestamp
	var untilDeadline time.Duration
	if ts != nil {
		untilDeadline = ts.Sub(now)
		if untilDeadline <= 0 {
			return ReasonPastDeadline, true, 0
		}
	}
	wait := func(r Reason, d time.Duration) (Reason, bool, time.Duration) {
		if ts != nil && (d <= 0 || untilDeadline < d) {
			d = untilDeadline
		}
		if ts != nil && r != ReasonWithinGrace && r != ReasonNotProvenFenced {
			r = ReasonDeadlineNotPassed
		}
		return r, false, d
	}
	if !set.FastFencedTrigger {
		return wait(ReasonNotTerminating, 0)
	}
	if untilGrace := v.Since.Add(set.NodeDownGracePeriod).Sub(now); untilGrace > 0 {
		return wait(ReasonWithinGrace, untilGrace)
	}
	if v.State.Fenced() || (s.NodeObserved.Fenced && allVolumesFenced(s.Volumes)) {
		return ReasonProvenFenced, true, 0
	}
	return wait(ReasonNotProvenFenced, fenceRecheck)
}

// reapActions lists the deletes in order: the VolumeAttachments of the pod on
// its node that volume-attachment-recovery-policy lets go first (never another
// node's, never one already going), then the pod.
func reapActions(s *Snapshot, node NodeVerdict, set *Settings) []Action {
	pod := s.Pod
	actions := reapAttachmentActions(s, node, set)
	return append(actions, Action{Kind: ActionForceDeletePod, Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID})
}

// isOptedOut reports the vigil.io/reap: "false" annotation.
func isOptedOut(pod *corev1.Pod) bool {
	v, ok := pod.Annotations[vigil.ReapAnnotation]
	return ok && strings.EqualFold(strings.TrimSpace(v), "false")
}

// policyCovers is decision table row 1.
func policyCovers(p PodDeletionPolicy, owner OwnerKind) bool {
	switch owner {
	case OwnerStatefulSet:
		return p == PolicyDeleteStatefulSetPod || p == PolicyDeleteBoth
	case OwnerDeployment:
		return p == PolicyDeleteDeploymentPod || p == PolicyDeleteBoth
	}
	return false
}

// usesProtectedVolume is the first half of decision table row 2.
func usesProtectedVolume(vols []VolumeInfo, extra []string) bool {
	for i := range vols {
		if isProtectedDriver(vols[i].Driver, extra) {
			return true
		}
	}
	return false
}

// unprovableVolume is the rest of decision table row 2: the first volume that is
// neither node-local (those never reach the snapshot) nor resolved to a
// protected provisioner: an inline volume of a shared kind (nfs, csi, …), a
// claim of another driver, or a claim not resolved to a PV. No fence proves
// such a volume, so a zombie could still write to it; nil when there is none.
func unprovableVolume(vols []VolumeInfo, extra []string) *VolumeInfo {
	for i := range vols {
		if vols[i].Inline != "" || !isProtectedDriver(vols[i].Driver, extra) {
			return &vols[i]
		}
	}
	return nil
}

// describeVolume names a volume in an Event: its name and what it is.
func describeVolume(v *VolumeInfo) string {
	switch {
	case v.Inline != "":
		return fmt.Sprintf("volume %q (inline %s)", v.Name, v.Inline)
	case v.PVName == "":
		return fmt.Sprintf("volume %q (claim %s, not bound to a volume of this pod)", v.Name, v.Claim)
	case v.Driver == "":
		return fmt.Sprintf("volume %q (claim %s, PV %s, not a CSI volume)", v.Name, v.Claim, v.PVName)
	}
	return fmt.Sprintf("volume %q (claim %s, PV %s of driver %s, not a protected provisioner)", v.Name, v.Claim, v.PVName, v.Driver)
}

func isProtectedDriver(driver string, extra []string) bool {
	if driver == "" {
		return false
	}
	if driver == vigil.DriverName {
		return true
	}
	for _, e := range extra {
		if e == driver {
			return true
		}
	}
	return false
}

// allVolumesFenced reports whether every PVC-backed volume of the pod is proven
// fenced on its node; an unresolved volume is never proven.
func allVolumesFenced(vols []VolumeInfo) bool {
	for i := range vols {
		if !vols[i].Fenced {
			return false
		}
	}
	return len(vols) > 0
}
