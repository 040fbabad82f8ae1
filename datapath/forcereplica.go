package datapath

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// Forcing a volume's replicas (`vigil-datapath force-replica`). A volume
// whose in-sync replicas on servers that answer are fewer than
// WriteQuorum(R) suspends its I/O, never serves stale data, and stays so
// until its servers return or an operator forces it to serve from the
// replicas left: the forced replicas become the volume's whole replica
// set, in sync, at the next member epoch, and the others leave it (the
// control group's force-replicas command, which records who asked, when
// and why). Nothing automatic ever asks for it.
//
// The control group's state machine cannot see which servers answer, so
// the leader checks it here before it proposes (decideForce): a volume
// that still has a majority of in-sync replicas on servers that answer is
// refused, and so is a forced replica whose server does not answer.

// ForceRequest is an operator's force of a volume's replicas.
type ForceRequest struct {
	VolumeID string
	// Replicas are the server ids of the replicas to keep.
	Replicas []string
	// MemberEpoch is the member epoch the operator decided at.
	MemberEpoch uint64
	Reason      string
	// DryRun asks for the plan only: nothing is proposed.
	DryRun bool
}

// ForceRecord is the control group's record of the last force of a
// volume's replica set, as `status` shows it (-o json: .volumes[].forced).
type ForceRecord struct {
	// By is the caller's identity as the server that proposed it
	// authenticated it.
	By string `json:"by"`
	// At is the proposing leader's clock.
	At time.Time `json:"at"`
	// Reason is the operator's text.
	Reason string `json:"reason"`
	// Forced are the replicas made the volume's set; ReplicasBefore and
	// InSyncBefore the set they replaced.
	Forced         []string `json:"forced"`
	ReplicasBefore []string `json:"replicasBefore"`
	InSyncBefore   []string `json:"inSyncBefore"`
	// MemberEpoch is the member epoch the force made.
	MemberEpoch uint64 `json:"memberEpoch"`
}

// forcedReader is the Control's record of forces (raftstate.Group has it).
type forcedReader interface {
	AppliedForced(id string) (ForceRecord, bool)
}

// forcedOf is the record of the volume's last force as this server
// applied it; nil when never forced or without a control group.
func (s *Store) forcedOf(id string) *ForceRecord {
	fr, ok := s.ctl.(forcedReader)
	if !ok {
		return nil
	}
	if a, ok := fr.AppliedForced(id); ok {
		return &a
	}
	return nil
}

// ForcePlan is a force as the leader decided it: the volume's replica set
// before, the replicas whose servers do not answer the leader, and the set
// after; Done when committed.
type ForcePlan struct {
	VolumeID, Name string
	Before         ReplicaSet
	Unreachable    []string
	After          ReplicaSet
	Done           bool
}

// forceControl is what a force needs of the Control beyond its interface
// (datapath/raftstate.Group has it).
type forceControl interface {
	PlanForceReplicas(ctx context.Context, id string, replicas []string, asked uint64) (ControlVolume, error)
	ForceReplicas(ctx context.Context, id string, replicas []string, asked uint64, by, reason string) (ControlVolume, error)
}

// unreachableReplicas lists the replicas of set whose servers do not
// answer the leader, as servers (the leader's GroupStatus) says: marked
// unreachable, or not listed at all.
func unreachableReplicas(set ReplicaSet, servers []ServerStatus) []string {
	var out []string
	for _, id := range set.Replicas {
		i := slices.IndexFunc(servers, func(s ServerStatus) bool { return s.ID == id })
		if i < 0 || (servers[i].Role == RoleUnreachable && !servers[i].Self) {
			out = append(out, id)
		}
	}
	return out
}

// decideForce is the leader's check of a force against the servers that
// answer (the state machine checks the rest): refused with
// ErrReplicaQuorum when at least WriteQuorum(R) in-sync replicas are on
// servers that answer (the volume has quorum and serves without a force),
// and with ErrInvalidArgument when a forced replica's server does not
// answer (it could not serve either).
func decideForce(set ReplicaSet, forced, unreachable []string) error {
	reachable := 0
	for _, id := range set.InSync {
		if !slices.Contains(unreachable, id) {
			reachable++
		}
	}
	r := len(set.Replicas)
	if reachable >= WriteQuorum(r) {
		return fmt.Errorf("%w: volume %s has quorum (%d of %d in sync on servers that answer, %d needed); force-replica is for a volume that lost it",
			ErrReplicaQuorum, set.VolumeID, reachable, r, WriteQuorum(r))
	}
	for _, id := range forced {
		if slices.Contains(unreachable, id) {
			return fmt.Errorf("%w: force replicas of volume %s: server %s does not answer the leader (unreachable: %s); force only replicas on servers that answer",
				ErrInvalidArgument, set.VolumeID, id, strings.Join(unreachable, ", "))
		}
	}
	return nil
}

// ForceReplicas decides and, unless req.DryRun, commits an operator's force
// of a volume's replicas, at the leader only (a follower refuses with
// ErrNotLeader naming it). by is the caller as authenticated; it is
// recorded with the force and logged at Warn.
func (s *Store) ForceReplicas(ctx context.Context, by Identity, req ForceRequest) (ForcePlan, error) {
	if err := s.checkOpen(); err != nil {
		return ForcePlan{}, err
	}
	fc, ok := s.ctl.(forceControl)
	if !ok {
		return ForcePlan{}, fmt.Errorf("%w: force replicas of volume %s: this server keeps no control group with replica sets", ErrInvalidArgument, req.VolumeID)
	}
	if err := s.ctl.CheckLeader(); err != nil {
		return ForcePlan{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	if err := s.ctl.Current(ctx); err != nil {
		return ForcePlan{}, err
	}
	v, _, found := s.ctl.AppliedVolume(req.VolumeID)
	if !found {
		return ForcePlan{}, fmt.Errorf("%w: volume %s", ErrNotFound, req.VolumeID)
	}
	plan := ForcePlan{VolumeID: v.ID, Name: v.Name, Before: v.ReplicaSet()}
	plan.Unreachable = unreachableReplicas(plan.Before, s.ctl.GroupStatus())
	after, err := fc.PlanForceReplicas(ctx, req.VolumeID, req.Replicas, req.MemberEpoch)
	if err != nil {
		return plan, err
	}
	if err := decideForce(plan.Before, req.Replicas, plan.Unreachable); err != nil {
		return plan, err
	}
	plan.After = after.ReplicaSet()
	if req.DryRun {
		return plan, nil
	}
	after, err = fc.ForceReplicas(ctx, req.VolumeID, req.Replicas, req.MemberEpoch, by.String(), req.Reason)
	if err != nil {
		return plan, err
	}
	plan.After, plan.Done = after.ReplicaSet(), true
	s.log.Warn("datapath: replicas forced by an operator: the volume serves from these replicas only; the others left its replica set",
		"volume", v.ID, "name", v.Name, "by", by.String(), "reason", req.Reason, "forced", plan.After.Replicas,
		"replicasBefore", plan.Before.Replicas, "inSyncBefore", plan.Before.InSync, "unreachable", plan.Unreachable, "memberEpoch", plan.After.MemberEpoch)
	return plan, nil
}

// forceReplicasMethod is the ForceReplicas handler: the caller's identity
// is handed to the Store to record.
func forceReplicasMethod() grpc.MethodDesc {
	return methodAs(wire.MethodForceReplicas, func(ctx context.Context, st *Store, id Identity, req *wire.ForceReplicasRequest) (wire.Message, error) {
		plan, err := st.ForceReplicas(ctx, id, ForceRequest{VolumeID: req.VolumeID, Replicas: req.Replicas,
			MemberEpoch: req.MemberEpoch, Reason: req.Reason, DryRun: req.DryRun})
		if err != nil {
			return nil, err
		}
		return forcePlanToWire(plan), nil
	})
}

func forcePlanToWire(p ForcePlan) *wire.ForceReplicasReport {
	return &wire.ForceReplicasReport{VolumeID: p.VolumeID, Name: p.Name, Holder: p.Before.Holder, Replicas: p.Before.Replicas,
		InSync: p.Before.InSync, MemberEpoch: p.Before.MemberEpoch, Unreachable: p.Unreachable, NewHolder: p.After.Holder,
		Forced: p.After.Replicas, NewMemberEpoch: p.After.MemberEpoch, Done: p.Done}
}

func forcedToWire(f *ForceRecord) *wire.ForceRecord {
	if f == nil {
		return nil
	}
	return &wire.ForceRecord{By: f.By, Reason: f.Reason, AtUnix: unixNano(f.At), Forced: f.Forced,
		ReplicasBefore: f.ReplicasBefore, InSyncBefore: f.InSyncBefore, MemberEpoch: f.MemberEpoch}
}
