package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/fencing"
)

// grantsMaxAge is how old a node's grants, as the fencing back end last reported
// them, may be when they are used as proof. A grant can come back only through a
// new ControllerPublish for the node, which needs a VolumeAttachment Vigil does
// not create; the bound keeps a stale "not live" short-lived anyway.
const grantsMaxAge = time.Second

// grantsView is the fencing back end's answer about one node's grants.
type grantsView struct {
	at   time.Time       // manager clock when fetched; zero: never fetched
	live map[string]bool // volume handle → the node holds a live grant on it
}

// fetched reports whether the view holds an answer.
func (g grantsView) fetched() bool { return !g.at.IsZero() }

// proven reports whether the node is proven fenced on the volume: the back end
// answered and the node holds no live grant on it (its row is fenced, released
// or absent). Proof that the node's grant is revoked is the only proof.
func (g grantsView) proven(handle string) bool { return g.fetched() && !g.live[handle] }

func newGrantsView(gs []fencing.Grant, at time.Time) grantsView {
	v := grantsView{at: at, live: make(map[string]bool, len(gs))}
	for _, g := range gs {
		if g.State.Live() {
			v.live[g.Handle] = true
		}
	}
	return v
}

// setGrants stores a node's grants as fetched at at.
func (t *nodeTracker) setGrants(name string, v grantsView) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.get(name).grants = v
}

// grants returns the node's last fetched grants.
func (t *nodeTracker) grants(name string) grantsView {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.nodes[name]; r != nil {
		return r.grants
	}
	return grantsView{}
}

// proofs fetches node grants from the Fencer for the reaper and attachment
// recovery, at most one fetch per node at a time and none while the last answer
// is fresher than grantsMaxAge, so 110 pods of one node cost one call.
type proofs struct {
	fencer Fencer
	nodes  *nodeTracker
	now    func() time.Time

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func newProofs(f Fencer, nodes *nodeTracker, now func() time.Time) *proofs {
	return &proofs{fencer: f, nodes: nodes, now: now, locks: map[string]*sync.Mutex{}}
}

func (p *proofs) lock(node string) *sync.Mutex {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.locks[node]
	if l == nil {
		l = &sync.Mutex{}
		p.locks[node] = l
	}
	return l
}

// grants returns the node's grants no older than grantsMaxAge. Without a Fencer
// nothing is ever proven.
func (p *proofs) grants(ctx context.Context, node string) (grantsView, error) {
	if p == nil || p.fencer == nil {
		return grantsView{}, nil
	}
	l := p.lock(node)
	l.Lock()
	defer l.Unlock()
	if v := p.nodes.grants(node); v.fetched() && p.now().Sub(v.at) < grantsMaxAge {
		return v, nil
	}
	return p.refresh(ctx, node)
}

// refresh asks the Fencer now; the caller holds the node's lock or has just
// fenced the node.
func (p *proofs) refresh(ctx context.Context, node string) (grantsView, error) {
	at := p.now()
	gs, err := p.fencer.Grants(ctx, node)
	if err != nil {
		return grantsView{}, fmt.Errorf("grants of node %s on %s: %w", node, p.fencer.Driver(), err)
	}
	v := newGrantsView(gs, at)
	p.nodes.setGrants(node, v)
	return v, nil
}

// driver is the CSI driver the Fencer proves volumes of; "" without one.
func (p *proofs) driver() string {
	if p == nil || p.fencer == nil {
		return ""
	}
	return p.fencer.Driver()
}
