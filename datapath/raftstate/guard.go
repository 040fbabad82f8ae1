package raftstate

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// The guard against a state that left the group's. hashicorp/raft v1.8.0
// can make a follower apply an entry a former leader appended but never
// committed (doc.go); the group then replaces that entry in the follower's
// log, but the state machine cannot take it back. So the FSM remembers the
// index and term of the last command it applied, and before every apply,
// snapshot and current read checks that the log still holds that entry
// with that term. If the log holds another term there, this server's state
// is not the group's: it becomes ErrDiverged for good (a snapshot from the
// leader, installed over it, clears it), and it answers nothing.

// appliedEntry is the last command applied: its index and term.
type appliedEntry struct {
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
}

// checkLocked returns the divergence, finding it first if the log replaced
// the last applied entry. An entry the log no longer has (compacted, or
// deleted before it is rewritten) cannot be checked now. The caller holds
// f.mu for writing.
func (f *FSM) checkLocked() error {
	if f.diverged != nil || f.logs == nil || f.last.Index == 0 {
		return f.diverged
	}
	var l raft.Log
	if err := f.logs.GetLog(f.last.Index, &l); err != nil {
		if errors.Is(err, raft.ErrLogNotFound) {
			return nil
		}
		return fmt.Errorf("check the log at index %d: %w", f.last.Index, err)
	}
	if l.Term != f.last.Term {
		f.diverged = fmt.Errorf("%w: it applied the entry at index %d of term %d, and the group's log holds one of term %d there; "+
			"remove this server's data directory and add it to the group again", ErrDiverged, f.last.Index, f.last.Term, l.Term)
	}
	return f.diverged
}

// Verify reports whether this server's state is still the group's.
func (f *FSM) Verify() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkLocked()
}
