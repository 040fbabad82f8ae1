package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// ErrServerTooOld: the server cannot order this client's writes over gRPC (it
// predates write sessions there), and the bulk channel was off or not
// answered. Nothing was written: the client never sends a write that could
// land after a newer one. Upgrading vigil-datapath to the client's release
// ends it.
var ErrServerTooOld = errors.New("datapath server too old to order writes")

// WriteAt writes p at byte offset off, as node under epoch. ErrFenced (nothing
// written) if the epoch is stale or the node was fenced or released;
// ErrOutOfRange if the write reaches past the volume's end; ErrInvalidArgument
// if p is larger than datapath.MaxIOSize; ErrServerTooOld if the server cannot
// order writes. The write is acknowledged once the server has written it to
// its file; call Flush to make it durable. Writes go over the bulk channel,
// or over gRPC (WithBulk(false), a server that does not answer the bulk
// hello) under the same write sessions: either way a write the client gave
// up on never lands after one that follows it.
func (c *Client) WriteAt(ctx context.Context, volumeID, node string, epoch uint64, off int64, p []byte) error {
	if len(p) > datapath.MaxIOSize {
		return fmt.Errorf("%w: write to volume %s: %d bytes, at most %d per request", datapath.ErrInvalidArgument, volumeID, len(p), datapath.MaxIOSize)
	}
	v, err := c.viewOf(ctx, volumeID)
	if err != nil {
		return fmt.Errorf("write to volume %s: %w", volumeID, err)
	}
	w := ioWrite{vol: volumeID, node: node, epoch: epoch, off: off, p: p}
	err = c.writeUnder(ctx, v, w)
	if !errors.Is(err, datapath.ErrStaleMemberEpoch) || ctx.Err() != nil {
		return err
	}
	// A committed change of the volume's replicas replaced the view: read
	// it again and send once more.
	v, rerr := c.renewView(ctx, volumeID)
	if rerr != nil {
		return fmt.Errorf("%w (reading the volume's replicas again failed: %v)", err, rerr)
	}
	return c.writeUnder(ctx, v, w)
}

// ioWrite is one write as its attempts send it.
type ioWrite struct {
	vol, node     string
	epoch, member uint64
	off           int64
	p             []byte
	// at is the server it goes to; "": the volume's holder as the client
	// knows it, following a NOT_HOLDER refusal.
	at string
}

// writeUnder sends w at the member epoch of v: to the holder (one copy),
// or to every in-sync replica by the ack rule (replicated.go).
func (c *Client) writeUnder(ctx context.Context, v *replicaView, w ioWrite) error {
	w.member = v.member()
	if err := checkMember(w.vol, w.member); err != nil {
		return err
	}
	if v.replicated() {
		return c.writeReplicated(ctx, v, w)
	}
	return c.writeTo(ctx, w)
}

// writeTo sends w over the bulk channel, or over gRPC when the server does
// not speak it.
func (c *Client) writeTo(ctx context.Context, w ioWrite) error {
	if err := c.writeBulk(ctx, w); !errors.Is(err, errBulkUnsupported) {
		return err
	}
	return c.writeGRPC(ctx, w)
}

// addrOf is the server w goes to now.
func (c *Client) addrOf(w ioWrite) string {
	if w.at != "" {
		return w.at
	}
	return c.holderOf(w.vol)
}

// writeGRPC is WriteAt over gRPC, with writeBulk's rules: a failed connection
// is retried with the same epoch, a timeout or the server's answer is not,
// except a refusal as stale (nothing written), sent again at once under a
// new generation; and every attempt whose answer did not come ends its
// generation, so the retry goes out under a new one.
func (c *Client) writeGRPC(ctx context.Context, w ioWrite) error {
	backoff := c.opts.minBackoff
	volumeID, follow := w.vol, w.at == ""
	for attempt, stale, moves := 0, 0, 0; ; attempt++ {
		addr := c.addrOf(w)
		actx, cancel := context.WithTimeout(ctx, c.opts.timeout)
		err := c.writeGRPCOnce(actx, addr, w)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(datapath.FromStatus(err), datapath.ErrStaleSession) && stale < maxStaleResends && ctx.Err() == nil:
			stale++
			attempt--
			continue
		case follow && moves < maxHolderMoves && ctx.Err() == nil && c.toHolder(volumeID, addr, err):
			moves++ // nothing was written: the same write goes to the holder at once
			attempt--
			continue
		case status.Code(err) == codes.Unimplemented:
			// A server of the release before this one speaks the bulk
			// channel: if its hello went unanswered only because it was
			// restarting, the next write tries the bulk channel again at
			// once instead of a minute later.
			c.bulkMu.Lock()
			c.poolLocked(addr).retryAt = time.Time{}
			c.bulkMu.Unlock()
			return fmt.Errorf("%w: datapath %s does not serve %s over gRPC (%v), so it cannot order writes there, and the bulk channel is off or unanswered; "+
				"nothing was written. Upgrade vigil-datapath to this client's release", ErrServerTooOld, addr, wire.MethodOpenWriteSession, datapath.FromStatus(err))
		case follow && ctx.Err() == nil && c.askElsewhere(volumeID, addr, err) && attempt < c.opts.retries && retryable(ctx, err, retryTransport):
			// The next attempt asks another server of the group.
		case attempt >= c.opts.retries || !retryable(ctx, err, retryTransport):
			err = c.callError(wire.MethodWrite, addr, attempt, err)
			if follow {
				err = c.holderError(volumeID, addr, err)
			}
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", wire.MethodWrite, ctx.Err(), datapath.FromStatus(err))
		case <-t.C:
		}
		backoff = min(backoff*2, c.opts.maxBackoff)
	}
}

// writeGRPCOnce is one attempt of writeGRPC: the write goes out under the
// session's generation, opened first if none is. It returns gRPC's error as
// it is. gRPC sends p without copying it; when a call fails (a timeout, a lost
// connection) the transport may still be reading p after Invoke returns, so
// it waits until the transport lets go: the caller may reuse p at once, and a
// failed write can never carry bytes the caller wrote into p afterwards.
func (c *Client) writeGRPCOnce(ctx context.Context, addr string, w ioWrite) error {
	volumeID, node, epoch := w.vol, w.node, w.epoch
	conn, err := c.connAt(addr)
	if err != nil {
		return err
	}
	gen, err := c.sessions.gen(ctx, w.key(), epoch, func(ctx context.Context, volumeID, node string, epoch uint64) (uint64, error) {
		return openSessionGRPC(ctx, conn, addr, volumeID, node, epoch)
	})
	if err != nil {
		return err
	}
	req := &wire.WriteRequest{IOTarget: wire.IOTarget{VolumeID: volumeID, Node: node, Epoch: epoch}, Gen: gen, Offset: w.off, Data: w.p, MemberEpoch: w.member}
	var callOpts []grpc.CallOption
	var header metadata.MD
	if datapath.WantsBoot(ctx) {
		callOpts = []grpc.CallOption{grpc.Header(&header)}
	}
	err = conn.Invoke(ctx, wire.FullMethod(wire.MethodWrite), req, &wire.Empty{}, callOpts...)
	if !req.WaitReleased(c.opts.timeout) && err == nil {
		err = fmt.Errorf("write volume %s: the transport did not release the buffer within %s", volumeID, c.opts.timeout)
	}
	if err == nil {
		if callOpts != nil {
			recordBoot(ctx, header)
		}
		return nil
	}
	var re *datapath.RemoteError
	if rerr := datapath.FromStatus(err); errors.Is(rerr, datapath.ErrStaleSession) || !errors.As(rerr, &re) || re.Sentinel == nil {
		// Refused as stale, or not the server's word (no answer, a lost
		// connection): the write may still arrive, and must not land after
		// the writes that follow.
		c.sessions.end(w.key(), epoch, gen)
	}
	return err
}

// openSessionGRPC opens a new write session generation for (volumeID, node,
// epoch) over gRPC on conn, the server at addr, in one attempt (writeGRPC
// retries).
func openSessionGRPC(ctx context.Context, conn *grpc.ClientConn, addr, volumeID, node string, epoch uint64) (uint64, error) {
	var resp wire.Generation
	err := conn.Invoke(ctx, wire.FullMethod(wire.MethodOpenWriteSession),
		&wire.OpenSessionRequest{IOTarget: wire.IOTarget{VolumeID: volumeID, Node: node, Epoch: epoch}}, &resp)
	if err == nil && resp.Gen == 0 {
		err = status.Errorf(codes.Unavailable, "datapath %s opened a write session without a generation", addr)
	}
	return resp.Gen, err
}
