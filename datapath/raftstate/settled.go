package raftstate

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Settled returns once this server's applied state holds every change that
// was proposed before the call and will ever be committed, so that what it
// does not hold was never committed and never will be (datapath.Control:
// the datapath removes a data file no volume names only then). The leader
// gets there through a barrier (Current). A follower gets there when it
// heard from the leader within the heartbeat timeout, the leader's commit
// index it learned is of the current term (the leader committed an entry of
// its own term: an entry of an earlier term it does not hold can never be
// committed), and its state machine applied every command up to that
// index, with nothing after it in its log. What a follower cannot cover is
// its replication lag: a command the leader appended but has not sent it
// yet (milliseconds while they are in touch), so the datapath asks only
// about creates proposed minutes before. ctx ending first is an error
// naming what is missing.
func (g *Group) Settled(ctx context.Context) error {
	if g.closed.Load() {
		return ErrClosed
	}
	if g.IsLeader() {
		return g.current(ctx)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		why := g.followerUnsettled()
		if why == "" {
			return g.failStop(g.fsm.Verify())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: server %s's applied state is not settled: %s (%v)", ErrNotCommitted, g.id, why, ctx.Err())
		case <-tick.C:
		}
	}
}

// followerUnsettled says why this follower's applied state may still miss a
// committed change, "" when it cannot.
func (g *Group) followerUnsettled() string {
	if id, _ := g.Leader(); id == "" || id == g.id {
		return "it knows no leader"
	}
	if since := time.Since(g.raft.LastContact()); since > g.heartbeat {
		return fmt.Sprintf("it last heard from the leader %s ago", since.Round(time.Millisecond))
	}
	term, commit := g.raft.CurrentTerm(), g.raft.CommitIndex()
	var l raft.Log
	if commit == 0 || g.logs.GetLog(commit, &l) != nil || l.Term != term {
		return fmt.Sprintf("the leader of term %d has not committed an entry of its term here yet", term)
	}
	if last := g.raft.LastIndex(); last > commit {
		return fmt.Sprintf("its log holds entries up to %d, committed up to %d", last, commit)
	}
	done, _ := g.fsm.Done()
	for i := done + 1; i <= commit; i++ {
		if err := g.logs.GetLog(i, &l); err != nil || l.Type == raft.LogCommand {
			return fmt.Sprintf("the command at index %d is committed but not applied here yet", i)
		}
	}
	return ""
}
