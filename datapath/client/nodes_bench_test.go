package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// fenceFixture is a datapath server on the test's disk holding nodes×perNode
// small RWO volumes; node i is granted volumes [i*perNode, (i+1)*perNode).
type fenceFixture struct {
	srv   *datapathtest.Server
	nodes []string
	vols  [][]string // by node
}

func newFenceFixture(b *testing.B, nodes, perNode int) *fenceFixture {
	b.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &fenceFixture{srv: datapathtest.Start(b, datapath.Options{Logger: quiet})}
	for n := range nodes {
		node := fmt.Sprintf("node-%03d", n)
		f.nodes = append(f.nodes, node)
		var ids []string
		for i := range perNode {
			v, err := f.srv.Store.CreateVolume(fmt.Sprintf("pvc-%03d-%02d", n, i), 4096, datapath.AccessRWO)
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, v.ID)
		}
		f.vols = append(f.vols, ids)
	}
	return f
}

// grantAll gives every node its volumes again (after a fence), concurrently.
func (f *fenceFixture) grantAll(b *testing.B) {
	b.Helper()
	var wg sync.WaitGroup
	for n, node := range f.nodes {
		for _, id := range f.vols[n] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := f.srv.Store.Grant(id, node); err != nil {
					b.Error(err)
				}
			}()
		}
	}
	wg.Wait()
}

// BenchmarkClient_FenceNode measures fencing dead nodes through the client, as
// the manager does: a rack of 50 nodes with 40 volumes each (2,000 fences, one
// FenceNode call per node, all at once; target ≤ 1 s) and one such node alone.
// Every fence is durable (bbolt, fsync on the test's disk) when its call
// returns. Reported: ms per round, fences per second.
func BenchmarkClient_FenceNode(b *testing.B) {
	for _, nodes := range []int{1, 50} {
		b.Run(fmt.Sprintf("nodes=%d/volumes=%d", nodes, nodes*40), func(b *testing.B) {
			f := newFenceFixture(b, nodes, 40)
			c := dial(b, f.srv)
			ctx := context.Background()
			b.ResetTimer()
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				f.grantAll(b)
				b.StartTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for n, node := range f.nodes {
					wg.Add(1)
					go func() {
						defer wg.Done()
						fs, err := c.FenceNode(ctx, node)
						if err != nil || len(fs) != len(f.vols[n]) {
							b.Errorf("FenceNode(%s) = %d volumes, %v; want %d", node, len(fs), err, len(f.vols[n]))
						}
					}()
				}
				wg.Wait()
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/round")
			b.ReportMetric(float64(nodes*40*b.N)/total.Seconds(), "fences/s")
		})
	}
}

// BenchmarkClient_Nodes measures the connectivity report of 500 nodes (each
// heartbeating, each with 4 live grants, 50 of them leaving) through the
// client, as the manager's node-health loop reads it.
func BenchmarkClient_Nodes(b *testing.B) {
	f := newFenceFixture(b, 500, 4)
	f.grantAll(b)
	for n, node := range f.nodes {
		if err := f.srv.Store.Heartbeat(node); err != nil {
			b.Fatal(err)
		}
		if n%10 == 0 {
			if _, err := f.srv.Store.Leave(node, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
	}
	c := dial(b, f.srv)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		r, err := c.Nodes(ctx)
		if err != nil || len(r.Nodes) != 500 {
			b.Fatalf("Nodes = %d nodes, %v", len(r.Nodes), err)
		}
	}
}

// BenchmarkClient_NodeGrants measures one node's rows (40 volumes) on a server
// holding 2,000: it reads the node's volumes only.
func BenchmarkClient_NodeGrants(b *testing.B) {
	f := newFenceFixture(b, 50, 40)
	f.grantAll(b)
	c := dial(b, f.srv)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		gs, err := c.NodeGrants(ctx, f.nodes[7])
		if err != nil || len(gs) != 40 {
			b.Fatalf("NodeGrants = %d rows, %v", len(gs), err)
		}
	}
}

// BenchmarkClient_FenceNode_Group3 is BenchmarkClient_FenceNode's rack (50
// nodes with 40 volumes each, one FenceNode per node at once; target ≤ 1 s)
// on three servers in one control group over loopback TCP, the volumes'
// data spread evenly over the three: each FenceNode is one committed entry
// at the leader and a WaitApplied at each of the two other servers.
func BenchmarkClient_FenceNode_Group3(b *testing.B) {
	const nodes, perNode = 50, 40
	srvs := datapathtest.StartGroupTimed(b, 3, raftstate.DefaultTiming)
	c := dial(b, srvs[0], client.WithServers(srvs[1].Addr, srvs[2].Addr))
	ctx := context.Background()
	vols := make([][]string, nodes)
	for holder := range 3 {
		moveLeaderTo(b, srvs, holder)
		for n := holder; n < nodes; n += 3 {
			for i := range perNode {
				v, err := srvs[holder].Store.CreateVolume(fmt.Sprintf("pvc-%03d-%02d", n, i), 4096, datapath.AccessRWO)
				if err != nil {
					b.Fatal(err)
				}
				vols[n] = append(vols[n], v.ID)
			}
		}
	}
	moveLeaderTo(b, srvs, 0)
	grantAll := func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for n := range nodes {
			for _, id := range vols[n] {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					if _, err := c.Grant(ctx, id, fmt.Sprintf("node-%03d", n)); err != nil {
						b.Error(err)
					}
				}()
			}
		}
		wg.Wait()
	}
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		grantAll()
		b.StartTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fs, err := c.FenceNode(ctx, fmt.Sprintf("node-%03d", n))
				if err != nil || len(fs) != perNode {
					b.Errorf("FenceNode(node-%03d) = %d volumes, %v; want %d", n, len(fs), err, perNode)
				}
			}()
		}
		wg.Wait()
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/round")
	b.ReportMetric(float64(nodes*perNode*b.N)/total.Seconds(), "fences/s")
}

// moveLeaderTo hands the group's leadership to server to, from whichever
// server leads.
func moveLeaderTo(b *testing.B, srvs []*datapathtest.Server, to int) {
	b.Helper()
	for deadline := time.Now().Add(20 * time.Second); !srvs[to].Group.IsLeader(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("server %d did not become the leader", to)
		}
		for _, s := range srvs {
			if s.Group.IsLeader() {
				_ = s.Group.TransferLeadershipTo(fmt.Sprintf("datapath-%d", to))
			}
		}
	}
}
