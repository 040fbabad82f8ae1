// Package v1alpha1 is Vigil's Kubernetes API, group vigil.io version v1alpha1:
// the cluster-scoped NodeRecovery, one per node failure, whose status is the
// timeline of what Vigil did about it (detected → fenced → pods reaped →
// attachments freed → replacements Running → node back, cleaned and untainted).
// The leading vigil-manager writes it; the UI, `kubectl get noderecoveries`, the
// metrics and the chaos suite read it. The CRD manifest is
// deploy/crds/vigil.io_noderecoveries.yaml (embedded in package deploy), kept in
// step with these types by TestCRD_MatchesTypes.
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Group, version and resource names.
const (
	GroupName = "vigil.io"
	Version   = "v1alpha1"
	Kind      = "NodeRecovery"
	ListKind  = "NodeRecoveryList"
	Resource  = "noderecoveries"
	Singular  = "noderecovery"
)

// SchemeGroupVersion is vigil.io/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// GroupVersionResource of NodeRecovery, for dynamic clients.
var GroupVersionResource = SchemeGroupVersion.WithResource(Resource)

// Phase is where a recovery stands. Phases only move forward, in this order.
type Phase string

const (
	// PhaseDetected: the node is judged down; nothing done yet.
	PhaseDetected Phase = "Detected"
	// PhaseFenced: every volume the node held is fenced and the node tainted.
	PhaseFenced Phase = "Fenced"
	// PhaseReaping: covered pods are being force-deleted, attachments freed.
	PhaseReaping Phase = "Reaping"
	// PhaseRecovered: every covered pod has a replacement Running elsewhere.
	PhaseRecovered Phase = "Recovered"
	// PhaseNodeReturned: the node is back, cleaned up and untainted; the record is closed.
	PhaseNodeReturned Phase = "NodeReturned"
	// PhaseAbandoned: the node came back (or was deleted) before anything was
	// done, e.g. a short partition; the record is closed.
	PhaseAbandoned Phase = "Abandoned"
)

// PhaseOrder ranks phases; a recovery never moves to a lower rank.
func PhaseOrder(p Phase) int {
	switch p {
	case PhaseDetected:
		return 1
	case PhaseFenced:
		return 2
	case PhaseReaping:
		return 3
	case PhaseRecovered:
		return 4
	case PhaseNodeReturned, PhaseAbandoned:
		return 5
	}
	return 0
}

// Closed reports whether the recovery is over.
func (p Phase) Closed() bool { return p == PhaseNodeReturned || p == PhaseAbandoned }

// NodeRecovery is one node failure and what Vigil did about it.
type NodeRecovery struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeRecoverySpec   `json:"spec"`
	Status NodeRecoveryStatus `json:"status,omitempty"`
}

// NodeRecoverySpec names the node.
type NodeRecoverySpec struct {
	// NodeName is the failed node.
	NodeName string `json:"nodeName"`
	// NodeUID is the Node object's UID at detection (empty if already deleted).
	NodeUID types.UID `json:"nodeUID,omitempty"`
}

// NodeRecoveryStatus is the timeline. Its times are metav1.MicroTime: a
// recovery takes seconds, so whole seconds would say nothing (and a fence time
// rounded down would look earlier than writes it refused).
type NodeRecoveryStatus struct {
	Phase Phase `json:"phase,omitempty"`
	// DetectedAt is when the manager judged the node down; Reason says why
	// (ready-unknown, not-ready, deleted, out-of-service, storage-isolated).
	DetectedAt *metav1.MicroTime `json:"detectedAt,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	// Message is a human sentence about the current state or the last problem.
	Message string `json:"message,omitempty"`
	// FencedAt is when every volume of the node was fenced and TaintedAt when the
	// node got vigil.io/fenced.
	FencedAt  *metav1.MicroTime `json:"fencedAt,omitempty"`
	TaintedAt *metav1.MicroTime `json:"taintedAt,omitempty"`
	// Volumes are the fenced volumes.
	Volumes []FencedVolume `json:"volumes,omitempty"`
	// Pods are the pods force-deleted from the node.
	Pods []ReapedPod `json:"pods,omitempty"`
	// Attachments are the VolumeAttachments freed.
	Attachments []FreedAttachment `json:"attachments,omitempty"`
	// Replacements are the pods that took over, as they were scheduled and ran.
	Replacements []Replacement `json:"replacements,omitempty"`
	// RecoveredAt is when the last covered pod's replacement was Running;
	// RecoverySeconds is RecoveredAt - DetectedAt.
	RecoveredAt     *metav1.MicroTime `json:"recoveredAt,omitempty"`
	RecoverySeconds *float64          `json:"recoverySeconds,omitempty"`
	// TimeToRecover is RecoverySeconds for people ("4.21s"), a printer column.
	TimeToRecover string `json:"timeToRecover,omitempty"`
	// Return is the node's way back.
	Return *NodeReturn `json:"return,omitempty"`
	// PodCount is len(Pods), for the printer column.
	PodCount int `json:"podCount,omitempty"`
}

// FencedVolume is one volume fenced on the node.
type FencedVolume struct {
	Handle   string           `json:"handle"`
	PVName   string           `json:"pvName,omitempty"`
	Epoch    uint64           `json:"epoch"`
	FencedAt metav1.MicroTime `json:"fencedAt"`
}

// ReapedPod is one pod force-deleted from the node.
type ReapedPod struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	UID       types.UID        `json:"uid"`
	Owner     string           `json:"owner,omitempty"`
	Trigger   string           `json:"trigger,omitempty"`
	ReapedAt  metav1.MicroTime `json:"reapedAt"`
}

// FreedAttachment is one VolumeAttachment of the node freed for another node.
type FreedAttachment struct {
	Name    string           `json:"name"`
	PVName  string           `json:"pvName,omitempty"`
	Action  string           `json:"action"`
	FreedAt metav1.MicroTime `json:"freedAt"`
}

// Replacement is a pod that took over from a reaped one (same owner, other node).
type Replacement struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// Replaces is the UID of the reaped pod this one took over from.
	Replaces    types.UID         `json:"replaces,omitempty"`
	NodeName    string            `json:"nodeName,omitempty"`
	ScheduledAt *metav1.MicroTime `json:"scheduledAt,omitempty"`
	RunningAt   *metav1.MicroTime `json:"runningAt,omitempty"`
}

// NodeReturn is the node coming back.
type NodeReturn struct {
	// ReadyAt is when the node was Ready again; UntaintedAt is when its engine,
	// having cleaned up what the reaped pods left, removed vigil.io/fenced.
	ReadyAt     *metav1.MicroTime `json:"readyAt,omitempty"`
	UntaintedAt *metav1.MicroTime `json:"untaintedAt,omitempty"`
}

// NodeRecoveryList is a list of NodeRecovery.
type NodeRecoveryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeRecovery `json:"items"`
}
