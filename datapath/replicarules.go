package datapath

import (
	"fmt"
	"slices"
	"strings"
)

// The rules of a volume's replica set, as pure functions, like the
// attachment table's (attachrules.go): which servers hold a copy of the
// volume's data (R of them, distinct), which of those copies are current
// (the in-sync set), and the member epoch, which counts every committed
// change of the two and never goes back. The control group
// (datapath/raftstate) applies these steps in its state machine, so every
// server decides alike; a replica uses MemberEpochCheck on every write.
// TestReplicaSet is their specification.
//
// The floor: a change never leaves fewer than WriteQuorum(R) replicas in
// sync. A write is acknowledged only when every in-sync replica and at
// least WriteQuorum(R) replicas took it, and a fence is done only once a
// majority (the same number) of the replicas recorded it; two such sets of
// R always share a replica, which is what makes a fenced node's write
// impossible to acknowledge (see doc.go, "Replicated volumes"). A replica
// set that cannot keep the floor suspends I/O rather than shrink further:
// losing a majority is an outage, never a silent downgrade.

// MaxReplicas is the most copies a volume may have.
const MaxReplicas = 5

// WriteQuorum is the least number of replicas of a set of r that must take
// a write before it is acknowledged, and the least that stay in sync:
// ⌈(r+1)/2⌉, a majority.
func WriteQuorum(r int) int { return r/2 + 1 }

// ReplicaSet is one volume's replicas as the rules see them. Holder is the
// replica that serves the volume's I/O while writes go to one copy (the
// volume's Server); it is always a replica and always in sync. Replicas and
// InSync are server ids in the order recorded; the rules never change a
// slice in place, so a ReplicaSet may be copied and shared.
type ReplicaSet struct {
	VolumeID    string
	Holder      string
	Replicas    []string
	InSync      []string
	MemberEpoch uint64
}

// SingleCopy is the replica set of a volume whose data one server holds:
// R=1, in sync, member epoch 0. Every volume created before replica sets
// existed has it.
func SingleCopy(volumeID, server string) ReplicaSet {
	return ReplicaSet{VolumeID: volumeID, Holder: server, Replicas: []string{server}, InSync: []string{server}}
}

// IsSingleCopy says whether the set is SingleCopy's (so a snapshot may leave
// it out and stay as the release before wrote it).
func (s ReplicaSet) IsSingleCopy() bool {
	return s.MemberEpoch == 0 && len(s.Replicas) == 1 && len(s.InSync) == 1 && s.Replicas[0] == s.Holder && s.InSync[0] == s.Holder
}

// Validate checks a set as recorded: 1 to MaxReplicas distinct replicas
// with good ids, the holder among them, the in-sync set a subset of them
// without duplicates, holding the holder and at least WriteQuorum of them.
func (s ReplicaSet) Validate(validID func(string) error) error {
	r := len(s.Replicas)
	if r < 1 || r > MaxReplicas {
		return fmt.Errorf("%w: volume %s has %d replicas; 1 to %d are allowed", ErrInvalidArgument, s.VolumeID, r, MaxReplicas)
	}
	for i, id := range s.Replicas {
		if err := validID(id); err != nil {
			return fmt.Errorf("volume %s: replica: %w", s.VolumeID, err)
		}
		if slices.Contains(s.Replicas[:i], id) {
			return fmt.Errorf("%w: volume %s lists server %s twice among its replicas (%s); each replica must be on its own server",
				ErrInvalidArgument, s.VolumeID, id, strings.Join(s.Replicas, ", "))
		}
	}
	if !slices.Contains(s.Replicas, s.Holder) {
		return fmt.Errorf("%w: volume %s: its holder %s is not among its replicas (%s)", ErrInvalidArgument, s.VolumeID, s.Holder, strings.Join(s.Replicas, ", "))
	}
	for i, id := range s.InSync {
		if !slices.Contains(s.Replicas, id) || slices.Contains(s.InSync[:i], id) {
			return fmt.Errorf("%w: volume %s: in-sync server %s is not a replica or is listed twice (replicas %s, in sync %s)",
				ErrInvalidArgument, s.VolumeID, id, strings.Join(s.Replicas, ", "), strings.Join(s.InSync, ", "))
		}
	}
	if !slices.Contains(s.InSync, s.Holder) {
		return fmt.Errorf("%w: volume %s: its holder %s is not in sync", ErrInvalidArgument, s.VolumeID, s.Holder)
	}
	if len(s.InSync) < WriteQuorum(r) {
		return fmt.Errorf("%w: volume %s has %d of %d replicas in sync; at least %d must be", ErrReplicaQuorum, s.VolumeID, len(s.InSync), r, WriteQuorum(r))
	}
	return nil
}

// ReplicaStep is one decided change of a replica set. A step that changes
// nothing (Changed false) is not to be recorded and keeps the epoch.
type ReplicaStep struct {
	Set     ReplicaSet
	Changed bool
}

// checkAsked refuses a change asked at another member epoch than the
// set's: the caller decided from a view that a committed change has since
// replaced, and must read the volume again.
func (s ReplicaSet) checkAsked(what string, asked uint64) error {
	if asked != s.MemberEpoch {
		return fmt.Errorf("%w: %s of volume %s asked at member epoch %d; the volume is at member epoch %d: read it again and decide anew",
			ErrStaleMemberEpoch, what, s.VolumeID, asked, s.MemberEpoch)
	}
	return nil
}

func (s ReplicaSet) checkReplica(what, server string) error {
	if !slices.Contains(s.Replicas, server) {
		return fmt.Errorf("%w: %s of volume %s: server %s is not one of its replicas (%s)", ErrInvalidArgument, what, s.VolumeID, server, strings.Join(s.Replicas, ", "))
	}
	return nil
}

// checkHolder refuses a change that would take the holder's copy out of
// sync or away: while writes go to one copy, the holder serves every read,
// so its copy is the only current one.
func (s ReplicaSet) checkHolder(what, server string) error {
	if server == s.Holder {
		return fmt.Errorf("%w: %s of volume %s: server %s is its holder, which serves its I/O alone while writes go to one copy; its copy cannot leave the in-sync set",
			ErrInvalidArgument, what, s.VolumeID, server)
	}
	return nil
}

// without is ids less id, as a new slice.
func without(ids []string, id string) []string {
	out := make([]string, 0, len(ids))
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// MarkOutOfSync decides taking server's copy out of the in-sync set (it
// missed a write's deadline, or its server is gone), asked at member epoch
// asked: the member epoch moves on. A copy already out changes nothing.
// Refused: a stale member epoch (ErrStaleMemberEpoch), a server that is not
// a replica or is the holder (ErrInvalidArgument), and a change that would
// leave fewer than WriteQuorum(R) in sync (ErrReplicaQuorum): writes then
// wait instead.
func (s ReplicaSet) MarkOutOfSync(server string, asked uint64) (ReplicaStep, error) {
	const what = "mark out of sync"
	if err := firstError(s.checkAsked(what, asked), s.checkReplica(what, server), s.checkHolder(what, server)); err != nil {
		return ReplicaStep{}, err
	}
	if !slices.Contains(s.InSync, server) {
		return ReplicaStep{Set: s}, nil
	}
	r, left := len(s.Replicas), len(s.InSync)-1
	if left < WriteQuorum(r) {
		return ReplicaStep{}, fmt.Errorf("%w: mark server %s of volume %s out of sync: %d of %d replicas would stay in sync, and at least %d must; the volume's I/O waits for a replica to return instead",
			ErrReplicaQuorum, server, s.VolumeID, left, r, WriteQuorum(r))
	}
	next := s
	next.InSync = without(s.InSync, server)
	next.MemberEpoch++
	return ReplicaStep{Set: next, Changed: true}, nil
}

// MarkInSync decides putting server's copy back in the in-sync set once it
// caught up (resync or rebuild done), asked at member epoch asked: the
// member epoch moves on. A copy already in sync changes nothing. Refused: a
// stale member epoch, a server that is not a replica.
func (s ReplicaSet) MarkInSync(server string, asked uint64) (ReplicaStep, error) {
	const what = "mark in sync"
	if err := firstError(s.checkAsked(what, asked), s.checkReplica(what, server)); err != nil {
		return ReplicaStep{}, err
	}
	if slices.Contains(s.InSync, server) {
		return ReplicaStep{Set: s}, nil
	}
	next := s
	next.InSync = append(slices.Clip(slices.Clone(s.InSync)), server)
	next.MemberEpoch++
	return ReplicaStep{Set: next, Changed: true}, nil
}

// Replace decides putting a copy on server with in place of old's (a full
// rebuild elsewhere), asked at member epoch asked: the new copy starts out
// of sync (it is rebuilt, then MarkInSync), in old's place in the list, and
// the member epoch moves on. Refused: a stale member epoch, old not a
// replica or the holder, with already a replica (each copy on its own
// server), and taking an in-sync old away when that leaves fewer than
// WriteQuorum(R) in sync. Whether with is a member of the group is the
// caller's to check.
func (s ReplicaSet) Replace(old, with string, asked uint64) (ReplicaStep, error) {
	const what = "replace replica"
	if err := firstError(s.checkAsked(what, asked), s.checkReplica(what, old), s.checkHolder(what, old)); err != nil {
		return ReplicaStep{}, err
	}
	if slices.Contains(s.Replicas, with) {
		return ReplicaStep{}, fmt.Errorf("%w: replace replica %s of volume %s with server %s: %s already holds a replica (%s); each replica must be on its own server",
			ErrInvalidArgument, old, s.VolumeID, with, with, strings.Join(s.Replicas, ", "))
	}
	r, left := len(s.Replicas), len(without(s.InSync, old))
	if left < WriteQuorum(r) {
		return ReplicaStep{}, fmt.Errorf("%w: replace replica %s of volume %s: %d of %d replicas would stay in sync, and at least %d must",
			ErrReplicaQuorum, old, s.VolumeID, left, r, WriteQuorum(r))
	}
	next := s
	next.Replicas = slices.Clone(s.Replicas)
	next.Replicas[slices.Index(s.Replicas, old)] = with
	next.InSync = without(s.InSync, old)
	next.MemberEpoch++
	return ReplicaStep{Set: next, Changed: true}, nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
