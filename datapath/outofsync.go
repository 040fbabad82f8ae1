package datapath

import (
	"context"
	"fmt"
)

// replicaMarker is the part of a Control that takes a replica out of a
// volume's in-sync set (raftstate.Group): a change committed by a majority
// and applied here, checked by ReplicaSet.MarkOutOfSync's rules and, for a
// writer that asks, against its live grant at its epoch.
type replicaMarker interface {
	MarkReplicaOutOfSync(ctx context.Context, id, replica string, asked uint64, node string, epoch uint64) (ControlVolume, error)
}

// MarkReplicaOutOfSync takes replica's copy of volumeID out of the
// in-sync set, a change decided at member epoch asked, at the control
// group's leader, and returns the replica set after it. node and epoch name
// the writer that asks (an engine for the replica that missed its write's
// deadline; its grant must be live at that epoch), or are empty and 0 for
// the controller. Refused: ErrNotLeader naming the leader on a follower,
// ErrStaleMemberEpoch, ErrReplicaQuorum (fewer than a majority would stay in
// sync: the writer's I/O waits), ErrFenced for a writer without that live
// grant, ErrInvalidArgument for a server that is not a replica or is the
// holder, and for a store without a control group.
func (s *Store) MarkReplicaOutOfSync(volumeID, replica string, asked uint64, node string, epoch uint64) (ReplicaSet, error) {
	if err := s.checkOpen(); err != nil {
		return ReplicaSet{}, err
	}
	m, ok := s.ctl.(replicaMarker)
	if s.ctl == nil || !ok {
		return ReplicaSet{}, fmt.Errorf("%w: mark replica %s of volume %s out of sync: this server keeps no replica sets (its control state is not in a control group)",
			ErrInvalidArgument, replica, volumeID)
	}
	if err := s.ctl.CheckLeader(); err != nil {
		return ReplicaSet{}, err
	}
	ctx, cancel := s.ctlContext()
	defer cancel()
	v, err := m.MarkReplicaOutOfSync(ctx, volumeID, replica, asked, node, epoch)
	if err != nil {
		return ReplicaSet{}, fmt.Errorf("mark replica %s of volume %s out of sync: %w", replica, volumeID, err)
	}
	// The in-sync replicas refuse the writer's next write, at the new
	// member epoch, until they applied the change: tell them now.
	s.ctl.PushCommit()
	return v.ReplicaSet(), nil
}
