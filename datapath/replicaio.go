package datapath

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Replicas of a volume. Every server in a volume's replica set keeps its
// data file open (adopt, loadFromControl) and serves the I/O the writer's
// engine fans out to it - writes (both channels), flushes, write sessions -
// with the holder's checks, from the table and member epoch it applied
// itself: the writer's node must hold a live grant at exactly the request's
// attach epoch (ErrFenced), and the write's member epoch must be the one
// this server applied (ErrStaleMemberEpoch). A write at a newer member epoch
// than this server applied waits, at most MemberEpochWait, for this server
// to apply it, then is refused; a write at an older one is refused at once.
// A replica serves a read only while its copy is in the in-sync set at the
// member epoch it applied; otherwise the read is refused with
// ErrReplicaNotInSync naming the in-sync replicas' addresses, nothing read.
// A server outside the set still refuses the volume's I/O with
// ErrNotHolder (holder.go). A replica whose server the set no longer names
// (the group replaced it) stops serving the volume and removes its file
// once this server has caught up (abandoned.go).

// MemberEpochWait bounds how long a write at a member epoch newer than this
// server applied waits for this server to apply it.
const MemberEpochWait = 2 * time.Second

// memberEpochWait is MemberEpochWait; tests shorten it.
var memberEpochWait = MemberEpochWait

// isReplicaHere says whether cv's replica set names this server.
func (s *Store) isReplicaHere(cv ControlVolume) bool {
	return slices.Contains(cv.ReplicaSet().Replicas, s.ctl.Self())
}

// notInSyncLocked returns the in-sync replicas of v when this server holds a
// replica of v that is not among them (it must not serve a read), nil
// otherwise. The caller holds v.mu.
func (s *Store) notInSyncLocked(v *volume) []string {
	if s.ctl == nil || len(v.set.Replicas) == 0 || slices.Contains(v.set.InSync, s.ctl.Self()) {
		return nil
	}
	return slices.Clone(v.set.InSync)
}

// errNotInSync is the refusal of a read at a replica whose copy is not in
// sync; inSync are the in-sync replicas' ids.
func (s *Store) errNotInSync(op, volumeID string, member uint64, inSync []string) error {
	addrs := s.addresses()
	var where, named []string
	for _, id := range inSync {
		if a := addrs[id]; a != "" {
			where = append(where, id+" at "+a)
			named = append(named, a)
		} else {
			where = append(where, id+" (no address recorded)")
		}
	}
	return &ReplicaNotInSyncError{VolumeID: volumeID, InSyncAddresses: named,
		Msg: fmt.Sprintf("%v: %s volume %s: this server (%s) holds a replica that is not in sync at member epoch %d, so its data may be stale; nothing was read: ask an in-sync replica (%s)",
			ErrReplicaNotInSync, op, volumeID, s.ctl.Self(), member, strings.Join(where, ", "))}
}

// addresses is the datapath address of each member of the group, by id.
func (s *Store) addresses() map[string]string {
	out := map[string]string{}
	for _, m := range s.ctl.GroupStatus() {
		out[m.ID] = m.Address
	}
	return out
}

// setMemberLocked records the member epoch and replica set this server
// applied for v, and wakes the writes that wait for this server to apply
// more of v (every applied change of v, refreshLocked, calls it). The
// caller holds v.mu for writing.
func (v *volume) setMemberLocked(cv ControlVolume) {
	if v.changed != nil {
		close(v.changed)
	}
	v.changed = make(chan struct{})
	v.memberEpoch = cv.MemberEpoch
	v.set = cv.ReplicaSet()
}

// aheadLocked is, for a write at attach epoch epoch and member epoch
// member, what to wait for before checking again: closed once this server
// applies another change of v, when the write is ahead of what this server
// applied (its grant or its member epoch committed, and confirmed by other
// replicas, but not applied here yet); nil otherwise, and always without a
// control group. The caller holds v.mu.
func (v *volume) aheadLocked(epoch, member uint64) <-chan struct{} {
	if member > v.memberEpoch || epoch > v.rec.Epoch {
		return v.changed
	}
	return nil
}
