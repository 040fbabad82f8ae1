package raftstate

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// What this server has applied, for a client that must know a change took
// effect at the server that holds a volume's data before it reports the
// change done (datapath.Control.WaitApplied). An entry counts as applied
// once the FSM changed its state and the observer (the Store's refresh of
// the volume under its write lock) returned: done moves after notify.

// doneMark is the last command applied and observed, and a channel closed
// when it moves.
type doneMark struct {
	entry appliedEntry
	moved chan struct{}
}

// markDone records that the entry e was applied and observed.
func (f *FSM) markDone(e appliedEntry) {
	f.doneMu.Lock()
	defer f.doneMu.Unlock()
	if e.Index < f.done.entry.Index {
		return
	}
	f.done.entry = e
	if f.done.moved != nil {
		close(f.done.moved)
		f.done.moved = nil
	}
}

// Done returns the index and term of the last command this server applied
// and observed.
func (f *FSM) Done() (index, term uint64) {
	f.doneMu.Lock()
	defer f.doneMu.Unlock()
	return f.done.entry.Index, f.done.entry.Term
}

// doneOrWait returns the last entry done, and a channel closed when it
// moves.
func (f *FSM) doneOrWait() (appliedEntry, <-chan struct{}) {
	f.doneMu.Lock()
	defer f.doneMu.Unlock()
	if f.done.moved == nil {
		f.done.moved = make(chan struct{})
	}
	return f.done.entry, f.done.moved
}

// WaitApplied returns once this server applied and observed the command at
// index (of term), or a later one, and its state is still the group's. An
// index or term of 0 is refused. It refuses too when the log here holds
// another term at index (this server's state is not the group's there), and
// when ctx ends first: then the error says how far this server got.
func (f *FSM) WaitApplied(ctx context.Context, index, term uint64) error {
	if index == 0 || term == 0 {
		return fmt.Errorf("%w: wait for the apply of index %d of term %d: both must be positive (a change's answer names them)", datapath.ErrInvalidArgument, index, term)
	}
	for {
		done, moved := f.doneOrWait()
		if done.Index >= index {
			return f.checkApplied(index, term)
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("index %d of term %d is not applied here yet (applied up to %d): %w", index, term, done.Index, ctx.Err())
		}
	}
}

// checkApplied checks, once index is applied here, that the entry applied
// there is the group's (the log here still holds term at index, when it
// holds index at all) and that the state did not diverge since.
func (f *FSM) checkApplied(index, term uint64) error {
	if err := f.Verify(); err != nil {
		return err
	}
	if f.logs == nil {
		return nil
	}
	var l raft.Log
	if err := f.logs.GetLog(index, &l); err != nil {
		if errors.Is(err, raft.ErrLogNotFound) {
			return nil // compacted into a snapshot of the group's state
		}
		return fmt.Errorf("check the log at index %d: %w", index, err)
	}
	if l.Term != term {
		return fmt.Errorf("%w: the entry at index %d here is of term %d, the change asked about is of term %d", ErrDiverged, index, l.Term, term)
	}
	return nil
}

// LastApplied is the index and term of the last command this server
// applied and observed (datapath.Control).
func (g *Group) LastApplied() (index, term uint64) { return g.fsm.Done() }

// WaitApplied returns once this server applied the command at index of
// term, or ctx ends (FSM.WaitApplied).
func (g *Group) WaitApplied(ctx context.Context, index, term uint64) error {
	if g.closed.Load() {
		return ErrClosed
	}
	return g.fsm.WaitApplied(ctx, index, term)
}

// PushCommit makes the leader send its commit index to the followers now,
// not at the next append or CommitTimeout (20 ms by default), so that a
// follower that holds a changed volume's data applies the change at once:
// it appends a Raft barrier (an entry the state machine never sees) and
// does not wait for it. A server that is not the leader does nothing.
func (g *Group) PushCommit() {
	if g.closed.Load() || !g.IsLeader() {
		return
	}
	_ = g.raft.Barrier(0)
}

// Current returns once this server, as leader, applied every change
// committed before the call (datapath.Control).
func (g *Group) Current(ctx context.Context) error { return g.current(ctx) }
