package enginenode

import (
	"context"
	"errors"
	"fmt"
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
type volumeBackend struct {
	dp       Datapath
	volumeID string
	node     string
	epoch    uint64
	timeout  time.Duration // per request; an unreachable datapath becomes EIO
	metrics  *Metrics
}

func newVolumeBackend(dp Datapath, volumeID, node string, epoch uint64, timeout time.Duration, m *Metrics) *volumeBackend {
	return &volumeBackend{dp: dp, volumeID: volumeID, node: node, epoch: epoch, timeout: timeout, metrics: m}
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
	p, err := b.dp.ReadAt(ctx, b.volumeID, b.node, b.epoch, off, n)
	if err != nil {
		return nil, fmt.Errorf("read volume %s at %d: %w", b.volumeID, off, err)
	}
	return p, nil
}

func (b *volumeBackend) WriteAt(parent context.Context, off int64, p []byte) error {
	ctx, cancel := b.ctx(parent)
	defer cancel()
	if err := b.dp.WriteAt(ctx, b.volumeID, b.node, b.epoch, off, p); err != nil {
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
	if err := b.dp.Flush(ctx, b.volumeID, b.node, b.epoch); err != nil {
		if errors.Is(err, datapath.ErrFenced) {
			b.metrics.writesFenced.Inc()
		}
		return fmt.Errorf("flush volume %s: %w", b.volumeID, err)
	}
	return nil
}
