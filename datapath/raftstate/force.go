package raftstate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/vigil-storage/vigil/datapath"
)

// Forcing a replica set. A volume that lost a majority of its replicas
// suspends its I/O: no rule of datapath.ReplicaSet takes a copy out of sync
// below WriteQuorum(R), and a write needs that many. Only an operator may
// let it serve from the copies left (`vigil-datapath force-replica`), never
// anything automatic, and the change is recorded with who asked, when and
// why.
//
// The forced replicas become the volume's whole replica set, all in sync,
// at the next member epoch; the others leave it. R drops to the number
// forced. Why not keep the others in the set, out of sync, at the old R: a
// write must reach WriteQuorum(R) copies, so with a majority gone the
// volume would stay suspended after the force, and the set would break the
// floor that every other rule and every snapshot check rely on
// (ReplicaSet.Validate). Dropping them keeps every recorded set valid by
// the ordinary rules and never serves from a copy that was not forced: a
// server whose copy left the set stops serving the volume and removes its
// file as it applies the change, once back (datapath's moved-away files;
// what it held may be newer than a forced out-of-sync copy, which is why
// the command prints what may be lost and wants --yes). Restoring R means a new
// copy rebuilt from a forced one, which is for the replica-placement steps
// to do, never this command.
//
// The state machine cannot see which servers answer: the leader's handler
// refuses a volume that still has a majority of in-sync replicas on
// servers that answer before it proposes (datapath's force-replica
// handler); the state machine checks the static rules only (forceSet).

// MaxForceReason is the longest reason an operator may give for a force.
const MaxForceReason = 256

// ForceAudit is the record of the last forced replica set of a volume
// (who asked, when, why, the set before and the member epoch it made).
type ForceAudit = datapath.ForceRecord

// validateForce checks a force-replicas command's fields: the volume, one
// or more distinct servers, a caller and a reason.
func (c Command) validateForce() error {
	errs := []error{datapath.ValidVolumeID(c.VolumeID), ValidForceReason(c.Reason)}
	if len(c.Replicas) == 0 {
		errs = append(errs, fmt.Errorf("%w: force replicas of volume %s names no replica; name one or more of its replicas", datapath.ErrInvalidArgument, c.VolumeID))
	}
	for i, id := range c.Replicas {
		errs = append(errs, validServerID(id))
		if slices.Contains(c.Replicas[:i], id) {
			errs = append(errs, fmt.Errorf("%w: force replicas of volume %s names server %s twice", datapath.ErrInvalidArgument, c.VolumeID, id))
		}
	}
	if c.By == "" {
		errs = append(errs, fmt.Errorf("%w: force replicas of volume %s says nobody asked for it", datapath.ErrInvalidArgument, c.VolumeID))
	}
	return firstErr(errs...)
}

// ValidForceReason requires the operator's reason: 1 to MaxForceReason
// bytes of valid UTF-8, not only white space.
func ValidForceReason(reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return fmt.Errorf("%w: a force needs a reason: say why the volume may serve from the replicas left (1 to %d characters)", datapath.ErrInvalidArgument, MaxForceReason)
	case len(reason) > MaxForceReason:
		return fmt.Errorf("%w: the reason is %d bytes; at most %d are allowed", datapath.ErrInvalidArgument, len(reason), MaxForceReason)
	case !utf8.ValidString(reason):
		return fmt.Errorf("%w: the reason is not valid UTF-8", datapath.ErrInvalidArgument)
	}
	return nil
}

// forceSet decides the set forcing the replicas forced of set, asked at
// member epoch asked: exactly the forced ones, in their order in the set,
// all in sync, the holder kept if forced (else the first forced one), the
// member epoch one on. Refused: a stale member epoch
// (datapath.ErrStaleMemberEpoch); a single copy, a server that is not a
// replica, every replica named (nothing is left out, so nothing is
// forced), and an out-of-sync copy named next to an in-sync one (it would
// count as current without a resync) (datapath.ErrInvalidArgument).
func forceSet(set datapath.ReplicaSet, forced []string, asked uint64) (datapath.ReplicaSet, error) {
	const what = "force replicas"
	if asked != set.MemberEpoch {
		return datapath.ReplicaSet{}, fmt.Errorf("%w: %s of volume %s asked at member epoch %d; the volume is at member epoch %d: read it again and decide anew",
			datapath.ErrStaleMemberEpoch, what, set.VolumeID, asked, set.MemberEpoch)
	}
	r := len(set.Replicas)
	if r == 1 {
		return datapath.ReplicaSet{}, fmt.Errorf("%w: %s of volume %s: it has one replica (%s); there is nothing to force", datapath.ErrInvalidArgument, what, set.VolumeID, set.Holder)
	}
	inSync := 0
	for _, id := range forced {
		if !slices.Contains(set.Replicas, id) {
			return datapath.ReplicaSet{}, fmt.Errorf("%w: %s of volume %s: server %s is not one of its replicas (%s)", datapath.ErrInvalidArgument, what, set.VolumeID, id, strings.Join(set.Replicas, ", "))
		}
		if slices.Contains(set.InSync, id) {
			inSync++
		}
	}
	if len(forced) >= r {
		return datapath.ReplicaSet{}, fmt.Errorf("%w: %s of volume %s names all %d of its replicas; name only the ones left, fewer than %d", datapath.ErrInvalidArgument, what, set.VolumeID, r, r)
	}
	if inSync > 0 && inSync < len(forced) {
		return datapath.ReplicaSet{}, fmt.Errorf("%w: %s of volume %s names out-of-sync replicas next to in-sync ones (in sync: %s): an out-of-sync copy would count as current without a resync; name the in-sync ones only",
			datapath.ErrInvalidArgument, what, set.VolumeID, strings.Join(set.InSync, ", "))
	}
	next := datapath.ReplicaSet{VolumeID: set.VolumeID, Holder: set.Holder, MemberEpoch: set.MemberEpoch + 1}
	for _, id := range set.Replicas {
		if slices.Contains(forced, id) {
			next.Replicas = append(next.Replicas, id)
		}
	}
	next.InSync = slices.Clone(next.Replicas)
	if !slices.Contains(next.Replicas, set.Holder) {
		next.Holder = next.Replicas[0]
	}
	return next, next.Validate(validServerID)
}

// forceReplicas applies a force-replicas command.
func (s *state) forceReplicas(c Command) result {
	vs, ok := s.vols[c.VolumeID]
	if !ok {
		return result{err: fmt.Errorf("%w: volume %s", datapath.ErrNotFound, c.VolumeID)}
	}
	if err := s.checkMembers(c.VolumeID, c.Replicas...); err != nil {
		return result{err: err}
	}
	before := vs.vol.ReplicaSet()
	next, err := forceSet(before, c.Replicas, c.MemberEpoch)
	if err != nil {
		return result{err: err}
	}
	vs.vol.Server = next.Holder
	vs.vol.SetReplicaSet(next)
	vs.forced = &ForceAudit{By: c.By, At: c.At, Reason: c.Reason, Forced: slices.Clone(next.Replicas),
		ReplicasBefore: slices.Clone(before.Replicas), InSyncBefore: slices.Clone(before.InSync), MemberEpoch: next.MemberEpoch}
	return result{volume: vs.vol}
}

// Forced returns the record of the last force of the volume's replica set,
// if any.
func (f *FSM) Forced(id string) (ForceAudit, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	vs, ok := f.st.vols[id]
	if !ok || vs.forced == nil {
		return ForceAudit{}, false
	}
	return *vs.forced, true
}

// ForceReplicas makes the named replicas of the volume its whole replica
// set, in sync, a change decided at member epoch asked, and records who
// asked (by: the caller as authenticated) and why (reason, required, at
// most MaxForceReason bytes); the time is this leader's clock. Whether
// the volume lost its majority is the caller's to check first (see
// forceSet for what is refused here).
func (g *Group) ForceReplicas(ctx context.Context, id string, replicas []string, asked uint64, by, reason string) (Volume, error) {
	res, err := g.apply(ctx, Command{Op: OpForceReplicas, VolumeID: id, Replicas: replicas, MemberEpoch: asked, By: by, Reason: reason})
	return res.volume, err
}

// AppliedForced is the record of the volume's last forced replica set as
// this server applied it.
func (g *Group) AppliedForced(id string) (ForceAudit, bool) { return g.fsm.Forced(id) }

// checkAgainst checks a snapshot's record of a force against its volume:
// someone asked, at a time, and the member epoch it made is not above the
// volume's.
func checkForceAudit(a ForceAudit, v Volume) error {
	switch {
	case a.By == "" || a.At.IsZero() || len(a.Forced) == 0:
		return fmt.Errorf("%w: a force without its caller, time or replicas", datapath.ErrInvalidArgument)
	case a.MemberEpoch > v.MemberEpoch:
		return fmt.Errorf("%w: a force at member epoch %d, above the volume's %d", datapath.ErrInvalidArgument, a.MemberEpoch, v.MemberEpoch)
	}
	return nil
}

// planForce decides a force against the applied state without changing
// it: the volume as the force would leave it, or what refuses it.
func (f *FSM) planForce(id string, replicas []string, asked uint64) (Volume, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	vs, ok := f.st.vols[id]
	if !ok {
		return Volume{}, fmt.Errorf("%w: volume %s", datapath.ErrNotFound, id)
	}
	if err := f.st.checkMembers(id, replicas...); err != nil {
		return Volume{}, err
	}
	next, err := forceSet(vs.vol.ReplicaSet(), replicas, asked)
	if err != nil {
		return Volume{}, err
	}
	v := vs.vol
	v.Server = next.Holder
	v.SetReplicaSet(next)
	return v, nil
}

// PlanForceReplicas is ForceReplicas without the change, at the leader,
// current: the volume as the force would leave it, or the error that
// would refuse it (the reason and caller are checked by ForceReplicas only).
func (g *Group) PlanForceReplicas(ctx context.Context, id string, replicas []string, asked uint64) (Volume, error) {
	if err := g.current(ctx); err != nil {
		return Volume{}, err
	}
	return g.fsm.planForce(id, replicas, asked)
}
