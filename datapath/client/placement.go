package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// Placement: a client given the group's servers (WithServers) places a new
// volume's data itself. It asks every server its free capacity at once,
// takes the one with the most among those that answer within
// capacityWait, has it make the data file (PrepareVolume), commits the
// create at the leader naming that server, and confirms with that server
// that it applied the create (datapath/placement.go says what becomes of a
// prepared file whose create is never committed). A group whose servers do
// not know PrepareVolume (a release before placement) gets the create of
// before: the leader places the data on itself.

// capacityWait bounds the wait for the servers' free capacity.
const capacityWait = 2 * time.Second

// createPlaced creates the volume on the server with the most free space;
// handled is false when the servers do not know placement.
func (c *Client) createPlaced(ctx context.Context, name string, size int64, mode datapath.AccessMode) (v datapath.Volume, handled bool, err error) {
	addr, err := c.roomiest(ctx)
	if err != nil {
		return datapath.Volume{}, true, fmt.Errorf("create volume %q: %w", name, err)
	}
	prep, err := c.prepareAt(ctx, addr, name, size, mode)
	if leader := c.leaderAddr(); errors.Is(err, datapath.ErrNoSpace) && leader != addr {
		// A create again of a volume the roomiest server has not applied yet
		// looks new there; the leader applied every create it committed.
		if p, lerr := c.prepareAt(ctx, leader, name, size, mode); lerr == nil {
			prep, err = p, nil
		}
	}
	if status.Code(err) == codes.Unimplemented {
		return datapath.Volume{}, false, nil
	}
	if err != nil {
		return datapath.Volume{}, true, fmt.Errorf("create volume %q: %w", name, err)
	}
	var resp wire.Volume
	req := &wire.CreateVolumeRequest{Name: name, Size: size, Access: string(mode), ID: prep.ID, Server: prep.Server}
	if err := c.invoke(confirming(ctx), wire.MethodCreateVolume, req, &resp, retrySafe); err != nil {
		return datapath.Volume{}, true, err
	}
	if err := notApplied("create volume "+name, c.confirm(ctx, resp.Pending)); err != nil {
		return datapath.Volume{}, true, err
	}
	return volumeFromWire(&resp), true, nil
}

// prepareAt asks the server at addr to prepare the volume.
func (c *Client) prepareAt(ctx context.Context, addr, name string, size int64, mode datapath.AccessMode) (wire.PreparedVolume, error) {
	var prep wire.PreparedVolume
	conn, err := c.connAt(addr)
	if err != nil {
		return prep, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	err = conn.Invoke(ctx, wire.FullMethod(wire.MethodPrepareVolume), &wire.CreateVolumeRequest{Name: name, Size: size, Access: string(mode)}, &prep)
	if err != nil && status.Code(err) != codes.Unimplemented {
		return prep, fmt.Errorf("prepare its data file on datapath server %s: %w", addr, datapath.FromStatus(err))
	}
	return prep, err
}

// roomiest is the address of the server with the most free capacity among
// those that answer; near ties go to the one listed first.
func (c *Client) roomiest(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, min(capacityWait, c.opts.timeout))
	defer cancel()
	servers := c.members(ctx)
	free := make([]int64, len(servers))
	errs := eachOf(servers, func(i int, addr string) error {
		var err error
		free[i], err = c.capacityAt(ctx, addr)
		return err
	})
	most := int64(-1)
	for i := range servers {
		if errs[i] == nil {
			most = max(most, free[i])
		}
	}
	if most < 0 {
		return "", fmt.Errorf("no datapath server told its free capacity: %w", errors.Join(errs...))
	}
	i := 0 // the first within the tolerance of the most: the roomiest itself at the latest
	for errs[i] != nil || free[i] < most-most/roomTolerance {
		i++
	}
	return servers[i], nil
}

// members is the client's servers that the group records as members, in
// the client's order: a create may place the data only on a member (the
// state machine refuses another). Servers bootstrapped with a peer list
// that gives their datapath addresses are all recorded at once; with the
// list of before (no addresses), a server is recorded once it led (each
// records itself when it leads), so a follower that never led is left
// out. The record is
// the leader's report: every row but its own is a recorded member, and the
// leader recorded itself when it took the lead (a server's own row is there
// even before it is recorded). When the record cannot be read, or names
// none of the client's servers, every server is a candidate, as before.
func (c *Client) members(ctx context.Context) []string {
	rep, err := c.AnyServers(ctx)
	if err != nil {
		return c.group.servers
	}
	for _, m := range rep.Servers {
		if m.Role == datapath.RoleLeader && !m.Self && m.Address != "" {
			if rep, err = c.serversAt(ctx, m.Address); err != nil {
				return c.group.servers
			}
			break
		}
	}
	recorded := map[string]bool{}
	for _, m := range rep.Servers {
		if m.Self && m.Role != datapath.RoleLeader {
			return c.group.servers // no leader known: the record is not the leader's
		}
		if m.Address != "" {
			recorded[m.Address] = true
		}
	}
	var out []string
	for _, addr := range c.group.servers {
		if recorded[addr] {
			out = append(out, addr)
		}
	}
	if len(out) == 0 {
		return c.group.servers
	}
	return out
}

// roomTolerance: servers whose free capacity is within 1/roomTolerance of
// the most count as tied, and the first listed of them (the Dial address
// first) is taken, so servers on one disk, whose free space moves a little
// with every write, do not take turns at random.
const roomTolerance = 64

// capacityAt asks the server at addr for the bytes it can still promise.
func (c *Client) capacityAt(ctx context.Context, addr string) (int64, error) {
	conn, err := c.connAt(addr)
	if err != nil {
		return 0, err
	}
	var resp wire.Int
	if err := conn.Invoke(ctx, wire.FullMethod(wire.MethodCapacity), &wire.Empty{}, &resp); err != nil {
		return 0, fmt.Errorf("%s: %w", addr, datapath.FromStatus(err))
	}
	return resp.Value, nil
}

// CreateReplicated creates a volume with r copies of its data, on r
// distinct servers of the group (1 to datapath.MaxReplicas, at most the
// servers the group records): datapath.PlaceReplicas chooses them by free
// capacity, the first (the holder) makes its data file and draws the id
// (PrepareVolume), every other makes its own under that id
// (PrepareReplica), at once; the leader commits the volume with all of
// them, and each confirms it applied the create, which opened its file.
// The CSI controller calls it for a replica count above 1 (the
// StorageClass's replicas, else the setting default-replica-count).
func (c *Client) CreateReplicated(ctx context.Context, name string, size int64, mode datapath.AccessMode, r int) (datapath.Volume, error) {
	if err := datapath.ValidVolume(name, size, mode); err != nil {
		return datapath.Volume{}, err
	}
	if r < 1 || r > datapath.MaxReplicas {
		return datapath.Volume{}, fmt.Errorf("%w: create volume %q with %d replicas; 1 to %d are allowed", datapath.ErrInvalidArgument, name, r, datapath.MaxReplicas)
	}
	ids, addrOf, err := c.placeReplicas(ctx, r, size)
	if err != nil {
		return datapath.Volume{}, fmt.Errorf("create volume %q: %w", name, err)
	}
	prep, err := c.prepareAt(ctx, addrOf[ids[0]], name, size, mode)
	if err != nil {
		return datapath.Volume{}, fmt.Errorf("create volume %q: %w", name, err)
	}
	if err := errors.Join(eachOf(ids[1:], func(_ int, id string) error { return c.prepareReplicaAt(ctx, addrOf[id], prep.ID, name, size, mode) })...); err != nil {
		return datapath.Volume{}, fmt.Errorf("create volume %q: %w", name, err)
	}
	var resp wire.Volume
	req := &wire.CreateVolumeRequest{Name: name, Size: size, Access: string(mode), ID: prep.ID, Server: ids[0], Replicas: ids}
	if err := c.invoke(confirming(ctx), wire.MethodCreateVolume, req, &resp, retrySafe); err != nil {
		return datapath.Volume{}, err
	}
	if err := notApplied("create volume "+name, c.confirmEvery(ctx, resp.Pending)); err != nil {
		return datapath.Volume{}, err
	}
	return volumeFromWire(&resp), nil
}

// placeReplicas chooses the r servers of a new volume of size bytes among
// the group's recorded members that tell their free capacity; it returns
// their ids, the holder first, and every member's address by id.
func (c *Client) placeReplicas(ctx context.Context, r int, size int64) ([]string, map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, min(capacityWait, c.opts.timeout))
	defer cancel()
	rep, err := c.AnyServers(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read the group's servers: %w", err)
	}
	addrOf, idOf := map[string]string{}, map[string]string{}
	for _, m := range rep.Servers {
		if m.Address != "" {
			addrOf[m.ID], idOf[m.Address] = m.Address, m.ID
		}
	}
	var servers []string
	for _, addr := range c.members(ctx) {
		if idOf[addr] != "" {
			servers = append(servers, addr)
		}
	}
	space := make([]datapath.ServerSpace, len(servers))
	errs := eachOf(servers, func(i int, addr string) error {
		free, err := c.capacityAt(ctx, addr)
		if err != nil {
			free = -1 // it takes no replica
		}
		space[i] = datapath.ServerSpace{ID: idOf[addr], Free: free}
		return err
	})
	ids, err := datapath.PlaceReplicas(space, r, size)
	if err != nil {
		return nil, nil, errors.Join(append([]error{err}, errs...)...)
	}
	return ids, addrOf, nil
}

// prepareReplicaAt asks the server at addr to prepare a replica of the
// volume under id.
func (c *Client) prepareReplicaAt(ctx context.Context, addr, id, name string, size int64, mode datapath.AccessMode) error {
	conn, err := c.connAt(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	req := &wire.CreateVolumeRequest{Name: name, Size: size, Access: string(mode), ID: id}
	if err := conn.Invoke(ctx, wire.FullMethod(wire.MethodPrepareReplica), req, &wire.PreparedVolume{}); err != nil {
		return fmt.Errorf("prepare a replica's data file on datapath server %s: %w", addr, datapath.FromStatus(err))
	}
	return nil
}
