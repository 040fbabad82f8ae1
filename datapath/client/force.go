package client

import (
	"context"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// ForceReplicas asks the leader to let a volume that lost a majority of its
// replicas serve from the ones named (Store.ForceReplicas), the controller
// role only: with req.DryRun it says what it would do and changes nothing.
// A force is decided at req.MemberEpoch and refused at any other
// (datapath.ErrStaleMemberEpoch), so a repeat after a lost answer changes
// nothing; a volume that has quorum is refused (datapath.ErrReplicaQuorum).
func (c *Client) ForceReplicas(ctx context.Context, req datapath.ForceRequest) (datapath.ForcePlan, error) {
	var resp wire.ForceReplicasReport
	w := &wire.ForceReplicasRequest{VolumeID: req.VolumeID, Replicas: req.Replicas, MemberEpoch: req.MemberEpoch, Reason: req.Reason, DryRun: req.DryRun}
	if err := c.call(ctx, "", wire.MethodForceReplicas, w, &resp, retrySafe); err != nil {
		return datapath.ForcePlan{}, err
	}
	return datapath.ForcePlan{VolumeID: resp.VolumeID, Name: resp.Name,
		Before:      datapath.ReplicaSet{VolumeID: resp.VolumeID, Holder: resp.Holder, Replicas: resp.Replicas, InSync: resp.InSync, MemberEpoch: resp.MemberEpoch},
		After:       datapath.ReplicaSet{VolumeID: resp.VolumeID, Holder: resp.NewHolder, Replicas: resp.Forced, InSync: resp.Forced, MemberEpoch: resp.NewMemberEpoch},
		Unreachable: resp.Unreachable, Done: resp.Done}, nil
}

// forcedFromWire is a volume's last force as GroupVolumes reports it.
func forcedFromWire(f *wire.ForceRecord) *datapath.ForceRecord {
	if f == nil {
		return nil
	}
	return &datapath.ForceRecord{By: f.By, Reason: f.Reason, At: time.Unix(0, f.AtUnix).UTC(), Forced: f.Forced,
		ReplicasBefore: f.ReplicasBefore, InSyncBefore: f.InSyncBefore, MemberEpoch: f.MemberEpoch}
}
