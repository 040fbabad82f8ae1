package client_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// BenchmarkWrite_ThroughAGroup compares writes through the client against
// one server (a one-member group, as `vigil-datapath serve` runs alone)
// with the same writes against three servers in one group over loopback,
// the engine's client dialed to a server that does not hold the volume
// (servers=3): its first write is refused there and follows to the holder,
// and the rest go straight to the holder. seq1MiB writes 1 MiB blocks at
// sequential offsets, one at a time; rand4KiB writes 4 KiB at random
// offsets without a flush (IOPS). Compare with benchstat:
//
//	go test -run '^$' -bench 'Write_ThroughAGroup' -count 6 ./datapath/client/ | tee out.txt
//	benchstat -col /servers out.txt
func BenchmarkWrite_ThroughAGroup(b *testing.B) {
	for _, load := range []string{"seq1MiB", "rand4KiB"} {
		for _, n := range []int{1, 3} {
			b.Run("load="+load+"/servers="+string(rune('0'+n)), func(b *testing.B) { benchThroughGroup(b, load, n) })
		}
	}
}

func benchThroughGroup(b *testing.B, load string, n int) {
	srvs := datapathtest.StartGroupTimed(b, n, raftstate.DefaultTiming)
	ctx := context.Background()
	var others []string
	for _, s := range srvs {
		others = append(others, s.Addr)
	}
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(others[1:]...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ctl.Close() })
	id, e := benchVolume(b, ctl) // on the leader, srvs[0]
	at := srvs[n-1]              // servers=3: not the holder
	waitApplied(b, at, id)
	var rest []string
	for _, s := range srvs {
		if s != at {
			rest = append(rest, s.Addr)
		}
	}
	c, err := client.Dial(ctx, at.Addr, at.NodeToken("n1"), client.WithServers(rest...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	size := 4096
	if load == "seq1MiB" {
		size = 1 << 20
	}
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	offset := func(i int) int64 {
		if load == "seq1MiB" {
			return int64(i%(benchVolumeSize>>20)) << 20
		}
		return rng.Int64N(benchVolumeSize/4096) * 4096
	}
	// Warm up: the holder found, connections and windows open, blocks allocated.
	for i := 0; i < 64; i++ {
		if err := c.WriteAt(ctx, id, "n1", e, offset(i), buf); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := c.WriteAt(ctx, id, "n1", e, offset(i), buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
}
