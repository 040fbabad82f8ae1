package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// The write path of a volume with more than one copy: each write and each
// flush goes to every in-sync replica's server at once, over the bulk
// channel or gRPC as to a holder, under a write session per server, and is
// acknowledged by the ack rule (ackrule.go). A replica that misses it is
// taken out of sync at the control group's leader (MarkReplicaOutOfSync, as
// the writer's node at its epoch) before the write is acknowledged without
// it, and the write is sent again at the new member epoch to the replicas
// still in sync first, so that they mark it in their dirty-region maps of
// the replica that left; the client then holds the set after that change,
// and its next writes carry the new member epoch. A volume of one copy takes the path of
// before, with nothing added.

// DefaultReplicaDeadline is how long a replica has to take a write before
// the writer takes it out of sync.
const DefaultReplicaDeadline = 2 * time.Second

// DefaultNoQuorumWait is how long a write waits once the group refused to
// take a replica out of sync because fewer than a majority would stay in
// sync, before it fails.
const DefaultNoQuorumWait = 30 * time.Second

// replicaResend paces sending a write again to a replica that missed it
// while the volume has no quorum.
const replicaResend = 200 * time.Millisecond

// staleResends bounds how often a write is sent again to a replica that
// refused its member epoch as stale, in case it is only behind: it applies
// the change that moved the epoch within moments of its commit.
const staleResends = 5

// WithReplicaDeadline sets how long a replica of a replicated volume has to
// take a write or a flush before the client takes it out of sync (default
// DefaultReplicaDeadline); 0.1 s to 30 s.
func WithReplicaDeadline(d time.Duration) Option { return func(o *options) { o.replicaDeadline = d } }

// WithNoQuorumWait sets how long a write of a replicated volume waits, once
// the control group refused to take a replica out of sync (no quorum),
// before it fails (default DefaultNoQuorumWait, which 0 also gives); at
// most 10 minutes.
func WithNoQuorumWait(d time.Duration) Option { return func(o *options) { o.noQuorumWait = d } }

// checkReplicaTimes refuses a replica deadline or a no-quorum wait out of
// range, naming the range.
func (o *options) checkReplicaTimes() error {
	if o.replicaDeadline == 0 {
		o.replicaDeadline = DefaultReplicaDeadline
	}
	if o.noQuorumWait == 0 {
		o.noQuorumWait = DefaultNoQuorumWait
	}
	if o.replicaDeadline < 100*time.Millisecond || o.replicaDeadline > 30*time.Second {
		return fmt.Errorf("%w: WithReplicaDeadline(%s): allowed are 100ms to 30s", datapath.ErrInvalidArgument, o.replicaDeadline)
	}
	if o.noQuorumWait < 0 || o.noQuorumWait > 10*time.Minute {
		return fmt.Errorf("%w: WithNoQuorumWait(%s): allowed are 0 to 10m", datapath.ErrInvalidArgument, o.noQuorumWait)
	}
	return nil
}

// writeReplicated sends w to every in-sync replica of v by the ack rule and
// keeps the set it was acknowledged under.
func (c *Client) writeReplicated(ctx context.Context, v *replicaView, w ioWrite) error {
	return c.fanOut(ctx, v, w.node, w.epoch, true, func(ctx context.Context, addr string, member uint64) error {
		r := w
		r.at, r.member = addr, member
		return c.sendReplica(ctx, r)
	})
}

// flushReplicated flushes every in-sync replica of v by the ack rule.
func (c *Client) flushReplicated(ctx context.Context, v *replicaView, vol, node string, epoch uint64) error {
	req := &wire.FlushRequest{IOTarget: wire.IOTarget{VolumeID: vol, Node: node, Epoch: epoch}}
	return c.fanOut(ctx, v, node, epoch, false, func(ctx context.Context, addr string, _ uint64) error {
		return c.callTo(ctx, vol, addr, wire.MethodFlush, req, &wire.Empty{}, retryTransport)
	})
}

// fanOut runs the ack rule over v's replicas with send, and keeps the set
// the write was acknowledged under (the member epoch moved on when a
// replica was taken out of sync). again: a write, sent again at the new
// member epoch after such a change (ackrule.go); false for a flush.
//
// A caller's boot recorder (datapath.WithBootRecorder) gets the boot id of
// the holder's machine alone: each replica's server answers with its own
// machine's, and a recorder shared by the sends took whichever answered
// last, so the engine saw a new boot at nearly every write of a volume of
// three copies and sent its kept writes again each time. The holder is the
// machine whose boot matters: it serves the volume's reads (which record
// its boot too) and never leaves the in-sync set, while a replica whose
// machine lost power misses writes and is taken out of sync.
func (c *Client) fanOut(ctx context.Context, v *replicaView, node string, epoch uint64, again bool,
	send func(ctx context.Context, addr string, member uint64) error) error {
	vol := v.set.VolumeID
	wantsBoot := datapath.WantsBoot(ctx)
	set, err := replicatedWrite(ctx, fanOut{
		set: v.set, deadline: c.opts.replicaDeadline, noQuorum: c.opts.noQuorumWait, resend: replicaResend, again: again,
		send: func(ctx context.Context, id string, member uint64) error {
			addr := v.addrs[id]
			if addr == "" {
				return fmt.Errorf("volume %s: no address known for the server of replica %s", vol, id)
			}
			if !wantsBoot || id == v.set.Holder {
				return send(ctx, addr, member)
			}
			var ignored string
			return send(datapath.WithBootRecorder(ctx, &ignored), addr, member)
		},
		outOfSync: func(ctx context.Context, id string, member uint64) (datapath.ReplicaSet, error) {
			return c.outOfSync(ctx, vol, id, member, node, epoch)
		},
	})
	if set.MemberEpoch != v.set.MemberEpoch {
		c.views.store(vol, &replicaView{set: set, addrs: v.addrs})
	}
	return err
}

// sendReplica sends w to one replica's server. A refusal of its member
// epoch as stale is sent again a few times at short intervals, unless the
// client's view of the volume moved past it: a replica that has not yet
// applied the change that moved the epoch refuses it for moments after the
// commit.
func (c *Client) sendReplica(ctx context.Context, w ioWrite) error {
	pause := 10 * time.Millisecond
	for i := 0; ; i++ {
		err := c.writeTo(ctx, w)
		if !errors.Is(err, datapath.ErrStaleMemberEpoch) || i == staleResends || c.views.load(w.vol).member() > w.member {
			// Not stale; or stale still; or the client's own view moved on
			// meanwhile (another write took a replica out): the write is
			// sent again under the new view, not here.
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause *= 2
	}
}

// outOfSync takes replica id of vol out of sync at the leader, asked at
// member epoch member by node at its epoch, and returns the set after it.
// Refused as stale (another write of the volume, or the controller, changed
// the set first), it reads the set again: when the replica is out of sync
// there, that change did it; otherwise it asks once more at the new
// member epoch.
func (c *Client) outOfSync(ctx context.Context, vol, id string, member uint64, node string, epoch uint64) (datapath.ReplicaSet, error) {
	set, err := c.markOutOfSync(ctx, vol, id, member, node, epoch)
	if !errors.Is(err, datapath.ErrStaleMemberEpoch) {
		return set, err
	}
	v, rerr := c.renewView(ctx, vol)
	if rerr != nil {
		return set, fmt.Errorf("%w (reading the volume's replicas again failed: %v)", err, rerr)
	}
	if !slices.Contains(v.set.InSync, id) {
		return v.set, nil
	}
	return c.markOutOfSync(ctx, vol, id, v.set.MemberEpoch, node, epoch)
}

// markOutOfSync is one MarkReplicaOutOfSync call at the leader.
func (c *Client) markOutOfSync(ctx context.Context, vol, id string, member uint64, node string, epoch uint64) (datapath.ReplicaSet, error) {
	var resp wire.ReplicaSetAnswer
	req := &wire.MarkOutOfSyncRequest{VolumeID: vol, Replica: id, MemberEpoch: member, Node: node, Epoch: epoch}
	if err := c.invoke(ctx, wire.MethodMarkOutOfSync, req, &resp, retryTransport); err != nil {
		return datapath.ReplicaSet{}, err
	}
	return datapath.ReplicaSet{VolumeID: vol, Holder: resp.Holder, Replicas: resp.Replicas, InSync: resp.InSync, MemberEpoch: resp.MemberEpoch}, nil
}

// readAt is the server a read of vol goes to: "" (the holder as the client
// knows it, following NOT_HOLDER) for one copy; for more, the holder of the
// replica set the client read. The rules never take the holder out of
// sync, and every acknowledged write is on it; another replica may be
// behind the group (cut off from it, it has not applied the change that
// took it out of sync), and a read carries no member epoch for it to
// check, so reads never go there, neither when a server names it nor when
// the Dial address does not answer.
func (c *Client) readAt(ctx context.Context, vol string) (string, error) {
	v, err := c.viewOf(ctx, vol)
	if err != nil {
		return "", fmt.Errorf("read volume %s: %w", vol, err)
	}
	if !v.replicated() {
		return "", nil
	}
	at := v.addrs[v.set.Holder]
	if at == "" {
		return "", fmt.Errorf("read volume %s: no address known for its holder %s", vol, v.set.Holder)
	}
	return at, nil
}
