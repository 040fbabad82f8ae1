package raftstate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/vigil-storage/vigil/datapath"
)

// Replica sets. Each volume records the servers that hold a copy of its
// data, which of those copies are in sync, and its member epoch, which
// every committed change of the two moves on and nothing moves back
// (datapath.ReplicaSet's rules decide each change). A volume created
// without replicas, as every volume of the releases before, has one copy on
// its Server at member epoch 0, and its log entries and snapshots read as
// they did.

// firstMemberEpoch is the member epoch a volume of r copies is created at:
// 0 for one copy (as every volume of the releases before), 1 for more. A
// client from before replica sets writes at member epoch 0 to the holder
// alone and would have its write acknowledged by one copy of several;
// starting a replicated volume at 1 makes every replica refuse that write
// (ErrStaleMemberEpoch), so only a client that fans writes out can write
// it, even during an upgrade that has not reached every engine.
func firstMemberEpoch(r int) uint64 {
	if r > 1 {
		return 1
	}
	return 0
}

// validateReplicas checks a create's replicas, if any: the holder first,
// then distinct servers, 1 to datapath.MaxReplicas, all starting in sync.
func (c Command) validateReplicas() error {
	if len(c.Replicas) == 0 {
		return nil
	}
	if c.Replicas[0] != c.Server {
		return fmt.Errorf("%w: volume %q: its first replica %s must be its server %s (the holder)", datapath.ErrInvalidArgument, c.Name, c.Replicas[0], c.Server)
	}
	set := datapath.ReplicaSet{VolumeID: c.VolumeID, Holder: c.Server, Replicas: c.Replicas, InSync: c.Replicas}
	return set.Validate(validServerID)
}

// validateReplicaChange checks a replica-out-of-sync, replica-in-sync or
// replace-replica command's fields.
func (c Command) validateReplicaChange() error {
	errs := []error{datapath.ValidVolumeID(c.VolumeID), validServerID(c.Replica)}
	if c.Op == OpReplaceReplica {
		errs = append(errs, validServerID(c.With))
	} else if c.With != "" {
		errs = append(errs, fmt.Errorf("%w: %s names no replacement server (got %q)", datapath.ErrInvalidArgument, c.Op, c.With))
	}
	if c.Op == OpReplicaOutOfSync && c.Node != "" {
		errs = append(errs, datapath.ValidNode(c.Node))
	} else if c.Node != "" || c.Epoch != 0 {
		errs = append(errs, fmt.Errorf("%w: only replica-out-of-sync carries a writer's node and epoch", datapath.ErrInvalidArgument))
	}
	return firstErr(errs...)
}

// checkMembers refuses replicas that are not members of the group.
func (s *state) checkMembers(volume string, ids ...string) error {
	for _, id := range ids {
		if _, ok := s.servers[id]; !ok {
			return fmt.Errorf("%w: volume %s: replica on server %q, which is not a member; members are %s",
				datapath.ErrInvalidArgument, volume, id, s.memberList())
		}
	}
	return nil
}

// changeReplicas applies a replica set change to one volume by the rules.
func (s *state) changeReplicas(c Command) result {
	vs, ok := s.vols[c.VolumeID]
	if !ok {
		return result{err: fmt.Errorf("%w: volume %s", datapath.ErrNotFound, c.VolumeID)}
	}
	set := vs.vol.ReplicaSet()
	var (
		step datapath.ReplicaStep
		err  error
	)
	switch c.Op {
	case OpReplicaOutOfSync:
		if err := vs.checkWriter(c.Node, c.Epoch); err != nil {
			return result{err: err}
		}
		step, err = set.MarkOutOfSync(c.Replica, c.MemberEpoch)
	case OpReplicaInSync:
		step, err = set.MarkInSync(c.Replica, c.MemberEpoch)
	default:
		if err := s.checkMembers(c.VolumeID, c.With); err != nil {
			return result{err: err}
		}
		step, err = set.Replace(c.Replica, c.With, c.MemberEpoch)
	}
	if err != nil {
		return result{err: err}
	}
	if step.Changed {
		vs.vol.SetReplicaSet(step.Set)
	}
	return result{volume: vs.vol}
}

// checkWriter refuses a change asked by a writer (node, at its attach
// epoch) whose grant is not live at that epoch: a fenced node must not
// shrink the in-sync set that refuses its writes. No node: the
// controller asks.
func (vs *volState) checkWriter(node string, epoch uint64) error {
	if node == "" {
		return nil
	}
	if r, ok := vs.rows[node]; !ok || !r.row.Live() || r.row.Epoch != epoch {
		return fmt.Errorf("%w: volume %s: node %s at epoch %d holds no live grant at that epoch (the volume is at epoch %d); only its writer may take a replica out of sync",
			datapath.ErrFenced, vs.vol.ID, node, epoch, vs.vol.Epoch)
	}
	return nil
}

// heldBy lists the volumes of which server holds a copy, sorted.
func (s *state) heldBy(server string) []string {
	var held []string
	for id, vs := range s.vols {
		if slices.Contains(vs.vol.ReplicaSet().Replicas, server) {
			held = append(held, id)
		}
	}
	slices.Sort(held)
	return held
}

// CreateReplicatedVolume is CreateVolumeWithID with the volume's data on
// every server of replicas (distinct members, 1 to datapath.MaxReplicas,
// the first the holder; datapath.PlaceReplicas chooses them), all in sync at
// member epoch 1 for more than one (firstMemberEpoch).
func (g *Group) CreateReplicatedVolume(ctx context.Context, id, name string, size int64, mode datapath.AccessMode, replicas []string) (Volume, error) {
	if len(replicas) == 0 {
		return Volume{}, fmt.Errorf("%w: volume %q: no replicas given; at least one server must hold it", datapath.ErrInvalidArgument, name)
	}
	res, err := g.apply(ctx, Command{Op: OpCreateVolume, VolumeID: id, Name: name, Size: size, Access: mode, Server: replicas[0], Replicas: replicas})
	return res.volume, err
}

// MarkReplicaOutOfSync takes replica's copy of the volume out of the
// in-sync set, a change decided at member epoch asked, and returns the
// volume after it. node and epoch name the writer that asks (its grant
// must be live at that epoch), or are empty and 0 for the controller.
// Refused: datapath.ErrStaleMemberEpoch, datapath.ErrReplicaQuorum (fewer
// than a majority would stay in sync), ErrFenced for a writer whose grant
// is not live, ErrInvalidArgument for a server that is not a replica or is
// the holder.
func (g *Group) MarkReplicaOutOfSync(ctx context.Context, id, replica string, asked uint64, node string, epoch uint64) (Volume, error) {
	res, err := g.apply(ctx, Command{Op: OpReplicaOutOfSync, VolumeID: id, Replica: replica, MemberEpoch: asked, Node: node, Epoch: epoch})
	return res.volume, err
}

// MarkReplicaInSync puts replica's copy back in the in-sync set once it
// caught up, a change decided at member epoch asked.
func (g *Group) MarkReplicaInSync(ctx context.Context, id, replica string, asked uint64) (Volume, error) {
	res, err := g.apply(ctx, Command{Op: OpReplicaInSync, VolumeID: id, Replica: replica, MemberEpoch: asked})
	return res.volume, err
}

// ReplaceReplica puts a copy on server with (a member holding no copy of
// the volume yet) in place of replica's, out of sync until rebuilt, a
// change decided at member epoch asked.
func (g *Group) ReplaceReplica(ctx context.Context, id, replica, with string, asked uint64) (Volume, error) {
	res, err := g.apply(ctx, Command{Op: OpReplaceReplica, VolumeID: id, Replica: replica, With: with, MemberEpoch: asked})
	return res.volume, err
}

// restoreReplicas checks a snapshot's replica set of v and records it.
func restoreReplicas(v *Volume, replicas, inSync []string, memberEpoch uint64) error {
	if len(replicas) == 0 {
		if len(inSync) > 0 || memberEpoch != 0 {
			return fmt.Errorf("%w: in-sync servers (%s) or a member epoch (%d) without replicas", datapath.ErrInvalidArgument, strings.Join(inSync, ", "), memberEpoch)
		}
		return nil
	}
	set := datapath.ReplicaSet{VolumeID: v.ID, Holder: v.Server, Replicas: replicas, InSync: inSync, MemberEpoch: memberEpoch}
	if err := set.Validate(validServerID); err != nil {
		return err
	}
	v.SetReplicaSet(set)
	return nil
}
