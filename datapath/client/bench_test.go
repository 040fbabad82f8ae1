package client_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

const benchVolumeSize = 256 << 20

func benchVolume(b *testing.B, c interface {
	CreateVolume(context.Context, string, int64, datapath.AccessMode) (datapath.Volume, error)
	Grant(context.Context, string, string) (uint64, error)
}) (string, uint64) {
	b.Helper()
	v, err := c.CreateVolume(context.Background(), "bench", benchVolumeSize, datapath.AccessRWO)
	if err != nil {
		b.Fatal(err)
	}
	e, err := c.Grant(context.Background(), v.ID, "n1")
	if err != nil {
		b.Fatal(err)
	}
	return v.ID, e
}

// BenchmarkWrite_Sequential1MiB writes 1 MiB blocks sequentially through the
// client over loopback, then the same writes into a local file in the same
// directory, and reports both throughputs and their ratio (target ≥ 0.5).
func BenchmarkWrite_Sequential1MiB(b *testing.B) {
	srv := datapathtest.Start(b, datapath.Options{})
	c := dial(b, srv)
	id, e := benchVolume(b, c)
	ctx := context.Background()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	const blocks = benchVolumeSize >> 20
	// Warm up both paths (connection, window growth, file blocks allocated).
	local, err := os.OpenFile(filepath.Join(srv.Dir, "local.img"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	for i := 0; i < blocks; i++ {
		if err := c.WriteAt(ctx, id, "n1", e, int64(i)<<20, buf); err != nil {
			b.Fatal(err)
		}
		if _, err := local.WriteAt(buf, int64(i)<<20); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(1 << 20)
	b.ResetTimer()
	// Interleave the two so that load from other processes hits both alike.
	var remote, localDur time.Duration
	for i := 0; i < b.N; i++ {
		off := int64(i%blocks) << 20
		start := time.Now()
		if err := c.WriteAt(ctx, id, "n1", e, off, buf); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if _, err := local.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
		remote += mid.Sub(start)
		localDur += time.Since(mid)
	}
	mb := float64(b.N)
	b.ReportMetric(mb/remote.Seconds(), "client-MiB/s")
	b.ReportMetric(mb/localDur.Seconds(), "localfile-MiB/s")
	b.ReportMetric(localDur.Seconds()/remote.Seconds(), "ratio")
}
