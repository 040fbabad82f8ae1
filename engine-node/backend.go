package enginenode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// Datapath is what the engine calls on the datapath: block I/O under (node,
// epoch) and a volume's size; *datapath/client.Client satisfies it. Errors
// satisfy errors.Is against the datapath sentinels (ErrFenced, ErrNotFound).
type Datapath interface {
	ReadAt(ctx context.Context, volumeID, node string, epoch uint64, off int64, n int) ([]byte, error)
	WriteAt(ctx context.Context, volumeID, node string, epoch uint64, off int64, p []byte) error
	Flush(ctx context.Context, volumeID, node string, epoch uint64) error
	GetVolume(ctx context.Context, id string) (datapath.Volume, error)
}

// volumeBackend is the fusedisk.Backend of one staged volume: it binds the
// Datapath to the volume, this node and the epoch of the grant the stack was
// built for. The epoch never changes: a stage with a higher epoch takes the
// whole stack down and builds a new one (NodeServer.retire), so no page cached
// under an old grant is ever written under a new one.
//
// It keeps what the datapath acknowledged and no flush covered yet (unfl, see
// replay.go), so that a flush never acknowledges writes the datapath's machine
// lost in a power cut: they are sent again first.
type volumeBackend struct {
	dp       Datapath
	volumeID string
	node     string
	epoch    uint64
	timeout  time.Duration // per request; an unreachable datapath becomes EIO
	metrics  *Metrics
	log      *slog.Logger

	// io is held for reading by every request, from its first attempt until
	// its answer is recorded in unfl, and for writing by a replay, which so
	// waits for the requests in flight and holds the next ones back.
	io         sync.RWMutex
	unfl       *unflushed  // nil: nothing kept (no replay)
	budget     int64       // past it, a write flushes the volume first
	nodeBudget *nodeBudget // the node's budget over every volume; nil: none
	flushMu    sync.Mutex  // one budget flush at a time
	noBoot     atomic.Bool
}

func newVolumeBackend(dp Datapath, volumeID, node string, epoch uint64, timeout time.Duration, m *Metrics) *volumeBackend {
	return &volumeBackend{dp: dp, volumeID: volumeID, node: node, epoch: epoch, timeout: timeout, metrics: m, log: slog.Default()}
}

// newBackend is the backend of a stack for rec, with the node's budget of
// unflushed writes.
func (n *NodeServer) newBackend(rec StageRecord) *volumeBackend {
	b := newVolumeBackend(n.cfg.Datapath, rec.VolumeID, n.cfg.NodeName, rec.Epoch, n.cfg.IOTimeout, n.metrics)
	b.log = n.log
	if n.cfg.UnflushedBudget > 0 {
		b.keepUnflushed(n.cfg.UnflushedBudget, &n.unflushed)
	}
	return b
}

// nodeBudget is the bytes of acknowledged, unflushed writes the volumes of a
// node may keep together, and what they keep.
type nodeBudget struct {
	limit int64
	held  atomic.Int64
}

// keepUnflushed makes b keep up to budget bytes of acknowledged, unflushed
// writes to send again after a datapath reboot, and, with node, within the
// node's budget too.
func (b *volumeBackend) keepUnflushed(budget int64, node *nodeBudget) *volumeBackend {
	var held *atomic.Int64
	if node != nil {
		held = &node.held
	}
	b.unfl, b.budget, b.nodeBudget = newUnflushed(held), budget, node
	return b
}

// discardKept drops the writes b keeps, once its stack is gone.
func (b *volumeBackend) discardKept() {
	if b.unfl != nil {
		b.unfl.discard()
	}
}

func (b *volumeBackend) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	// FUSE requests from the loop device are never interrupted; bound them.
	if b.timeout <= 0 {
		return context.WithCancel(context.WithoutCancel(parent))
	}
	return context.WithTimeout(context.WithoutCancel(parent), b.timeout)
}

func (b *volumeBackend) ReadAt(parent context.Context, off int64, n int) ([]byte, error) {
	ctx, cancel := b.ctx(parent)
	defer cancel()
	for {
		var p []byte
		boot, err := b.call(ctx, func(ctx context.Context) (err error) {
			p, err = b.dp.ReadAt(ctx, b.volumeID, b.node, b.epoch, off, n)
			return err
		}, nil)
		if err != nil {
			return nil, fmt.Errorf("read volume %s at %d: %w", b.volumeID, off, err)
		}
		if boot == "" {
			return p, nil
		}
		// A rebooted machine answered: it may have lost writes of this range
		// that are still kept here. Send them again and read again.
		if err := b.replay(ctx, boot); err != nil {
			return nil, fmt.Errorf("read volume %s at %d: %w", b.volumeID, off, err)
		}
	}
}

func (b *volumeBackend) WriteAt(parent context.Context, off int64, p []byte) error {
	ctx, cancel := b.ctx(parent)
	defer cancel()
	boot, err := b.call(ctx, func(ctx context.Context) error { return b.dp.WriteAt(ctx, b.volumeID, b.node, b.epoch, off, p) },
		func(boot string) { b.unfl.add(off, p, boot) })
	if err == nil && boot != "" {
		err = b.replay(ctx, boot)
	}
	if err == nil {
		err = b.keepWithinBudget(ctx)
	}
	if err != nil {
		if errors.Is(err, datapath.ErrFenced) {
			b.metrics.writesFenced.Inc()
		}
		return fmt.Errorf("write volume %s at %d: %w", b.volumeID, off, err)
	}
	return nil
}

func (b *volumeBackend) Flush(parent context.Context) error {
	ctx, cancel := b.ctx(parent)
	defer cancel()
	if err := b.flush(ctx); err != nil {
		if errors.Is(err, datapath.ErrFenced) {
			b.metrics.writesFenced.Inc()
		}
		return fmt.Errorf("flush volume %s: %w", b.volumeID, err)
	}
	return nil
}

// Backoff between attempts of a request the datapath did not answer.
const (
	retryMinBackoff = 100 * time.Millisecond
	retryMaxBackoff = 2 * time.Second
)

// retry runs op until the datapath answers it or ctx (the request's
// --io-timeout) ends. A datapath that restarts, or a connection lost, must not
// fail the kernel's I/O at once: ext4 takes an EIO on its journal as fatal, and
// every writer of the volume would fail with it although the datapath was back
// a second later. The datapath's own word (fenced, not found, refused, out of
// range) ends the request at once; block reads, writes and flushes under one
// grant are idempotent, so sending one again is safe, and a fence in between is
// answered with ErrFenced. Idempotent is not enough for a write, which must
// also never land after a newer one: the first copy of a write sent again may
// still be on its way. The client orders them (datapath/client: a write left
// unanswered makes the next write of the volume open a new write session
// generation, and the server refuses the late copy with ErrStaleSession), so
// the retry here needs nothing more; a stale refusal wrote nothing and is
// sent again like a lost answer.
func (b *volumeBackend) retry(ctx context.Context, op func(context.Context) error) error {
	backoff := retryMinBackoff
	for {
		err := op(ctx)
		if err == nil || !transient(err) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		b.metrics.ioRetries.Inc()
		backoff = min(backoff*2, retryMaxBackoff)
	}
}

// definitiveErrors are the datapath's answers that sending the request again
// cannot change.
var definitiveErrors = []error{datapath.ErrFenced, datapath.ErrNotFound, datapath.ErrOutOfRange,
	datapath.ErrInvalidArgument, datapath.ErrUnauthenticated, datapath.ErrPermissionDenied, datapath.ErrNoSpace,
	datapath.ErrAttachedElsewhere, datapath.ErrInUse, datapath.ErrAlreadyExists, datapath.ErrReadOnly,
	datapath.ErrVolumeFailed}

// transient reports whether a failed request may succeed if sent again: the
// datapath did not give its answer (unreachable, restarting, a connection
// lost, an attempt's timeout, its TokenReview briefly unavailable).
func transient(err error) bool {
	for _, d := range definitiveErrors {
		if errors.Is(err, d) {
			return false
		}
	}
	return !errors.Is(err, context.Canceled)
}
