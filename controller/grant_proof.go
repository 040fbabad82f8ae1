package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/vigil-storage/vigil/fenceapi"
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
	// fenced: volume handle → the node's row on it is fenced (neither live nor
	// released): a fence's promise that may still be open (node_fence_resume.go).
	fenced map[string]bool
	// silent: volume handle → its datapath server does not answer (the back
	// end's state unknown); also in live, since nothing proves the node
	// cannot write it.
	silent map[string]bool
}

// liveHandles returns the volumes in live and those of them whose server
// does not answer, each sorted.
func (g grantsView) liveHandles() (live, silent []string) {
	for h := range g.live {
		live = append(live, h)
		if g.silent[h] {
			silent = append(silent, h)
		}
	}
	sort.Strings(live)
	sort.Strings(silent)
	return live, silent
}

// fetched reports whether the view holds an answer.
func (g grantsView) fetched() bool { return !g.at.IsZero() }

// proven reports whether the node is proven fenced on the volume: the back end
// answered and the node holds no live grant on it (its row is fenced, released
// or absent). Proof that the node's grant is revoked is the only proof.
func (g grantsView) proven(handle string) bool { return g.fetched() && !g.live[handle] }

func newGrantsView(gs []fenceapi.Grant, at time.Time) grantsView {
	v := grantsView{at: at, live: make(map[string]bool, len(gs)), fenced: map[string]bool{}, silent: map[string]bool{}}
	for _, g := range gs {
		if g.State == fenceapi.StateUnknown {
			v.silent[g.Handle] = true
		}
		switch {
		case g.State.Live():
			v.live[g.Handle] = true
		case g.State == fenceapi.StateFenced:
			v.fenced[g.Handle] = true
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

// proofFetchTimeout bounds one fetch of a node's grants, and how long a worker
// waits for it: a hung fencing back end never holds the controller's workers for
// longer than this.
const proofFetchTimeout = 3 * time.Second

// proofs fetches node grants from the FenceBackend for the pod reaper, the node fence and attachment
// recovery: one fetch per node at a time, shared by every worker that asks
// meanwhile (its error too), and none while the last answer is fresher than
// grantsMaxAge, so 110 pods of one node cost one call. A worker waits at most
// timeout; it then goes on with nothing proven.
type proofs struct {
	backend FenceBackend
	nodes   *nodeTracker
	now     func() time.Time
	timeout time.Duration
	flight  singleflight.Group
}

func newProofs(f FenceBackend, nodes *nodeTracker, now func() time.Time) *proofs {
	return &proofs{backend: f, nodes: nodes, now: now, timeout: proofFetchTimeout}
}

// errProofWait: a worker stopped waiting for a node's grants.
var errProofWait = errors.New("the fencing back end has not answered")

// grants returns the node's grants no older than grantsMaxAge. Without a FenceBackend
// nothing is ever proven.
func (p *proofs) grants(ctx context.Context, node string) (grantsView, error) {
	if p == nil || p.backend == nil {
		return grantsView{}, nil
	}
	if v := p.nodes.grants(node); v.fetched() && p.now().Sub(v.at) < grantsMaxAge {
		return v, nil
	}
	// The fetch runs on a context of its own, so that a worker that stops
	// waiting does not fail it for the others.
	ch := p.flight.DoChan(node, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
		defer cancel()
		return p.refresh(fctx, node)
	})
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.Err != nil {
			return grantsView{}, r.Err
		}
		return r.Val.(grantsView), nil
	case <-t.C:
		return grantsView{}, fmt.Errorf("grants of node %s on %s: %w within %s", node, p.backend.Driver(), errProofWait, p.timeout)
	case <-ctx.Done():
		return grantsView{}, ctx.Err()
	}
}

// refresh asks the FenceBackend now (grants' shared fetch, or the fence that has
// just fenced the node).
func (p *proofs) refresh(ctx context.Context, node string) (grantsView, error) {
	at := p.now()
	gs, err := p.backend.Grants(ctx, node)
	if err != nil {
		return grantsView{}, fmt.Errorf("grants of node %s on %s: %w", node, p.backend.Driver(), err)
	}
	v := newGrantsView(gs, at)
	p.nodes.setGrants(node, v)
	return v, nil
}

// driver is the CSI driver the FenceBackend proves volumes of; "" without one.
func (p *proofs) driver() string {
	if p == nil || p.backend == nil {
		return ""
	}
	return p.backend.Driver()
}
