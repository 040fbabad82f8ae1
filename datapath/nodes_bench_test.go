package datapath

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// BenchmarkStore_FenceNode_50Nodes fences 50 nodes with 40 volumes each
// (2,000 fences, one FenceNode per node, all at once) in the store, on the
// test's disk, and reports how many bbolt transactions (one fsync each) the
// group commit needed: the fences of one round share a handful.
func BenchmarkStore_FenceNode_50Nodes(b *testing.B) {
	const nodes, perNode = 50, 40
	s := openTest(b, b.TempDir())
	vols := make([][]string, nodes)
	for n := range nodes {
		for i := range perNode {
			v := mustCreate(b, s, fmt.Sprintf("pvc-%02d-%02d", n, i), 4096, AccessRWO)
			vols[n] = append(vols[n], v.ID)
		}
	}
	node := func(n int) string { return fmt.Sprintf("node-%02d", n) }
	var total time.Duration
	var txs int64
	for b.Loop() {
		b.StopTimer()
		var wg sync.WaitGroup
		for n := range nodes {
			for _, id := range vols[n] {
				wg.Add(1)
				go func() { defer wg.Done(); mustGrant(b, s, id, node(n)) }()
			}
		}
		wg.Wait()
		before := s.commits.txs.Load()
		b.StartTimer()
		start := time.Now()
		for n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if fs, err := s.FenceNode(node(n)); err != nil || len(fs) != perNode {
					b.Errorf("FenceNode = %d, %v", len(fs), err)
				}
			}()
		}
		wg.Wait()
		total += time.Since(start)
		txs += s.commits.txs.Load() - before
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/round")
	b.ReportMetric(float64(txs)/float64(b.N), "commits/round")
}
