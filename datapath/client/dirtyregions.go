package client

import (
	"context"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// DirtyRegions reads the dirty-region map that the in-sync replica at addr
// (a datapath address; "" asks the server this client dialed) keeps of
// replica's copy of volumeID, out of sync: the regions written since that
// replica left, which a delta resync copies. The controller asks with node
// "" and epoch 0; the writer's engine asks as its node at the attach epoch
// of its live grant. It reads the whole map, page after page. A server
// whose own copy is out of sync refuses with datapath.ErrReplicaNotInSync,
// its message naming the in-sync replicas to ask; a
// replica that is not out of sync, or not a replica, with
// datapath.ErrInvalidArgument.
func (c *Client) DirtyRegions(ctx context.Context, addr, volumeID, replica, node string, epoch uint64) (datapath.DirtyRegions, error) {
	out := datapath.DirtyRegions{VolumeID: volumeID, Replica: replica}
	var from int64
	for {
		req := &wire.DirtyRegionsRequest{VolumeID: volumeID, Replica: replica, Node: node, Epoch: epoch, From: from}
		var resp wire.DirtyRegionsAnswer
		if err := c.callTo(ctx, "", addr, wire.MethodDirtyRegions, req, &resp, retrySafe); err != nil {
			return datapath.DirtyRegions{}, err
		}
		if from > 0 && (resp.Since != out.Since || resp.MemberEpoch != out.MemberEpoch) {
			from = 0 // the map was replaced between two pages: read it again
			out.Ranges = nil
			continue
		}
		out.Since, out.MemberEpoch, out.All, out.Bytes = resp.Since, resp.MemberEpoch, resp.All, resp.Bytes
		for _, r := range resp.Ranges {
			out.Ranges = append(out.Ranges, datapath.DirtyRange{Off: r.Off, Len: r.Len})
		}
		if resp.Next == 0 {
			return out, nil
		}
		from = resp.Next
	}
}
