package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vigil-storage/vigil"
)

// NodeState is Vigil's health verdict for one node.
type NodeState uint8

// Node states, from healthy to down. Only the states for which Down reports true
// let the controllers act; only those for which Fenced reports true count, by
// themselves, as proof that nothing on the node can still write (the decision
// table of docs/architecture.md, row 4). A node Vigil fenced itself is proven per volume, from
// the fencing back end's attachment table.
const (
	// NodeReady: Ready=True (or not reported yet) and, where the storage is
	// watched, heartbeating.
	NodeReady NodeState = iota
	// NodeNotReadyDebouncing: Ready=False for less than the debounce, measured
	// from the manager's own first observation, as during a kubelet restart.
	NodeNotReadyDebouncing
	// NodeStorageIsolated: the node's engine has been silent at the datapath for
	// datapath-connectivity-loss-threshold, but Vigil has not fenced it (yet):
	// not down. With the fast trigger on it is fenced at once and becomes
	// NodeDownStorageIsolated.
	NodeStorageIsolated
	// NodeHeldControlPlaneOutage: Kubernetes calls the node down, but its engine
	// still heartbeats to the datapath and so do enough of its zone's (or the
	// cluster's) nodes that the control plane, not the node, has failed
	// (control_plane_outage.go): not down. Nothing is fenced or reaped on
	// Kubernetes' verdict while it holds.
	NodeHeldControlPlaneOutage
	// NodeDownUnknown: Ready=Unknown, the kubelet stopped reporting. Down at once.
	NodeDownUnknown
	// NodeDownNotReady: Ready=False for at least the debounce.
	NodeDownNotReady
	// NodeDownStorageIsolated: storage-isolated and fenced by Vigil: down, even
	// if Kubernetes still calls it Ready.
	NodeDownStorageIsolated
	// NodeDownDeleted: the Node object is gone (confirmed by a live GET). Down
	// and fenced.
	NodeDownDeleted
	// NodeDownOutOfService: the out-of-service taint on a node that is not Ready,
	// the operator's word that it is shut down. Down and fenced.
	NodeDownOutOfService
)

var nodeStateNames = [...]string{
	NodeReady:                  "ready",
	NodeNotReadyDebouncing:     "not-ready-within-debounce",
	NodeStorageIsolated:        "storage-isolated-unfenced",
	NodeHeldControlPlaneOutage: "not-ready-held-control-plane-outage",
	NodeDownUnknown:            "ready-unknown",
	NodeDownNotReady:           "not-ready",
	NodeDownStorageIsolated:    "storage-isolated",
	NodeDownDeleted:            "deleted",
	NodeDownOutOfService:       "out-of-service",
}

func (s NodeState) String() string {
	if int(s) < len(nodeStateNames) {
		return nodeStateNames[s]
	}
	return "invalid"
}

// Down reports whether the node counts as down (decision table row 3).
func (s NodeState) Down() bool { return s >= NodeDownUnknown }

// Fenced reports whether the state itself proves every volume fenced on the node:
// a deleted node or the out-of-service taint.
func (s NodeState) Fenced() bool { return s == NodeDownDeleted || s == NodeDownOutOfService }

// KubernetesDown reports whether Kubernetes itself considers the node gone or
// unresponsive (every down state but Vigil's own storage isolation).
func (s NodeState) KubernetesDown() bool { return s.Down() && s != NodeDownStorageIsolated }

// NodeVerdict is the verdict on one node at one instant.
type NodeVerdict struct {
	State NodeState
	// Since is when the node became down, on the manager's clock; zero unless
	// State.Down().
	Since time.Time
	// DownAt is, while debouncing, when the node becomes down if nothing changes.
	DownAt time.Time
}

// nodeObservation is what the manager knows about one node at one instant, all
// times on the manager's own clock (never the node's).
type nodeObservation struct {
	// Node is the Node object; nil when it is deleted (confirmed by a live GET).
	Node *corev1.Node
	// NotReadySince is when the manager first saw the node not Ready (or gone)
	// in this episode; zero while it is Ready.
	NotReadySince time.Time
	// Isolated: the node's engine has been silent at the datapath for the
	// connectivity-loss threshold (and announced no graceful stop);
	// SilentSince is when that silence began.
	Isolated    bool
	SilentSince time.Time
	// Fenced: Vigil fenced the node (the volumes of the pods it is to reap) and
	// tainted it in this episode, at FencedAt; FencedPods are those pods. The
	// episode lasts until the node is no longer down and none of them is left.
	Fenced     bool
	FencedAt   time.Time
	FencedPods map[types.UID]bool
	// OutageHeld: the node is held in a control-plane outage (its engine
	// heartbeats while Kubernetes calls it, and enough of its peers, down).
	OutageHeld bool
}

// nodeVerdict judges a node at now. It is pure: the observation carries the
// manager's own observation times, and the debounce counts from the first time
// the manager saw the node not Ready, never from a time the node reported.
//
// A node held in a control-plane outage that Kubernetes alone calls down
// (Ready Unknown, or False past the debounce) is NodeHeldControlPlaneOutage,
// not down. The operator's word (deletion, the out-of-service taint) and
// Vigil's own evidence (storage isolation, a fence already done) still stand.
func nodeVerdict(o nodeObservation, debounce time.Duration, now time.Time) NodeVerdict {
	v := kubernetesNodeVerdict(o, debounce, now)
	if o.OutageHeld && !o.Fenced && !o.Isolated && (v.State == NodeDownUnknown || v.State == NodeDownNotReady) {
		return NodeVerdict{State: NodeHeldControlPlaneOutage}
	}
	return v
}

// kubernetesNodeVerdict is nodeVerdict before the control-plane outage rule.
func kubernetesNodeVerdict(o nodeObservation, debounce time.Duration, now time.Time) NodeVerdict {
	notReadySince := o.NotReadySince
	if notReadySince.IsZero() {
		notReadySince = now
	}
	if o.Node == nil {
		return NodeVerdict{State: NodeDownDeleted, Since: notReadySince}
	}
	isolatedDown := o.Isolated && o.Fenced
	silentSince := o.SilentSince
	if silentSince.IsZero() {
		silentSince = o.FencedAt
	}
	ready := readyCondition(o.Node)
	if ready == nil || ready.Status == corev1.ConditionTrue {
		switch {
		case isolatedDown:
			return NodeVerdict{State: NodeDownStorageIsolated, Since: silentSince}
		case o.Isolated:
			return NodeVerdict{State: NodeStorageIsolated}
		}
		return NodeVerdict{State: NodeReady}
	}
	if outOfServiceTaint(o.Node) != nil {
		return NodeVerdict{State: NodeDownOutOfService, Since: notReadySince}
	}
	if ready.Status != corev1.ConditionFalse {
		// Unknown, or a status Kubernetes does not define: nobody vouches for it.
		return NodeVerdict{State: NodeDownUnknown, Since: notReadySince}
	}
	downAt := notReadySince.Add(debounce)
	switch {
	case !now.Before(downAt):
		return NodeVerdict{State: NodeDownNotReady, Since: downAt}
	case isolatedDown:
		return NodeVerdict{State: NodeDownStorageIsolated, Since: silentSince}
	}
	return NodeVerdict{State: NodeNotReadyDebouncing, DownAt: downAt}
}

// isNodeReady reports whether the node's Ready condition is True (or absent).
func isNodeReady(node *corev1.Node) bool {
	c := readyCondition(node)
	return c == nil || c.Status == corev1.ConditionTrue
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func outOfServiceTaint(node *corev1.Node) *corev1.Taint {
	return taint(node, vigil.OutOfServiceTaintKey)
}

func fencedTaint(node *corev1.Node) *corev1.Taint { return taint(node, vigil.FencedTaintKey) }

func taint(node *corev1.Node, key string) *corev1.Taint {
	if node == nil {
		return nil
	}
	for i := range node.Spec.Taints {
		if node.Spec.Taints[i].Key == key {
			return &node.Spec.Taints[i]
		}
	}
	return nil
}
