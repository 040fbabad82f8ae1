package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
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

// BenchmarkWrite_Sequential1MiB writes 1 MiB blocks at sequential offsets
// through the client over loopback and the same writes into a local file in the
// same directory, alternating in rounds of 32 so that load from other processes
// hits both alike, and reports both throughputs and their ratio (target ≥ 0.5).
// qd is how many of the sequential writes the client keeps in flight (1: each
// write waits for the previous one; 4: a writer with a queue depth of 4, as a
// block device keeps); the local file is always written synchronously, one
// write at a time.
//
// The ",tls" runs do the same over TLS (the server's certificate from a
// throwaway CA, ECDSA P-256, verified by the client; TLS 1.3 with
// AES-128-GCM where both ends have AES instructions): the bulk channel then
// reads each payload through TLS into a buffer instead of splicing it.
//
// The server runs in this process unless VIGIL_BENCH_SERVER_CPUS says where
// to pin a server process of its own (bench_split_test.go); client-cpu-us/MiB
// then counts both processes.
func BenchmarkWrite_Sequential1MiB(b *testing.B) {
	for _, tls := range []bool{false, true} {
		for _, qd := range []int{1, 4} {
			name := fmt.Sprintf("qd=%d", qd)
			if tls {
				name += ",tls"
			}
			b.Run(name, func(b *testing.B) { benchSequential(b, qd, tls) })
		}
	}
}

func benchSequential(b *testing.B, qd int, tls bool) {
	tgt := startBenchTarget(b, tls)
	c := tgt.node
	id, e := benchVolume(b, tgt.ctrl)
	ctx := context.Background()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	const blocks = benchVolumeSize >> 20
	local, err := os.OpenFile(filepath.Join(tgt.dir, "local.img"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	remoteWrite := func(from, to int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for w := 0; w < qd; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if err := c.WriteAt(ctx, id, "n1", e, int64(i%blocks)<<20, buf); err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for i := from; i < to; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	localWrite := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := local.WriteAt(buf, int64(i%blocks)<<20); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Warm up: connection and flow-control windows, file blocks allocated.
	remoteWrite(0, blocks)
	localWrite(0, blocks)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	var remote, localDur time.Duration
	var rcpu, lcpu time.Duration
	for i := 0; i < b.N; i += 32 {
		to := min(i+32, b.N)
		c0 := tgt.cpu()
		start := time.Now()
		remoteWrite(i, to)
		mid := time.Now()
		c1, l0 := tgt.cpu(), processCPU()
		localWrite(i, to)
		remote += mid.Sub(start)
		localDur += time.Since(mid)
		rcpu += c1 - c0
		lcpu += processCPU() - l0
	}
	// CPU time of the whole process (client and server) per MiB: it shows what
	// the transport costs on top of the file write.
	b.ReportMetric(float64(rcpu.Microseconds())/float64(b.N), "client-cpu-us/MiB")
	b.ReportMetric(float64(lcpu.Microseconds())/float64(b.N), "localfile-cpu-us/MiB")
	mib := float64(b.N)
	b.ReportMetric(mib/remote.Seconds(), "client-MiB/s")
	b.ReportMetric(mib/localDur.Seconds(), "localfile-MiB/s")
	b.ReportMetric(localDur.Seconds()/remote.Seconds(), "ratio")
}

// processCPU returns the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWrite_Random4KiB reports 4 KiB random-write IOPS through the client
// over loopback, without flush and with a flush after every write, without
// flush over gRPC (WithBulk(false)), whose writes are ordered by the same
// write sessions as the bulk channel's, and without flush over TLS.
func BenchmarkWrite_Random4KiB(b *testing.B) {
	for _, v := range []struct {
		name             string
		flush, grpc, tls bool
	}{{"noflush", false, false, false}, {"flush", true, false, false}, {"noflush,grpc", false, true, false}, {"noflush,tls", false, false, true}} {
		flush := v.flush
		b.Run(v.name, func(b *testing.B) {
			srv := datapathtest.StartWith(b, datapathtest.Config{TLS: v.tls})
			opts := []client.Option{client.WithBulk(!v.grpc)}
			if v.tls {
				opts = append(opts, client.WithCAFile(srv.CAFile))
			}
			c := dial(b, srv, opts...)
			id, e := benchVolume(b, c)
			ctx := context.Background()
			buf := make([]byte, 4096)
			rng := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(4096)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				off := rng.Int64N(benchVolumeSize/4096) * 4096
				if err := c.WriteAt(ctx, id, "n1", e, off, buf); err != nil {
					b.Fatal(err)
				}
				if flush {
					if err := c.Flush(ctx, id, "n1", e); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
		})
	}
}

// BenchmarkFence_UnderWrites measures Fence latency through the client while
// four other nodes keep writing 64 KiB blocks to the same (RWX) volume, so every
// fence has to wait for the writes in flight. The writers share one connection
// and the fencer has its own, as engine-nodes and the manager do. Reports p50
// and p99 (target p99 ≤ 10 ms). control=bbolt is the store keeping its
// control state in datapath.db (the release before the group); control=raft
// is `vigil-datapath serve` today, a one-member Raft group; control=raft3
// three servers in one group over loopback TCP, the leader holding the
// volume's data; control=raft3,holder=follower the same once the leadership
// moved to another server, so each fence is the leader's commit and then
// the holder's confirmation that it applied it (WaitApplied).
func BenchmarkFence_UnderWrites(b *testing.B) {
	one := func(srv *datapathtest.Server) (*datapathtest.Server, []client.Option, func()) { return srv, nil, nil }
	for _, tc := range []struct {
		name  string
		start func(b *testing.B) (*datapathtest.Server, []client.Option, func())
	}{
		{"control=bbolt", func(b *testing.B) (*datapathtest.Server, []client.Option, func()) {
			return one(datapathtest.Start(b, datapath.Options{}))
		}},
		{"control=raft", func(b *testing.B) (*datapathtest.Server, []client.Option, func()) {
			return one(datapathtest.StartWith(b, datapathtest.Config{Control: true}))
		}},
		{"control=raft3", func(b *testing.B) (*datapathtest.Server, []client.Option, func()) {
			return one(datapathtest.StartGroupTimed(b, 3, raftstate.DefaultTiming)[0])
		}},
		{"control=raft3,holder=follower", func(b *testing.B) (*datapathtest.Server, []client.Option, func()) {
			srvs := datapathtest.StartGroupTimed(b, 3, raftstate.DefaultTiming)
			return srvs[0], []client.Option{client.WithServers(srvs[1].Addr, srvs[2].Addr)}, func() { moveLeaderTo(b, srvs, 1) }
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv, opts, afterCreate := tc.start(b)
			benchFenceUnderWrites(b, srv, opts, afterCreate)
		})
	}
}

// benchFenceUnderWrites measures fences of a volume on srv, the writers and
// the fencer dialing srv with opts; afterCreate runs once the volume is
// created.
func benchFenceUnderWrites(b *testing.B, srv *datapathtest.Server, opts []client.Option, afterCreate func()) {
	c := dial(b, srv, opts...)
	fencer := dial(b, srv, opts...)
	ctx := context.Background()
	v, err := c.CreateVolume(ctx, "fence-bench", benchVolumeSize, datapath.AccessRWX)
	if err != nil {
		b.Fatal(err)
	}
	if afterCreate != nil {
		afterCreate()
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var writes atomic.Int64
	for w := 0; w < 4; w++ {
		node := "writer-" + string(rune('a'+w))
		e, err := c.Grant(ctx, v.ID, node)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for i := 0; !stop.Load(); i++ {
				off := int64((w*1024+i%1024)*len(buf)) % benchVolumeSize
				if err := c.WriteAt(ctx, v.ID, node, e, off, buf); err != nil {
					b.Error(err)
					return
				}
				writes.Add(1)
			}
		}(w)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := fencer.Grant(ctx, v.ID, "victim"); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := fencer.Fence(ctx, v.ID, "victim"); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/fence")
}

// BenchmarkFence_NodeWith32Volumes fences one node from 32 volumes at once, as
// the controller does when a node holding many volumes dies, and reports how
// long the last fence took to return.
func BenchmarkFence_NodeWith32Volumes(b *testing.B) {
	srv := datapathtest.Start(b, datapath.Options{})
	c := dial(b, srv)
	ctx := context.Background()
	ids := make([]string, 32)
	for i := range ids {
		v, err := c.CreateVolume(ctx, fmt.Sprintf("pvc-%d", i), 1<<20, datapath.AccessRWO)
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = v.ID
	}
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, id := range ids {
			if _, err := c.Grant(ctx, id, "dying"); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Fence(ctx, id, "dying"); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms-all-32-fenced")
}
