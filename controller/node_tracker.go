package controller

import (
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// nodeTracker is the manager's memory of each node within one leadership: when
// it first saw the node not Ready, whether the node's engine is silent at the
// datapath, whether Vigil fenced it, and what the fencing back end said about its
// grants. It turns a stream of verdicts into transitions, so that a node that
// keeps reporting the same state, or a resync, causes no repeated work, and it
// feeds the vigil_nodes_down gauge. A new leader starts with an empty tracker:
// every step it takes again is idempotent (fencing skips what is fenced, deletes
// carry UID preconditions).
type nodeTracker struct {
	mu    sync.Mutex
	nodes map[string]*nodeRecord
	// checked: the node's grants were read once in this leadership for a
	// fence from before it (node_fence_resume.go). Kept apart from nodes, whose
	// records come and go with each episode.
	checked map[string]bool
}

type nodeRecord struct {
	notReadySince time.Time
	isolated      bool
	silentSince   time.Time
	fencedAt      time.Time             // zero: not fenced by Vigil in this episode
	fencedPods    map[types.UID]bool    // the pods the fence commits the reaper to; never mutated
	held          map[string]heldVolume // live grants the fence left alone, by handle
	deletedAt     time.Time             // when a live GET last confirmed the node deleted
	down          bool
	downSince     time.Time // the verdict's Since while down
	state         NodeState
	grants        grantsView
}

func newNodeTracker() *nodeTracker {
	return &nodeTracker{nodes: make(map[string]*nodeRecord), checked: make(map[string]bool)}
}

func (t *nodeTracker) get(name string) *nodeRecord {
	r := t.nodes[name]
	if r == nil {
		r = &nodeRecord{}
		t.nodes[name] = r
	}
	return r
}

// observe returns what the manager knows about the node at now, noting now as
// the first time it is not Ready if it is (node nil means deleted). A Ready
// node forgets its not-Ready time.
func (t *nodeTracker) observe(name string, node *corev1.Node, now time.Time) nodeObservation {
	t.mu.Lock()
	defer t.mu.Unlock()
	notReady := node == nil || !isNodeReady(node)
	r := t.nodes[name]
	if r == nil && !notReady {
		return nodeObservation{Node: node}
	}
	r = t.get(name)
	switch {
	case !notReady:
		r.notReadySince = time.Time{}
	case r.notReadySince.IsZero():
		r.notReadySince = now
	}
	return nodeObservation{
		Node: node, NotReadySince: r.notReadySince,
		Isolated: r.isolated, SilentSince: r.silentSince,
		Fenced: !r.fencedAt.IsZero(), FencedAt: r.fencedAt, FencedPods: r.fencedPods,
	}
}

// observedDown is observe for callers that only need the not-Ready time.
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
	r = t.get(name)
	if r.notReadySince.IsZero() {
		r.notReadySince = now
	}
	return r.notReadySince
}

// setIsolated records the storage view of a node and reports whether its
// isolation changed.
func (t *nodeTracker) setIsolated(name string, isolated bool, silentSince time.Time) (changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.nodes[name]
	if r == nil {
		if !isolated {
			return false
		}
		r = t.get(name)
	}
	changed = r.isolated != isolated
	r.isolated = isolated
	r.silentSince = time.Time{}
	if isolated {
		r.silentSince = silentSince
	}
	return changed
}

// isolatedNodes lists the nodes currently storage-isolated.
func (t *nodeTracker) isolatedNodes() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]bool{}
	for name, r := range t.nodes {
		if r.isolated {
			out[name] = true
		}
	}
	return out
}

// markFenced records that Vigil fenced and tainted the node at at, for plan's
// pods.
func (t *nodeTracker) markFenced(name string, at time.Time, plan fencePlan) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.get(name)
	if r.fencedAt.IsZero() {
		r.fencedAt, r.fencedPods, r.held = at, plan.Reaped, plan.Held
	}
}

// endFence ends the node's fence episode: it is no longer down and none of the
// pods the fence committed to is left on it. The next failure is fenced again.
func (t *nodeTracker) endFence(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.nodes[name]
	if r == nil {
		return
	}
	r.fencedAt, r.fencedPods, r.held, r.grants = time.Time{}, nil, nil, grantsView{}
	if !r.down && r.notReadySince.IsZero() && !r.isolated {
		delete(t.nodes, name)
	}
}

// fencedPods returns the pods the node's fence committed the reaper to.
func (t *nodeTracker) fencedPods(name string) map[types.UID]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.nodes[name]; r != nil {
		return r.fencedPods
	}
	return nil
}

// heldVolume says why the fence left the node's grant on handle alone.
func (t *nodeTracker) heldVolume(name, handle string) (heldVolume, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.nodes[name]; r != nil {
		h, ok := r.held[handle]
		return h, ok
	}
	return heldVolume{}, false
}

// fenced reports whether Vigil fenced the node in this episode.
func (t *nodeTracker) fenced(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.nodes[name]
	return r != nil && !r.fencedAt.IsZero()
}

// record stores a verdict and reports whether its down state changed. A verdict
// that is not down does not end a fence episode: the pods the fence committed
// to are still to be reaped (endFence ends it once they are gone).
func (t *nodeTracker) record(name string, v NodeVerdict) (changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	down := v.State.Down()
	r := t.nodes[name]
	if r == nil {
		if !down {
			return false
		}
		r = t.get(name)
	}
	changed = r.down != down
	r.down, r.state, r.downSince = down, v.State, v.Since
	if !down && r.fencedAt.IsZero() {
		r.grants = grantsView{}
		if r.notReadySince.IsZero() && !r.isolated {
			delete(t.nodes, name)
		}
	}
	return changed
}

// forget drops a node that came back as a new object or whose pods are all gone.
func (t *nodeTracker) forget(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.nodes, name)
	delete(t.checked, name)
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

// isDown reports whether the node's last verdict was down.
func (t *nodeTracker) isDown(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.nodes[name]
	return r != nil && r.down
}

// confirmDeleted notes when a live GET found the node deleted (zero: it exists).
func (t *nodeTracker) confirmDeleted(name string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.nodes[name]; r != nil {
		r.deletedAt = at
	} else if !at.IsZero() {
		t.get(name).deletedAt = at
	}
}

// deletedAt returns when a live GET last confirmed the node deleted.
func (t *nodeTracker) deletedAt(name string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.nodes[name]; r != nil {
		return r.deletedAt
	}
	return time.Time{}
}

// NodeStatus is the controllers' view of one node, for the UI and the API. Only
// the leader judges nodes: on a standby the list is empty.
type NodeStatus struct {
	Name  string
	State NodeState
	// Down mirrors State.Down(); Since is when the node became down (zero
	// unless Down); NotReadySince is when the manager first saw the node not
	// Ready in this episode (zero while Ready).
	Down          bool
	Since         time.Time
	NotReadySince time.Time
	// Isolated: the engine has been silent at the datapath since SilentSince.
	Isolated    bool
	SilentSince time.Time
	// FencedAt is when Vigil fenced and tainted the node in this episode.
	FencedAt time.Time
}

// NodeStatuses lists the nodes the controllers have an opinion on (down,
// debouncing, isolated, fenced), sorted by name; a node absent from the list is
// Ready as far as they know.
func (c *Controller) NodeStatuses() []NodeStatus {
	t := c.nodes
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]NodeStatus, 0, len(t.nodes))
	for name, rec := range t.nodes {
		out = append(out, NodeStatus{Name: name, State: rec.state, Down: rec.down, Since: rec.downSince, NotReadySince: rec.notReadySince,
			Isolated: rec.isolated, SilentSince: rec.silentSince, FencedAt: rec.fencedAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
