package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// The ack rule of a replicated volume, as one function over sends it is
// given (replicatedWrite): the engine sends a write (or a flush) to every
// in-sync replica at once and acknowledges it only when every in-sync
// replica and at least datapath.WriteQuorum(R) replicas took it. A replica
// that has not taken it by the deadline (or whose connection failed) is
// taken out of the in-sync set by a change the control group commits at
// the member epoch the writer holds (outOfSync); only once that returned
// is the write acknowledged without it, and the writer's member epoch is
// the one after the change. If the group refuses the change because fewer
// than a majority would stay in sync, the volume has no quorum: the write
// waits, sending again to the replicas that missed it, and fails after a
// bound with an error that names them and says so. A replica that refuses
// the writer as fenced fails the write at once: it is never acknowledged.
// TestReplicatedWrite is the specification.

// errNotAcked: the change that was to take a late replica out of sync came
// back without doing so; the write is not acknowledged.
var errNotAcked = errors.New("write not acknowledged")

// fanOut is one replicated write as replicatedWrite decides it.
type fanOut struct {
	// set is the volume's replica set the writer holds.
	set datapath.ReplicaSet
	// send sends the write to the replica on server id, at member epoch
	// member, and returns its answer.
	send func(ctx context.Context, id string, member uint64) error
	// again: once a change took a replica out of sync, the write is sent
	// again at the new member epoch to the replicas still in sync before it
	// is acknowledged (a write; a flush carries no data and is not).
	again bool
	// deadline is how long a replica has to take the write before it is
	// taken out of sync.
	deadline time.Duration
	// noQuorum is how long the write waits, once the group refused to take
	// a replica out of sync for the floor, before it fails.
	noQuorum time.Duration
	// resend paces sending again to a replica that missed the write while
	// the volume has no quorum.
	resend time.Duration
	// outOfSync commits taking replica id out of the in-sync set at member
	// epoch member and returns the set after it.
	outOfSync func(ctx context.Context, id string, member uint64) (datapath.ReplicaSet, error)
}

type replicaAnswer struct {
	id  string
	err error
}

// fanState is replicatedWrite's bookkeeping: the sends under way, the
// replicas that took the write, and the last error of those that did not.
type fanState struct {
	f       fanOut
	member  uint64
	ctx     context.Context
	answers chan replicaAnswer
	wg      sync.WaitGroup
	running map[string]bool
	took    map[string]bool
	failed  map[string]error
}

// start sends the write to replica id in the background.
func (s *fanState) start(id string) {
	s.running[id] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.f.send(s.ctx, id, s.member)
		select {
		case s.answers <- replicaAnswer{id, err}:
		case <-s.ctx.Done():
		}
	}()
}

// record takes in one answer; it returns the error that ends the write at
// once (a fence, a stale member epoch, a refusal of the request itself).
func (s *fanState) record(a replicaAnswer) error {
	delete(s.running, a.id)
	switch {
	case a.err == nil:
		s.took[a.id] = true
		delete(s.failed, a.id)
	case writeEnding(a.err):
		return a.err
	default:
		s.failed[a.id] = a.err
	}
	return nil
}

// replicatedWrite sends the write to every in-sync replica of f.set and
// returns the replica set it was acknowledged under (f.set, or the set
// after the changes that took late replicas out of sync), or why it was
// not acknowledged. It returns only once every send it started returned.
//
// A write that a change took a replica out of sync for is sent again, at
// the new member epoch, to the replicas still in sync, by the same rule,
// and acknowledged only when they took it again (f.again). Each of them
// starts its dirty-region map for the replica that left, empty, when it
// applies the change; it took the write at the old member epoch, before
// that, so only the write sent again puts it in the map (the same data at
// the same offset: taking it twice changes nothing else). The same holds
// for every write in flight when the change committed, whichever write
// committed it: each write's own round sees the set move (the change it
// asked for, or another write's, which its own ask finds as stale) and
// sends again. A write acknowledged at the old member epoch needs nothing:
// acked acknowledges under a set only when every replica in sync in it
// took the write, the one that later left included; had it not, the write
// would not have been acknowledged at that epoch but would have waited for
// the change, and been sent again after it.
//
// A flush is not sent again: it carries no data, so there is nothing for a
// map to mark, and no member epoch either. What it makes durable was
// written by writes that each came through this rule: on the replica that
// left (taken while it was in sync) or in the maps (sent again after it
// left). One thing the maps cannot say: whether the replica that left kept
// what it took but never flushed (the flush it missed was to make it
// durable there); a replica whose server lost power meanwhile may have lost
// such writes, which no map holds, so a copy back must not trust the map
// alone after a crash of the returning server.
func replicatedWrite(ctx context.Context, f fanOut) (datapath.ReplicaSet, error) {
	set, err := fanRound(ctx, f, f.set)
	// Each round that moves the set took a replica out of sync, which the
	// group refuses below a majority in sync: the rounds end.
	for moved := set.MemberEpoch != f.set.MemberEpoch; err == nil && moved && f.again; {
		from := set
		set, err = fanRound(ctx, f, from)
		moved = set.MemberEpoch != from.MemberEpoch
	}
	return set, err
}

// fanRound is one round of the rule: the write sent at set's member epoch
// to its in-sync replicas, late ones taken out of sync.
func fanRound(ctx context.Context, f fanOut, set datapath.ReplicaSet) (datapath.ReplicaSet, error) {
	if r := len(set.Replicas); len(set.InSync) < datapath.WriteQuorum(r) {
		return set, fmt.Errorf("%w: no quorum: volume %s has %d of %d replicas in sync (%s); a write needs %d",
			datapath.ErrReplicaQuorum, set.VolumeID, len(set.InSync), r, strings.Join(set.InSync, ", "), datapath.WriteQuorum(r))
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &fanState{f: f, member: set.MemberEpoch, ctx: sctx, answers: make(chan replicaAnswer, len(set.InSync)),
		running: map[string]bool{}, took: map[string]bool{}, failed: map[string]error{}}
	defer func() { cancel(); s.wg.Wait() }()
	for _, id := range set.InSync {
		s.start(id)
	}
	if err := s.collect(ctx, set); err != nil {
		return set, err
	}
	for _, id := range set.InSync {
		if err := s.drain(); err != nil {
			return set, err
		}
		if s.took[id] {
			continue
		}
		next, err := f.outOfSync(ctx, id, set.MemberEpoch)
		if errors.Is(err, datapath.ErrFenced) || errors.Is(err, datapath.ErrStaleMemberEpoch) || ctx.Err() != nil {
			return set, fmt.Errorf("take replica %s of volume %s out of sync: %w", id, set.VolumeID, err)
		}
		if err != nil {
			return set, s.waitNoQuorum(ctx, set, err)
		}
		if slices.Contains(next.InSync, id) || next.MemberEpoch <= set.MemberEpoch {
			return set, fmt.Errorf("%w: take replica %s of volume %s out of sync: the group answered member epoch %d with it in sync (%s)",
				errNotAcked, id, set.VolumeID, next.MemberEpoch, strings.Join(next.InSync, ", "))
		}
		set = next
	}
	if err := s.acked(set); err != nil {
		return set, err
	}
	return set, nil
}

// collect waits for every in-sync replica's answer, up to the deadline.
func (s *fanState) collect(ctx context.Context, set datapath.ReplicaSet) error {
	t := time.NewTimer(s.f.deadline)
	defer t.Stop()
	for len(s.running) > 0 {
		select {
		case a := <-s.answers:
			if err := s.record(a); err != nil {
				return err
			}
		case <-t.C:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("write to volume %s: %w", set.VolumeID, ctx.Err())
		}
	}
	return nil
}

// drain takes in the answers that came meanwhile, without waiting.
func (s *fanState) drain() error {
	for {
		select {
		case a := <-s.answers:
			if err := s.record(a); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// acked is nil when set acknowledges the write: every in-sync replica and
// at least WriteQuorum(R) replicas took it.
func (s *fanState) acked(set datapath.ReplicaSet) error {
	var missing []string
	n := 0
	for _, id := range set.Replicas {
		if s.took[id] {
			n++
		} else if slices.Contains(set.InSync, id) {
			missing = append(missing, id)
		}
	}
	if q := datapath.WriteQuorum(len(set.Replicas)); len(missing) > 0 || n < q {
		return fmt.Errorf("%w: no quorum: write to volume %s at member epoch %d taken by %d of %d replicas (needs %d and every in-sync one); in sync without it: %s",
			datapath.ErrReplicaQuorum, set.VolumeID, set.MemberEpoch, n, len(set.Replicas), q, strings.Join(missing, ", "))
	}
	return nil
}

// waitNoQuorum waits, once the group refused to take a replica out of sync
// (refused), for every in-sync replica of set to take the write, sending
// again to those that failed, for at most noQuorum; then the write fails
// naming the replicas that did not take it.
func (s *fanState) waitNoQuorum(ctx context.Context, set datapath.ReplicaSet, refused error) error {
	bound := time.NewTimer(s.f.noQuorum)
	defer bound.Stop()
	tick := time.NewTicker(max(s.f.resend, time.Millisecond))
	defer tick.Stop()
	for s.acked(set) != nil {
		select {
		case a := <-s.answers:
			if err := s.record(a); err != nil {
				return err
			}
		case <-tick.C:
			for id := range s.failed {
				if !s.running[id] {
					s.start(id)
				}
			}
		case <-bound.C:
			var missing []string
			for _, id := range set.InSync {
				if !s.took[id] {
					missing = append(missing, id)
				}
			}
			return fmt.Errorf("%w: no quorum: write to volume %s not taken within %s by replicas %s, which the group would not take out of sync (%v); nothing acknowledged",
				datapath.ErrReplicaQuorum, set.VolumeID, s.f.deadline+s.f.noQuorum, strings.Join(missing, ", "), refused)
		case <-ctx.Done():
			return fmt.Errorf("write to volume %s: %w (no quorum: %v)", set.VolumeID, ctx.Err(), refused)
		}
	}
	return nil
}

// writeEnding says whether a replica's answer ends the write at once,
// unacknowledged: the writer is fenced, its member epoch is stale, or the
// request itself is refused (every replica would refuse it alike).
// Anything else (no answer, a lost connection, a failed disk) is that
// replica missing the write.
func writeEnding(err error) bool {
	for _, e := range []error{datapath.ErrFenced, datapath.ErrStaleMemberEpoch, datapath.ErrInvalidArgument,
		datapath.ErrOutOfRange, datapath.ErrReadOnly, datapath.ErrPermissionDenied, datapath.ErrUnauthenticated, ErrServerTooOld} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
