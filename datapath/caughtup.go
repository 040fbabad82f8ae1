package datapath

import (
	"context"
	"fmt"
	"time"
)

// A server started again answers before its state machine holds what the
// group committed: hashicorp/raft restores the last snapshot at start and
// applies the log after it only once it learns the leader's commit index.
// Until then its attachment tables are those of the snapshot, and a node
// fenced since then looks granted at its old epoch: its write would pass
// the (node, epoch) check. So with a control group the calls that read a
// volume's attachment table here (reads, writes, flushes and write
// sessions, Attachments, NodeGrants, Connectivity, ClearFailure) are
// refused with ErrNotApplied, which callers send again, until the server
// has settled with the group once since Open (Control.Settled: every
// command up to a commit index of the current term applied here, which
// covers every entry of its own log, so every change it ever confirmed).
// It stays caught up afterwards: a change committed while it is away from
// the group is one it has not confirmed, and the group reports such a
// change not done (ErrNotApplied), so no caller relies on it.

// catchUpAttempt bounds one Settled attempt; openCatchUpWait is how long
// Open waits for the first success before it returns anyway (a lone
// server, or a group with a leader, settles within it; otherwise the
// server starts and catches up in the background).
const (
	catchUpAttempt  = time.Second
	openCatchUpWait = 2 * time.Second
)

// catchUp settles with the group, retrying until it succeeds or stop is
// closed, then marks the store caught up. done is closed either way.
func (s *Store) catchUp(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	start := time.Now()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), catchUpAttempt)
		err := s.ctl.Settled(ctx)
		cancel()
		if err == nil {
			s.caughtUp.Store(true)
			s.log.Info("datapath: caught up with the control group's log; serving the volumes' I/O",
				"server", s.ctl.Self(), "after", time.Since(start).Round(time.Millisecond))
			s.removeMovedAwayFiles() // the moves it replayed kept their files
			return
		}
		if attempt == 5 || attempt%30 == 0 {
			s.log.Warn("datapath: not caught up with the control group's log yet; the volumes' I/O waits (refused as not applied, clients send it again)",
				"server", s.ctl.Self(), "for", time.Since(start).Round(time.Second), "err", err)
		}
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errNotCaughtUp is nil without a control group and once the server has
// caught up; ErrNotApplied otherwise.
func (s *Store) errNotCaughtUp() error {
	if s.ctl == nil || s.caughtUp.Load() {
		return nil
	}
	return fmt.Errorf("%w: datapath server %s started and has not caught up with the control group's log yet, so its attachment tables may be behind; nothing was read or written: send it again",
		ErrNotApplied, s.ctl.Self())
}

// startCatchUp runs catchUp in the background and waits up to
// openCatchUpWait for it.
func (s *Store) startCatchUp(stop <-chan struct{}) {
	done := make(chan struct{})
	go s.catchUp(stop, done)
	select {
	case <-done:
	case <-time.After(openCatchUpWait):
	}
}
