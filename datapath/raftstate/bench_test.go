package raftstate

import (
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// benchGroup opens three servers with the production timing: over
// raft.InmemTransport with the log in memory, or over TCP on loopback with
// the log in bbolt (fsync on every commit); it returns the leader.
func benchGroup(b *testing.B, tcp bool) *Group {
	var (
		groups []*Group
		peers  []Server
		trans  []*raft.InmemTransport
	)
	for i := 0; i < 3; i++ {
		cfg := Config{ID: fmt.Sprintf("s%d", i+1), Dir: b.TempDir(), LogOutput: io.Discard, inMemory: !tcp}
		if tcp {
			cfg.Address = "127.0.0.1:0"
		} else {
			_, tr := raft.NewInmemTransport(addrOf(i))
			cfg.Transport = tr
			trans = append(trans, tr)
		}
		g, err := Open(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = g.Close() })
		groups = append(groups, g)
		peers = append(peers, Server{ID: cfg.ID, RaftAddress: g.Address()})
	}
	for i := range trans {
		for j := range trans {
			if i != j {
				trans[i].Connect(addrOf(j), trans[j])
			}
		}
	}
	for _, g := range groups {
		if err := g.Bootstrap(peers); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, g := range groups {
			if g.IsLeader() {
				for _, p := range peers {
					if err := g.AddServer(bg, p); err != nil {
						b.Fatal(err)
					}
				}
				return g
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatal("no leader within 10 s")
	return nil
}

// benchFence measures one fence at a time, each returning once committed
// by a majority and applied at the leader, and reports p50 and p99.
func benchFence(b *testing.B, tcp bool) {
	g := benchGroup(b, tcp)
	v, err := g.CreateVolume(bg, "pv-1", 1<<20, datapath.AccessRWO, "s1")
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := g.Fence(bg, v.ID, "n1"); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkGroup_Fence: go test -run '^$' -bench 'Group_Fence$' -benchtime 2000x ./datapath/raftstate/
func BenchmarkGroup_Fence(b *testing.B) {
	b.Run("inmem", func(b *testing.B) { benchFence(b, false) })
	b.Run("tcp-bbolt", func(b *testing.B) { benchFence(b, true) })
}

// parallel runs fn(i) for i < n, width at a time, and returns the first
// error.
func parallel(n, width int, fn func(i int) error) error {
	errs := make(chan error, n)
	sem := make(chan struct{}, width)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		go func(i int) { defer func() { <-sem }(); errs <- fn(i) }(i)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkGroup_FenceNode_50Nodes fences a rack: 50 nodes with 40 live
// grants each (2,000 volumes), one FenceNode per node, all at once, over TCP
// with the log in bbolt; it reports the time until all 50 returned.
//
//	go test -run '^$' -bench Group_FenceNode -benchtime 3x ./datapath/raftstate/
func BenchmarkGroup_FenceNode_50Nodes(b *testing.B) {
	const nodes, perNode = 50, 40
	g := benchGroup(b, true)
	ids := make([]string, nodes*perNode)
	err := parallel(len(ids), 64, func(i int) error {
		v, err := g.CreateVolume(bg, fmt.Sprintf("pv-%d", i), 1<<20, datapath.AccessRWO, "s1")
		ids[i] = v.ID
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	var worst time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		err := parallel(len(ids), 64, func(i int) error {
			_, err := g.Grant(bg, ids[i], fmt.Sprintf("node-%d", i/perNode), datapath.UseReadWrite)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		fenced := make([]int, nodes)
		err = parallel(nodes, nodes, func(i int) error {
			f, err := g.FenceNode(bg, fmt.Sprintf("node-%d", i))
			fenced[i] = len(f)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		worst = max(worst, time.Since(start))
		for i, c := range fenced {
			if c != perNode {
				b.Fatalf("node-%d: %d volumes fenced, want %d", i, c, perNode)
			}
		}
	}
	b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
}
