package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vigil-storage/vigil"
)

// NodeState is Vigil's health verdict for one node.
type NodeState uint8

// Node states, from healthy to down. Only the states for which Down reports true
// let the reaper act; only those for which Fenced reports true count as proof
// that nothing on the node can still write (DESIGN.md, decision table row 4).
const (
	// NodeReady: Ready=True, or the kubelet has not reported a Ready condition yet.
	NodeReady NodeState = iota
	// NodeNotReadyDebouncing: Ready=False for less than the debounce, as during a
	// kubelet restart.
	NodeNotReadyDebouncing
	// NodeDownUnknown: Ready=Unknown, the kubelet stopped reporting. Down at once.
	NodeDownUnknown
	// NodeDownNotReady: Ready=False for at least the debounce.
	NodeDownNotReady
	// NodeDownDeleted: the Node object is gone. Down and fenced.
	NodeDownDeleted
	// NodeDownOutOfService: the out-of-service taint on a node that is not Ready,
	// the operator's word that it is shut down. Down and fenced.
	NodeDownOutOfService
)

var nodeStateNames = [...]string{
	NodeReady:              "ready",
	NodeNotReadyDebouncing: "not-ready-within-debounce",
	NodeDownUnknown:        "ready-unknown",
	NodeDownNotReady:       "not-ready",
	NodeDownDeleted:        "deleted",
	NodeDownOutOfService:   "out-of-service",
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

// NodeVerdict is the verdict on one node at one instant.
type NodeVerdict struct {
	State NodeState
	// Since is when the node became down; zero unless State.Down().
	Since time.Time
	// DownAt is, while debouncing, when the node becomes down if nothing changes.
	DownAt time.Time
}

// nodeVerdict judges a node at now. A nil node means the Node object is deleted.
// observedDown is when the controller first saw the node not Ready (or gone); it
// stands in for times the object does not carry.
func nodeVerdict(node *corev1.Node, observedDown time.Time, debounce time.Duration, now time.Time) NodeVerdict {
	fallback := observedDown
	if fallback.IsZero() {
		fallback = now
	}
	if node == nil {
		return NodeVerdict{State: NodeDownDeleted, Since: fallback}
	}
	ready := readyCondition(node)
	if ready == nil || ready.Status == corev1.ConditionTrue {
		return NodeVerdict{State: NodeReady}
	}
	changed := ready.LastTransitionTime.Time
	if changed.IsZero() {
		changed = fallback
	}
	if taint := outOfServiceTaint(node); taint != nil {
		since := fallback
		if taint.TimeAdded != nil && !taint.TimeAdded.IsZero() {
			since = taint.TimeAdded.Time
		}
		return NodeVerdict{State: NodeDownOutOfService, Since: since}
	}
	if ready.Status != corev1.ConditionFalse {
		// Unknown, or a status Kubernetes does not define: nobody vouches for it.
		return NodeVerdict{State: NodeDownUnknown, Since: changed}
	}
	downAt := changed.Add(debounce)
	if now.Before(downAt) {
		return NodeVerdict{State: NodeNotReadyDebouncing, DownAt: downAt}
	}
	return NodeVerdict{State: NodeDownNotReady, Since: downAt}
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
	for i := range node.Spec.Taints {
		if node.Spec.Taints[i].Key == vigil.OutOfServiceTaintKey {
			return &node.Spec.Taints[i]
		}
	}
	return nil
}

// nodeTracker remembers, per node, when the controller first saw it not Ready and
// whether its last verdict was down. It turns a stream of verdicts into
// transitions, so a node that keeps reporting the same state, or a resync, causes
// no repeated work, and it feeds the vigil_nodes_down gauge.
type nodeTracker struct {
	mu    sync.Mutex
	nodes map[string]*nodeRecord
}

type nodeRecord struct {
	notReadySince time.Time
	down          bool
}

func newNodeTracker() *nodeTracker {
	return &nodeTracker{nodes: make(map[string]*nodeRecord)}
}

// observedDown returns when the node was first seen not Ready or deleted, noting
// now if this is the first time. A Ready node forgets it.
func (t *nodeTracker) observedDown(name string, notReady bool, now time.Time) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.nodes[name]
	if !notReady {
		if r != nil {
			r.notReadySince = time.Time{}
		}
		return time.Time{}
	}
	if r == nil {
		r = &nodeRecord{}
		t.nodes[name] = r
	}
	if r.notReadySince.IsZero() {
		r.notReadySince = now
	}
	return r.notReadySince
}

// record stores a verdict's down state and reports whether it changed.
func (t *nodeTracker) record(name string, down bool) (changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.nodes[name]
	if r == nil {
		if !down {
			return false
		}
		r = &nodeRecord{}
		t.nodes[name] = r
	}
	changed = r.down != down
	r.down = down
	if !down && r.notReadySince.IsZero() {
		delete(t.nodes, name)
	}
	return changed
}

// forget drops a node that came back as a new object or whose pods are all gone.
func (t *nodeTracker) forget(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.nodes, name)
}

// downNodes lists the nodes whose last verdict was down.
func (t *nodeTracker) downNodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for name, r := range t.nodes {
		if r.down {
			out = append(out, name)
		}
	}
	return out
}

// syncNode judges one node. On a transition it emits an Event and updates the
// vigil_nodes_down gauge; while the node is down it queues the node's pods; while
// it is debouncing it comes back when the debounce ends.
func (r *Reaper) syncNode(_ context.Context, name string) error {
	node, err := r.listers.nodes.Get(name)
	if err != nil {
		if err = ignoreNotFound(err); err != nil {
			return err
		}
		node = nil
		if pods, _ := r.podsByNode.ByIndex(nodeIndex, name); len(pods) == 0 {
			r.nodes.forget(name)
			r.metrics.NodesDown.Set(float64(len(r.nodes.downNodes())))
			return nil
		}
	}
	now := r.now()
	set := readSettings(r.settings)
	observed := r.nodes.observedDown(name, node == nil || !isNodeReady(node), now)
	v := nodeVerdict(node, observed, set.NotReadyDebounce, now)
	if r.nodes.record(name, v.State.Down()) {
		r.metrics.NodesDown.Set(float64(len(r.nodes.downNodes())))
		ref := nodeRef(name)
		if v.State.Down() {
			r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventNodeDown,
				fmt.Sprintf("node %s is down (%s); pods on it are handled by policy %s", name, v.State, set.Policy))
		} else {
			r.events.emit(ref, ref.UID, corev1.EventTypeNormal, EventNodeRecovered,
				fmt.Sprintf("node %s is no longer down (%s)", name, v.State))
		}
	}
	switch {
	case v.State == NodeNotReadyDebouncing:
		r.queue.AddAfter(queueKey{kind: keyNode, name: name}, v.DownAt.Sub(now))
	case v.State.Down():
		r.enqueuePodsOn(name)
	}
	return nil
}
