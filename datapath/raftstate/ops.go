package raftstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// The control state's calls, as a Store has them, each a command committed
// through the leader (or, for reads, a barrier through it first). Every one
// refuses at a server that is not the leader (ErrNotLeader) and reports a
// command no majority confirmed in time (ErrNotCommitted).

// CreateVolume creates a volume whose data server holds, idempotently by
// name: a second create of the name with the same size and mode returns the
// first volume; with others, ErrAlreadyExists. server must be a member
// (AddServer).
func (g *Group) CreateVolume(ctx context.Context, name string, size int64, mode datapath.AccessMode, server string) (Volume, error) {
	res, err := g.apply(ctx, Command{Op: OpCreateVolume, VolumeID: newVolumeID(), Name: name, Size: size, Access: mode, Server: server})
	return res.volume, err
}

// newVolumeID draws a volume id on the proposing server; the command carries
// it, so every server records the same.
func newVolumeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return "vol-" + hex.EncodeToString(b[:])
}

// DeleteVolume deletes a volume's record; an unknown id is not an error, a
// live grant is (ErrInUse).
func (g *Group) DeleteVolume(ctx context.Context, id string) error {
	_, err := g.apply(ctx, Command{Op: OpDeleteVolume, VolumeID: id})
	return err
}

// Grant gives node a grant of use on the volume and returns its epoch, by
// the attachment table's rules (datapath.AttachTable.Grant).
func (g *Group) Grant(ctx context.Context, id, node string, use datapath.GrantUse) (uint64, error) {
	res, err := g.apply(ctx, Command{Op: OpGrant, VolumeID: id, Node: node, Use: use})
	return res.epoch, err
}

// Fence revokes node on the volume and returns the volume's new epoch.
func (g *Group) Fence(ctx context.Context, id, node string) (uint64, error) {
	res, err := g.apply(ctx, Command{Op: OpFence, VolumeID: id, Node: node})
	return res.epoch, err
}

// FenceNode fences node on every volume where its grant is live, in one
// committed entry, and returns those volumes with their new epochs, sorted
// by id. A second call fences nothing new.
func (g *Group) FenceNode(ctx context.Context, node string) ([]datapath.FencedVolume, error) {
	res, err := g.apply(ctx, Command{Op: OpFenceNode, Node: node})
	return res.fenced, err
}

// Release ends node's live grant on the volume; a node without one is left
// as it is.
func (g *Group) Release(ctx context.Context, id, node string) error {
	_, err := g.apply(ctx, Command{Op: OpRelease, VolumeID: id, Node: node})
	return err
}

// Leave records node's announced graceful stop for d (cut to
// datapath.MaxLeave) and returns when it runs out.
func (g *Group) Leave(ctx context.Context, node string, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: leave of node %s for %s: the duration must be positive (at most %s is kept)", datapath.ErrInvalidArgument, node, d, datapath.MaxLeave)
	}
	now := g.now().UTC()
	until := now.Add(min(d, datapath.MaxLeave))
	_, err := g.apply(ctx, Command{Op: OpLeave, At: now, Node: node, Until: until})
	return until, err
}

// ClearLeave ends node's announced stop when it heartbeats again (not
// within datapath.LeaveSettle of the announcement: that heartbeat may have
// been sent before it).
func (g *Group) ClearLeave(ctx context.Context, node string) error {
	_, err := g.apply(ctx, Command{Op: OpClearLeave, Node: node})
	return err
}

// Volume returns one volume, current.
func (g *Group) Volume(ctx context.Context, id string) (Volume, error) {
	if err := g.current(ctx); err != nil {
		return Volume{}, err
	}
	return g.fsm.Volume(id)
}

// Volumes returns every volume sorted by name, current.
func (g *Group) Volumes(ctx context.Context) ([]Volume, error) {
	if err := g.current(ctx); err != nil {
		return nil, err
	}
	return g.fsm.Volumes(), nil
}

// Attachments returns the volume's attachment table, current.
func (g *Group) Attachments(ctx context.Context, id string) ([]datapath.Attachment, error) {
	if err := g.current(ctx); err != nil {
		return nil, err
	}
	return g.fsm.Attachments(id)
}

// NodeGrants returns node's rows, current.
func (g *Group) NodeGrants(ctx context.Context, node string) ([]datapath.Attachment, error) {
	if err := datapath.ValidNode(node); err != nil {
		return nil, err
	}
	if err := g.current(ctx); err != nil {
		return nil, err
	}
	return g.fsm.NodeGrants(node), nil
}

// Servers returns the recorded members, current.
func (g *Group) Servers(ctx context.Context) ([]Server, error) {
	if err := g.current(ctx); err != nil {
		return nil, err
	}
	return g.fsm.Servers(), nil
}

// Leaves returns the announced stops, current.
func (g *Group) Leaves(ctx context.Context) ([]Leave, error) {
	if err := g.current(ctx); err != nil {
		return nil, err
	}
	return g.fsm.Leaves(), nil
}

// Local is this server's applied state, which may be stale on a follower
// or a cut-off leader: for status pages only, never to answer a grant, a
// fence or an I/O check.
func (g *Group) Local() *FSM { return g.fsm }

// Self is this server's id in the group.
func (g *Group) Self() string { return g.id }

// CheckLeader is nil while this server leads (it may learn otherwise at its
// next commit), and ErrNotLeader naming the leader otherwise.
func (g *Group) CheckLeader() error {
	if g.IsLeader() {
		return nil
	}
	return g.notLeader()
}

// CreateVolumeWithID is CreateVolume with the new volume's id chosen by the
// caller: the datapath server makes the data file under that id before the
// volume is committed. A volume already named name is returned as
// CreateVolume returns it (its id may differ from id).
func (g *Group) CreateVolumeWithID(ctx context.Context, id, name string, size int64, mode datapath.AccessMode, server string) (Volume, error) {
	res, err := g.apply(ctx, Command{Op: OpCreateVolume, VolumeID: id, Name: name, Size: size, Access: mode, Server: server})
	return res.volume, err
}

// AbandonFile commits that the data file prepared under id on server
// (this one, for the datapath) is abandoned: refused when a volume has that
// id (ErrAlreadyExists), and from then on a create of that id is refused
// (ErrNotFound), so the file may be removed. Committing it again is not an
// error.
func (g *Group) AbandonFile(ctx context.Context, id, server string) error {
	_, err := g.apply(ctx, Command{Op: OpAbandonFile, VolumeID: id, Server: server})
	return err
}

// ImportVolume records a volume with its epoch and attachment table as the
// release before the group kept them in datapath.db; a volume already
// recorded under its id is left as it is, so an import cut short may be done
// again. The volume's server must be a member.
func (g *Group) ImportVolume(ctx context.Context, v Volume, rows []datapath.Attachment) error {
	c := Command{Op: OpImportVolume, VolumeID: v.ID, Name: v.Name, Size: v.Size, Access: v.Access, Server: v.Server, Created: v.Created, Epoch: v.Epoch}
	for _, a := range rows {
		c.Rows = append(c.Rows, ImportRow{Node: a.Node, Epoch: a.Epoch, State: a.State, Use: a.Use, Updated: a.Updated})
	}
	_, err := g.apply(ctx, c)
	return err
}

// ImportLeave records an announced stop as the release before recorded it
// (the time it was announced, and when it runs out).
func (g *Group) ImportLeave(ctx context.Context, l Leave) error {
	_, err := g.apply(ctx, Command{Op: OpLeave, At: l.Announced.UTC(), Node: l.Node, Until: l.Until.UTC()})
	return err
}

// AppliedVolume is one volume and its attachment table as this server
// applied them (which may be behind the group: see Local).
func (g *Group) AppliedVolume(id string) (Volume, []datapath.Attachment, bool) {
	return g.fsm.VolumeTable(id)
}

// AppliedVolumes is every volume as this server applied them.
func (g *Group) AppliedVolumes() []Volume { return g.fsm.Volumes() }

// AppliedLeaves is the announced stops as this server applied them.
func (g *Group) AppliedLeaves() []Leave { return g.fsm.Leaves() }

// OnApplied sets the function called with the volumes each change applied
// at this server touched (FSM.OnApplied).
func (g *Group) OnApplied(fn func(volumeIDs []string)) { g.fsm.OnApplied(fn) }

// Group is the control state of a datapath.Store.
var _ datapath.Control = (*Group)(nil)
