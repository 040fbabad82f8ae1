package enginenode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

const benchVolumeSize = 2 << 30

// BenchmarkSequentialWrite compares, in one run against one real datapath
// server, 1 MiB sequential writes (queue depth 1, one flush at the end) made
//   - client: directly with the datapath client, and
//   - filesystem: by an application through the staged ext4 filesystem
//     (page cache, ext4, loop device, FUSE, client), fsync at the end.
//
// The ratio filesystem/client of the MB/s figures is the cost of the stack.
func BenchmarkSequentialWrite(b *testing.B) {
	requireRealStack(b)
	c := startRealDatapath(b)
	ctx := context.Background()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	b.Run("client", func(b *testing.B) {
		vol, err := c.CreateVolume(ctx, "bench-client", benchVolumeSize, datapath.AccessRWO)
		if err != nil {
			b.Fatal(err)
		}
		epoch, err := c.Grant(ctx, vol.ID, "bench-node")
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(chunk)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			off := int64(i%(benchVolumeSize/len(chunk)-1)) * int64(len(chunk))
			if err := c.WriteAt(ctx, vol.ID, "bench-node", epoch, off, chunk); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.Flush(ctx, vol.ID, "bench-node", epoch); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("filesystem", func(b *testing.B) {
		vol, err := c.CreateVolume(ctx, "bench-fs", benchVolumeSize, datapath.AccessRWO)
		if err != nil {
			b.Fatal(err)
		}
		epoch, err := c.Grant(ctx, vol.ID, "bench-node")
		if err != nil {
			b.Fatal(err)
		}
		n := newTestServer(b, c, "bench-node")
		staging := b.TempDir()
		if _, err := n.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(filepath.Join(staging, "data"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		b.SetBytes(int64(len(chunk)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			off := int64(i%(benchVolumeSize/2/len(chunk))) * int64(len(chunk))
			if _, err := f.WriteAt(chunk, off); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkStagePublish measures, against a real datapath server,
//   - fresh: NodeStageVolume and NodePublishVolume of an already formatted
//     volume (and the first stage, with mkfs.ext4, once), and
//   - after-fence: NodeStageVolume of a volume still staged here with the
//     epoch of a fresh grant after a fence of this node, which tears the old
//     stack down and builds a new one.
func BenchmarkStagePublish(b *testing.B) {
	requireRealStack(b)
	c := startRealDatapath(b)
	b.Run("fresh", func(b *testing.B) { benchFreshStage(b, c) })
	b.Run("after-fence", func(b *testing.B) { benchRestageAfterFence(b, c) })
}

func benchFreshStage(b *testing.B, c *datapathtest.Roles) {
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, "bench-stage", 1<<30, datapath.AccessRWO)
	if err != nil {
		b.Fatal(err)
	}
	epoch, err := c.Grant(ctx, vol.ID, "bench-node")
	if err != nil {
		b.Fatal(err)
	}
	n := newTestServer(b, c, "bench-node")
	staging, target := b.TempDir(), filepath.Join(b.TempDir(), "m")
	start := time.Now()
	if _, err := n.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
		b.Fatal(err)
	}
	firstStage := time.Since(start)
	if _, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol.ID, StagingTargetPath: staging}); err != nil {
		b.Fatal(err)
	}
	var stage, publish time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := n.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := n.NodePublishVolume(ctx, publishReq(vol.ID, staging, target, mountCap())); err != nil {
			b.Fatal(err)
		}
		stage += t1.Sub(t0)
		publish += time.Since(t1)
		if _, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol.ID, TargetPath: target}); err != nil {
			b.Fatal(err)
		}
		if _, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol.ID, StagingTargetPath: staging}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(stage.Microseconds())/float64(b.N)/1000, "stage-ms")
	b.ReportMetric(float64(publish.Microseconds())/float64(b.N)/1000, "publish-ms")
	b.ReportMetric(float64(firstStage.Microseconds())/1000, "first-stage-mkfs-ms")
}

// benchRestageAfterFence times only the stage that follows fence + grant; the
// volume stays staged between iterations, as on a node whose kubelet asks
// again after the manager fenced and re-granted it.
func benchRestageAfterFence(b *testing.B, c *datapathtest.Roles) {
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, "bench-refence", 1<<30, datapath.AccessRWO)
	if err != nil {
		b.Fatal(err)
	}
	epoch, err := c.Grant(ctx, vol.ID, "bench-node")
	if err != nil {
		b.Fatal(err)
	}
	n := newTestServer(b, c, "bench-node")
	staging := b.TempDir()
	if _, err := n.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
		b.Fatal(err)
	}
	var stage time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if _, err := c.Fence(ctx, vol.ID, "bench-node"); err != nil {
			b.Fatal(err)
		}
		if epoch, err = c.Grant(ctx, vol.ID, "bench-node"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		if _, err := n.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
			b.Fatal(err)
		}
		stage += time.Since(t0)
	}
	b.ReportMetric(float64(stage.Microseconds())/float64(b.N)/1000, "stage-ms")
}

// BenchmarkVolumeBackend_Write measures what keeping the acknowledged,
// unflushed writes (for a replay after a power cut of the datapath's machine)
// costs the volume backend's writes, against a real datapath server that
// reports a boot id: 1 MiB sequential and 4 KiB random writes at queue depth
// 1 and 8, with the writes kept (the default 64 MiB budget, flushed when
// full) and not kept. "kept-MiB" is the memory the kept writes hold at the end.
func BenchmarkVolumeBackend_Write(b *testing.B) {
	c := startRealDatapath(b)
	ctx := context.Background()
	for _, size := range []int{1 << 20, 4 << 10} {
		for _, qd := range []int{1, 8} {
			for _, keep := range []bool{false, true} {
				name := fmt.Sprintf("%dKiB/qd%d/none", size>>10, qd)
				if keep {
					name = fmt.Sprintf("%dKiB/qd%d/kept", size>>10, qd)
				}
				b.Run(name, func(b *testing.B) {
					vol, err := c.CreateVolume(ctx, "bench-"+strings.ReplaceAll(name, "/", "-"), 1<<30, datapath.AccessRWO)
					if err != nil {
						b.Fatal(err)
					}
					epoch, err := c.Grant(ctx, vol.ID, "bench-node")
					if err != nil {
						b.Fatal(err)
					}
					be := newVolumeBackend(c, vol.ID, "bench-node", epoch, 30*time.Second, NewMetrics(nil))
					if keep {
						be.keepUnflushed(DefaultUnflushedBudget, nil)
					}
					benchBackendWrites(b, be, size, qd)
					if keep {
						held, _ := be.unfl.size()
						b.ReportMetric(float64(held)/(1<<20), "kept-MiB")
					}
				})
			}
		}
	}
}

func benchBackendWrites(b *testing.B, be *volumeBackend, size, qd int) {
	ctx := context.Background()
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(i * 7)
	}
	slots := (1 << 30) / size
	var next atomic.Int64
	b.SetBytes(int64(size))
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, qd)
	for range qd {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				slot := i
				if size < 1<<20 {
					slot = (i * 7919) // scattered 4 KiB writes
				}
				if err := be.WriteAt(ctx, (slot%int64(slots))*int64(size), p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}
