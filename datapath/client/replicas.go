package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// The client's view of each volume it writes: its replica set and member
// epoch as a server of the group applied them (GroupVolumes), and the
// datapath address of each replica's server (Servers). Every write carries
// the member epoch of the view, on both channels; a server refuses one at
// another member epoch than it applied (ErrStaleMemberEpoch) before
// writing anything, and the client then reads the volume again, from the
// server that refused first, and sends the write once more. A second
// refusal is the write's error: the client never writes from a view it
// could not renew.
//
// The client reads a volume's view before its first write, so that it
// knows whether the volume has more than one copy before it acknowledges
// anything (a client of one server that is not the leader asks the leader
// it names). A server from before replica
// sets (no GroupVolumes, or no replica section in its answer) reads as a
// single copy at member epoch 0, which is what it holds.

// replicaView is what the client holds of one volume's replica set.
type replicaView struct {
	set datapath.ReplicaSet
	// addrs is each replica's datapath address by server id; nil for a
	// single copy (its I/O goes to the holder, found as before).
	addrs map[string]string
}

// member is the member epoch writes carry under v (0 without a view).
func (v *replicaView) member() uint64 {
	if v == nil {
		return 0
	}
	return v.set.MemberEpoch
}

// replicated says whether writes under v fan out to more than one copy.
func (v *replicaView) replicated() bool { return v != nil && len(v.set.Replicas) > 1 }

// replicaViews holds the client's views by volume id. Reads are lock free:
// the write path loads a view once per write.
type replicaViews struct {
	m  sync.Map // volume id -> *replicaView
	mu sync.Mutex
}

// load returns the view held of vol, nil when none.
func (vs *replicaViews) load(vol string) *replicaView {
	if v, ok := vs.m.Load(vol); ok {
		return v.(*replicaView)
	}
	return nil
}

// store keeps v for vol unless the view held is at a newer member epoch
// (member epochs never go back; a server behind the one that answered
// before must not move the client back), and returns the view kept.
func (vs *replicaViews) store(vol string, v *replicaView) *replicaView {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if old := vs.load(vol); old != nil && old.set.MemberEpoch > v.set.MemberEpoch {
		return old
	}
	vs.m.Store(vol, v)
	return v
}

// viewOf returns the view the client writes vol under: the one held, or
// the one read now.
func (c *Client) viewOf(ctx context.Context, vol string) (*replicaView, error) {
	if v := c.views.load(vol); v != nil {
		return v, nil
	}
	v, err := c.readView(ctx, vol)
	if err != nil {
		return nil, err
	}
	return c.views.store(vol, v), nil
}

// renewView reads vol's view again after a server refused a write at the
// member epoch of the view held.
func (c *Client) renewView(ctx context.Context, vol string) (*replicaView, error) {
	v, err := c.readView(ctx, vol)
	if err != nil {
		return nil, err
	}
	return c.views.store(vol, v), nil
}

// readView reads vol's replica set as the group's leader committed it
// (GroupVolumes answers at the leader only, so a view is never older than
// any server's), and, for more than one copy, each replica's address. A
// server that does not serve GroupVolumes, or not to an engine, predates
// the replicated write path: vol is one copy, at member epoch 0.
func (c *Client) readView(ctx context.Context, vol string) (*replicaView, error) {
	vols, err := c.groupVolumesAt(ctx, "", false)
	var re *datapath.RemoteError
	if len(c.group.servers) < 2 && errors.As(err, &re) && errors.Is(re, datapath.ErrNotLeader) && re.LeaderAddress != "" {
		// A client of one server that is not the leader: ask the leader
		// it names (a client of the group follows by itself).
		vols, err = c.groupVolumesAt(ctx, re.LeaderAddress, false)
	}
	if status.Code(err) == codes.Unimplemented || errors.Is(err, datapath.ErrPermissionDenied) {
		// A server from before replica sets, or from before engines read
		// them: it offers no volume more than one copy to write to.
		return &replicaView{set: datapath.SingleCopy(vol, "")}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the replicas of volume %s: %w", vol, err)
	}
	i := slices.IndexFunc(vols, func(v datapath.GroupVolume) bool { return v.ID == vol })
	if i < 0 {
		return nil, fmt.Errorf("read the replicas of volume %s: %w: the group has no such volume", vol, datapath.ErrNotFound)
	}
	set := vols[i].ReplicaSet()
	if len(set.Replicas) < 2 {
		return &replicaView{set: set}, nil
	}
	addrs, err := c.replicaAddrs(ctx, set)
	if err != nil {
		return nil, fmt.Errorf("read the replicas of volume %s: %w", vol, err)
	}
	return &replicaView{set: set, addrs: addrs}, nil
}

// replicaAddrs maps each replica of set to its server's datapath address,
// as the server dialed knows the group's members; a replica whose server
// it does not know is an error naming it.
func (c *Client) replicaAddrs(ctx context.Context, set datapath.ReplicaSet) (map[string]string, error) {
	rep, err := c.AnyServers(ctx)
	if err != nil {
		return nil, fmt.Errorf("the group's servers: %w", err)
	}
	out := make(map[string]string, len(set.Replicas))
	for _, id := range set.Replicas {
		i := slices.IndexFunc(rep.Servers, func(s datapath.ServerStatus) bool { return s.ID == id })
		if i < 0 || rep.Servers[i].Address == "" {
			return nil, fmt.Errorf("volume %s has a replica on server %s, which the group does not list with an address", set.VolumeID, id)
		}
		out[id] = rep.Servers[i].Address
	}
	return out, nil
}

// checkMember refuses a member epoch neither write channel can carry.
func checkMember(vol string, member uint64) error {
	if err := wire.CheckMemberEpoch(member); err != nil {
		return fmt.Errorf("%w: write to volume %s: %v", datapath.ErrInvalidArgument, vol, err)
	}
	return nil
}
