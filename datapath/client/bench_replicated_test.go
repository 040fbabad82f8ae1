package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// BenchmarkWrite_Replicated compares the engine's writes to a volume of
// three copies (each write to every replica, acknowledged by the ack rule)
// with the same writes to a volume of one copy, on the same three servers
// in one group over loopback: seq1MiB writes 1 MiB blocks at sequential
// offsets one at a time; rand4KiB writes 4 KiB at random offsets one at a
// time; rand4KiB,qd16 the same with 16 writes in flight. Compare with
// benchstat:
//
//	go test -run '^$' -bench 'Write_Replicated' -count 6 ./datapath/client/ | tee out.txt
//	benchstat -col /replicas out.txt
func BenchmarkWrite_Replicated(b *testing.B) {
	for _, load := range []string{"seq1MiB", "rand4KiB", "rand4KiB,qd16"} {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("load=%s/replicas=%d", load, n), func(b *testing.B) { benchReplicated(b, load, n) })
		}
	}
}

func benchReplicated(b *testing.B, load string, n int) {
	ctx := context.Background()
	const size = 64 << 20
	r := startReplicas(b, ctx, datapathtest.StartGroupTimed(b, 3, raftstate.DefaultTiming), fmt.Sprintf("pvc-bench-%d", n), size, n)
	c := r.engine(b, ctx)
	block, depth := 4096, 1
	switch load {
	case "seq1MiB":
		block = 1 << 20
	case "rand4KiB,qd16":
		depth = 16
	}
	b.SetBytes(int64(block))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for q := range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, block)
			rng := rand.New(rand.NewPCG(uint64(q), 2))
			for i := q; i < b.N; i += depth {
				off := int64(i) * int64(block) % size
				if block == 4096 {
					off = rng.Int64N(size/4096) * 4096
				}
				if err := c.WriteAt(ctx, r.vol, "n1", r.epoch, off, buf); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
}
