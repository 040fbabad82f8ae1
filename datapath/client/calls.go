package client

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// CreateVolume creates a volume, idempotently by name: asking again with the same
// name, size and mode returns the existing volume; a different size or mode gets
// ErrAlreadyExists. ErrNoSpace when the server's capacity cannot hold it. Given
// the group's servers (WithServers), it places the volume's data on the server
// with the most free capacity (placement.go).
func (c *Client) CreateVolume(ctx context.Context, name string, size int64, mode datapath.AccessMode) (datapath.Volume, error) {
	if len(c.group.servers) > 1 {
		if err := datapath.ValidVolume(name, size, mode); err != nil {
			return datapath.Volume{}, err // refused before any server is asked
		}
		if v, handled, err := c.createPlaced(ctx, name, size, mode); handled {
			return v, err
		}
	}
	var resp wire.Volume
	err := c.invoke(ctx, wire.MethodCreateVolume, &wire.CreateVolumeRequest{Name: name, Size: size, Access: string(mode)}, &resp, retrySafe)
	if err != nil {
		return datapath.Volume{}, err
	}
	return volumeFromWire(&resp), nil
}

// DeleteVolume deletes a volume and its data. An unknown id is not an error (the
// call is idempotent). A volume with a live grant is refused with ErrInUse: fence
// or release every node first.
func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	var resp wire.PendingAnswer
	if err := c.invoke(confirming(ctx), wire.MethodDeleteVolume, &wire.VolumeRef{ID: id}, &resp, retrySafe); err != nil {
		return err
	}
	return notApplied("delete volume "+id, c.confirm(ctx, resp.Pending))
}

// GetVolume returns one volume; ErrNotFound for an unknown id.
func (c *Client) GetVolume(ctx context.Context, id string) (datapath.Volume, error) {
	var resp wire.Volume
	if err := c.call(ctx, id, wire.MethodGetVolume, &wire.VolumeRef{ID: id}, &resp, retrySafe); err != nil {
		return datapath.Volume{}, err
	}
	return volumeFromWire(&resp), nil
}

// ListVolumes returns every volume, sorted by name.
func (c *Client) ListVolumes(ctx context.Context) ([]datapath.Volume, error) {
	var resp wire.VolumeList
	if err := c.invoke(ctx, wire.MethodListVolumes, &wire.Empty{}, &resp, retrySafe); err != nil {
		return nil, err
	}
	out := make([]datapath.Volume, len(resp.Volumes))
	for i := range resp.Volumes {
		out[i] = volumeFromWire(&resp.Volumes[i])
	}
	return out, nil
}

// Capacity returns the bytes still available for new volumes.
func (c *Client) Capacity(ctx context.Context) (available int64, err error) {
	var resp wire.Int
	if err := c.invoke(ctx, wire.MethodCapacity, &wire.Empty{}, &resp, retrySafe); err != nil {
		return 0, err
	}
	return resp.Value, nil
}

// Grant gives node a read-write grant on the volume and returns its epoch: I/O
// must carry it. It is GrantAs with datapath.UseReadWrite.
func (c *Client) Grant(ctx context.Context, volumeID, node string) (epoch uint64, err error) {
	return c.grant(ctx, &wire.AttachRequest{VolumeID: volumeID, Node: node})
}

// GrantAs gives node a grant of the given use on the volume and returns its
// epoch; I/O must carry it. If node already holds a live grant, the same epoch
// is returned again (idempotent; a different use is recorded). Another node's
// live grant gets ErrAttachedElsewhere when the volume is RWO, and on any
// volume when either grant is a filesystem writer (datapath.UseFilesystemWriter)
// and the other writes. A fenced or released node gets a new, higher epoch.
// Under a read-only grant (datapath.UseReadOnly) every write gets ErrReadOnly.
func (c *Client) GrantAs(ctx context.Context, volumeID, node string, use datapath.GrantUse) (epoch uint64, err error) {
	if err := use.Validate(); err != nil {
		return 0, err
	}
	return c.grant(ctx, &wire.AttachRequest{VolumeID: volumeID, Node: node, Use: string(use)})
}

func (c *Client) grant(ctx context.Context, req *wire.AttachRequest) (uint64, error) {
	var resp wire.Epoch
	if err := c.invoke(confirming(ctx), wire.MethodGrant, req, &resp, retryTransport); err != nil {
		return 0, err
	}
	if err := notApplied(fmt.Sprintf("grant volume %s to node %s", req.VolumeID, req.Node), c.confirm(ctx, resp.Pending)); err != nil {
		return 0, err
	}
	return resp.Epoch, nil
}

// Fence revokes node on the volume and bumps the volume's epoch, which it
// returns. When Fence returns, no write from node is in flight and none can land
// afterwards; the fence is durable. Fencing a node that holds no grant is allowed
// (it records the fence). Fencing again bumps the epoch again. With a control
// group, Fence returns only once the server that holds the volume's data
// confirmed it applied the fence (see confirm.go); one that does not within
// the bound gets datapath.ErrNotApplied naming it: the fence is committed but
// not done, and calling again once that server is back confirms it.
func (c *Client) Fence(ctx context.Context, volumeID, node string) (epoch uint64, err error) {
	var resp wire.Epoch
	if err := c.invoke(confirming(ctx), wire.MethodFence, &wire.AttachRequest{VolumeID: volumeID, Node: node}, &resp, retryTransport); err != nil {
		return 0, err
	}
	if err := notApplied(fmt.Sprintf("fence node %s on volume %s", node, volumeID), c.confirm(ctx, resp.Pending)); err != nil {
		return 0, err
	}
	return resp.Epoch, nil
}

// Release ends node's grant on the volume (a clean detach). Like Fence, no write
// from node lands after it returns. Releasing a node without a live grant is not
// an error; a fenced node stays recorded as fenced.
func (c *Client) Release(ctx context.Context, volumeID, node string) error {
	var resp wire.PendingAnswer
	if err := c.invoke(confirming(ctx), wire.MethodRelease, &wire.AttachRequest{VolumeID: volumeID, Node: node}, &resp, retryTransport); err != nil {
		return err
	}
	return notApplied(fmt.Sprintf("release node %s on volume %s", node, volumeID), c.confirm(ctx, resp.Pending))
}

// Attachments returns the volume's attachment table, one row per node that was
// ever granted or fenced, sorted by node.
func (c *Client) Attachments(ctx context.Context, volumeID string) ([]datapath.Attachment, error) {
	var resp wire.AttachmentList
	if err := c.call(ctx, volumeID, wire.MethodAttachments, &wire.VolumeRef{ID: volumeID}, &resp, retrySafe); err != nil {
		return nil, err
	}
	out := make([]datapath.Attachment, len(resp.Items))
	for i, a := range resp.Items {
		out[i] = datapath.Attachment{
			VolumeID: volumeID, Node: a.Node, Epoch: a.Epoch,
			State: datapath.AttachmentState(a.State), Updated: unixTime(a.UpdatedUnix),
		}
	}
	return out, nil
}

// ReadAt reads n bytes at offset off, as node under epoch. Errors as WriteAt.
// A volume of more than one copy is read from its holder, which is always
// in sync and took every acknowledged write (replicated.go, readAt).
func (c *Client) ReadAt(ctx context.Context, volumeID, node string, epoch uint64, off int64, n int) ([]byte, error) {
	if n < 0 || n > datapath.MaxIOSize {
		return nil, fmt.Errorf("%w: read from volume %s: length %d, want 0..%d", datapath.ErrInvalidArgument, volumeID, n, datapath.MaxIOSize)
	}
	var resp wire.Data
	req := &wire.ReadRequest{IOTarget: wire.IOTarget{VolumeID: volumeID, Node: node, Epoch: epoch}, Offset: off, Length: int64(n)}
	at, err := c.readAt(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	if err := c.callTo(ctx, volumeID, at, wire.MethodRead, req, &resp, retrySafe); err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// Flush makes every write acknowledged so far on the volume durable (fdatasync).
// It carries (node, epoch) like any I/O and is refused with ErrFenced likewise.
//
// A volume with more than one copy is flushed on every in-sync replica, and
// the flush is acknowledged by the same rule as a write (replicated.go).
func (c *Client) Flush(ctx context.Context, volumeID, node string, epoch uint64) error {
	v, err := c.viewOf(ctx, volumeID)
	if err != nil {
		return fmt.Errorf("flush volume %s: %w", volumeID, err)
	}
	if v.replicated() {
		return c.flushReplicated(ctx, v, volumeID, node, epoch)
	}
	req := &wire.FlushRequest{IOTarget: wire.IOTarget{VolumeID: volumeID, Node: node, Epoch: epoch}}
	return c.call(ctx, volumeID, wire.MethodFlush, req, &wire.Empty{}, retryTransport)
}

// Heartbeat records that node is alive and can reach the server; given the
// group's servers (WithServers), every server (heartbeatAll).
func (c *Client) Heartbeat(ctx context.Context, node string) error {
	if len(c.group.servers) > 1 {
		return c.heartbeatAll(ctx, node)
	}
	return c.invoke(ctx, wire.MethodHeartbeat, &wire.NodeRef{Node: node}, &wire.Empty{}, retrySafe)
}

// Connectivity answers whether node is connected (heartbeat or any I/O within
// the window) and whether it did I/O on volumeID within the window. volumeID may
// be empty to ask about the node only. Heartbeats and I/O times live in the
// server's memory: after a server restart a node counts as not connected until it
// heartbeats again.
func (c *Client) Connectivity(ctx context.Context, node, volumeID string, within time.Duration) (datapath.Connectivity, error) {
	var resp wire.Connectivity
	req := &wire.ConnectivityRequest{Node: node, VolumeID: volumeID, WithinNanos: int64(within)}
	if err := c.call(ctx, volumeID, wire.MethodConnectivity, req, &resp, retrySafe); err != nil {
		return datapath.Connectivity{}, err
	}
	return datapath.Connectivity{
		Node: node, VolumeID: volumeID, Window: within,
		Connected: resp.Connected, LastHeartbeat: unixTime(resp.LastHeartbeat),
		IOActive: resp.IOActive, LastIO: unixTime(resp.LastIO), Now: unixTime(resp.Now),
	}, nil
}

// NodeGrants returns node's row on every volume that has one (live, fenced or
// released), sorted by volume id. A node the server never granted anything
// gets an empty list. Each server reports the rows of the volumes whose data
// it holds, so given the group's servers (WithServers) it asks every one and
// fails unless all answer (nodeGrantsAll): a missing row is taken as proof
// that the node cannot write the volume.
func (c *Client) NodeGrants(ctx context.Context, node string) ([]datapath.Attachment, error) {
	if len(c.group.servers) > 1 {
		return c.nodeGrantsAll(ctx, node)
	}
	return c.nodeGrantsAt(ctx, "", node)
}

// nodeGrantsAt is NodeGrants asked of the server at addr ("": Dial's).
func (c *Client) nodeGrantsAt(ctx context.Context, addr, node string) ([]datapath.Attachment, error) {
	var resp wire.NodeGrantList
	if err := c.callTo(ctx, "", addr, wire.MethodNodeGrants, &wire.NodeRef{Node: node}, &resp, retrySafe); err != nil {
		return nil, err
	}
	out := make([]datapath.Attachment, len(resp.Items))
	for i, g := range resp.Items {
		out[i] = datapath.Attachment{
			VolumeID: g.VolumeID, Node: node, Epoch: g.Epoch,
			State: datapath.AttachmentState(g.State), Updated: unixTime(g.UpdatedUnix),
		}
	}
	return out, nil
}

// FenceNode fences node on every volume where it holds a live grant, each with
// a new epoch, and returns those volumes; every fence is durable and, as with
// Fence, no write from node lands on them afterwards. Volumes where node is
// already fenced or released are left alone: calling it again returns an empty
// list. On an error some volumes may be fenced already; NodeGrants tells which,
// and calling FenceNode again fences the rest. With a control group it
// returns the volumes whose servers confirmed they applied the fence; the
// others are named, with their server, by an error satisfying
// datapath.ErrNotApplied, and are not fenced as far as the caller may know
// (Fence each of them again once its server is back).
func (c *Client) FenceNode(ctx context.Context, node string) ([]datapath.FencedVolume, error) {
	var resp wire.FencedList
	if err := c.invoke(confirming(ctx), wire.MethodFenceNode, &wire.NodeRef{Node: node}, &resp, retryTransport); err != nil {
		return nil, err
	}
	us := c.confirm(ctx, resp.Pending)
	left := map[string]bool{}
	for _, u := range us {
		for _, v := range u.holder.Volumes {
			left[v] = true
		}
	}
	out := make([]datapath.FencedVolume, 0, len(resp.Items))
	for _, f := range resp.Items {
		if !left[f.VolumeID] {
			out = append(out, datapath.FencedVolume{VolumeID: f.VolumeID, Epoch: f.Epoch})
		}
	}
	return out, notApplied("fence node "+node, us)
}

// Leave announces that node's agent stops on purpose (a rolling update) and
// may be silent for up to d: until then its silence is not a failure. The
// server refuses a d that is not positive and cuts one longer than
// datapath.MaxLeave; it keeps the announcement across its own restarts, and
// node's next heartbeat ends it. It returns when the announcement runs out,
// on the server's clock.
func (c *Client) Leave(ctx context.Context, node string, d time.Duration) (until time.Time, err error) {
	var resp wire.Int
	if err := c.invoke(ctx, wire.MethodLeave, &wire.LeaveRequest{Node: node, DurationNanos: int64(d)}, &resp, retryTransport); err != nil {
		return time.Time{}, err
	}
	return unixTime(resp.Value), nil
}

// Nodes reports every node the server knows: those that heartbeated or did
// I/O since it started, those that hold a live grant (even if silent since
// the start), and those with an announced stop no heartbeat has cleared yet.
func (c *Client) Nodes(ctx context.Context) (datapath.NodesReport, error) {
	return c.nodesAt(ctx, "")
}

// nodesAt is Nodes asked of the server at addr ("": Dial's).
func (c *Client) nodesAt(ctx context.Context, addr string) (datapath.NodesReport, error) {
	var resp wire.NodeList
	if err := c.callTo(ctx, "", addr, wire.MethodNodes, &wire.Empty{}, &resp, retrySafe); err != nil {
		return datapath.NodesReport{}, err
	}
	r := datapath.NodesReport{Now: unixTime(resp.NowUnix), Started: unixTime(resp.StartedUnix), Nodes: make([]datapath.NodeStatus, len(resp.Items))}
	for i, n := range resp.Items {
		r.Nodes[i] = datapath.NodeStatus{
			Node: n.Node, LastHeartbeat: unixTime(n.LastHeartbeat), LastIO: unixTime(n.LastIO),
			LeavingUntil: unixTime(n.LeavingUntil), LiveGrants: int(min(n.LiveGrants, math.MaxInt32)),
		}
	}
	return r, nil
}

// FailedVolumes lists the volumes whose data failed to flush to disk: each
// refuses every read, write and flush with datapath.ErrVolumeFailed until
// ClearFailure. Each server records the failures of the volumes it holds, so
// given the group's servers it asks every one and lists them all, or fails
// naming a server that did not answer (its failures are not known).
func (c *Client) FailedVolumes(ctx context.Context) ([]datapath.FailedVolume, error) {
	if len(c.group.servers) > 1 {
		return c.failedVolumesAll(ctx)
	}
	return c.failedVolumesAt(ctx, "")
}

// failedVolumesAt is FailedVolumes asked of the server at addr ("": Dial's).
func (c *Client) failedVolumesAt(ctx context.Context, addr string) ([]datapath.FailedVolume, error) {
	var resp wire.FailedList
	if err := c.callTo(ctx, "", addr, wire.MethodFailedVolumes, &wire.Empty{}, &resp, retrySafe); err != nil {
		return nil, err
	}
	out := make([]datapath.FailedVolume, len(resp.Items))
	for i, f := range resp.Items {
		out[i] = datapath.FailedVolume{VolumeID: f.VolumeID, Name: f.Name, Since: unixTime(f.SinceUnix), Op: f.Op, Error: f.Error}
	}
	return out, nil
}

// ClearFailure ends a failed volume's failure, after an operator checked the
// disk and the volume's data: its I/O is accepted again. ErrNotFound for an
// unknown volume, ErrInvalidArgument for one that is not failed.
func (c *Client) ClearFailure(ctx context.Context, volumeID string) error {
	return c.call(ctx, volumeID, wire.MethodClearFailure, &wire.VolumeRef{ID: volumeID}, &wire.Empty{}, retryTransport)
}

// Servers reports the datapath's control group as the server asked sees it
// (datapath.ServersReport): every member with its addresses, the server's
// own role, last contact with the leader and applied index, and what it
// knows of the others' roles. A server without a group reports none.
func (c *Client) Servers(ctx context.Context) (datapath.ServersReport, error) {
	return c.serversAt(ctx, "")
}

// AnyServers is Servers asked of the server dialed or, when that one cannot
// be reached, of the next server of the client's list that answers: for
// callers that need the group's members (placement, the replicas'
// addresses, a count of the servers) rather than one server's view. With
// the server dialed down, they would fail although the group serves.
func (c *Client) AnyServers(ctx context.Context) (datapath.ServersReport, error) {
	rep, err := c.serversAt(ctx, "")
	if err == nil {
		return rep, nil
	}
	for _, addr := range c.group.servers {
		if addr == c.addr || ctx.Err() != nil {
			continue
		}
		if other, err2 := c.serversAt(ctx, addr); err2 == nil {
			return other, nil
		}
	}
	return rep, err
}

// serversAt is Servers asked of the server at addr ("": Dial's).
func (c *Client) serversAt(ctx context.Context, addr string) (datapath.ServersReport, error) {
	var resp wire.ServerList
	if err := c.callTo(ctx, "", addr, wire.MethodServers, &wire.Empty{}, &resp, retrySafe); err != nil {
		return datapath.ServersReport{}, err
	}
	r := datapath.ServersReport{Now: unixTime(resp.NowUnix), Servers: make([]datapath.ServerStatus, len(resp.Items))}
	for i, s := range resp.Items {
		r.Servers[i] = datapath.ServerStatus{ID: s.ID, Node: s.Node, Address: s.Address, RaftAddress: s.RaftAddress, Role: s.Role,
			LastContact: unixTime(s.LastContactUnix), AppliedIndex: s.AppliedIndex, Self: s.Self}
	}
	return r, nil
}

// GroupVolumes reports every volume of the datapath's control group as the
// server asked applied it, sorted by name: its id, name, the id of the
// server holding its data (datapath.ServerStatus.ID), its epoch and its
// recorded replica set (empty for a single copy, and from a server from
// before replica sets). A server without a group reports its own volumes,
// with no server.
func (c *Client) GroupVolumes(ctx context.Context) ([]datapath.GroupVolume, error) {
	return c.groupVolumesAt(ctx, "", true)
}

// groupVolumesAt is GroupVolumes asked of the server at addr ("": Dial's);
// each volume's last force (Forced) only when forced asks for it: the
// write path's and the fence's own reads have no use for it.
func (c *Client) groupVolumesAt(ctx context.Context, addr string, forced bool) ([]datapath.GroupVolume, error) {
	var resp wire.GroupVolumeList
	ctx = metadata.AppendToOutgoingContext(ctx, wire.ReplicasMetadataKey, "1")
	if forced {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.ForcedMetadataKey, "1")
	}
	if err := c.callTo(ctx, "", addr, wire.MethodGroupVolumes, &wire.Empty{}, &resp, retrySafe); err != nil {
		return nil, err
	}
	out := make([]datapath.GroupVolume, len(resp.Items))
	for i, v := range resp.Items {
		out[i] = datapath.GroupVolume{ID: v.ID, Name: v.Name, Server: v.Server, Epoch: v.Epoch,
			Replicas: v.Replicas, InSync: v.InSync, MemberEpoch: v.MemberEpoch, Forced: forcedFromWire(v.Forced)}
	}
	return out, nil
}

// AddServer adds a server to the datapath's control group, at the leader
// (datapath.Store.AddServer): id, the host:port of its Raft transport and
// the host:port it serves clients at. The server must be running, started
// with `serve --raft-join`. Adding it again with the same addresses
// changes nothing, so it is safe to repeat.
func (c *Client) AddServer(ctx context.Context, id, raftAddress, datapathAddress string) error {
	req := &wire.AddServerRequest{ID: id, RaftAddress: raftAddress, DatapathAddress: datapathAddress}
	return c.call(ctx, "", wire.MethodAddServer, req, &wire.Empty{}, retrySafe)
}

// AddNonvoter adds a running server to the control group as a non-voter,
// at the leader (Store.AddNonvoter): it catches up on the log without
// counting for the majority; AddServer then makes it a voter.
func (c *Client) AddNonvoter(ctx context.Context, id, raftAddress, datapathAddress string) error {
	req := &wire.AddServerRequest{ID: id, RaftAddress: raftAddress, DatapathAddress: datapathAddress, Nonvoter: true}
	return c.call(ctx, "", wire.MethodAddServer, req, &wire.Empty{}, retrySafe)
}
