package raftstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// testTiming is fast failure detection for tests, and snapshots every few
// entries with a short log kept after them, so a server that was away
// catches up from a snapshot.
var testTiming = Timing{
	HeartbeatTimeout:   100 * time.Millisecond,
	ElectionTimeout:    100 * time.Millisecond,
	LeaderLeaseTimeout: 100 * time.Millisecond,
	CommitTimeout:      5 * time.Millisecond,
	SnapshotInterval:   50 * time.Millisecond,
	SnapshotThreshold:  16,
	TrailingLogs:       8,
}

// testCluster is n servers over raft.InmemTransport, each with its data
// directory, that a test can kill, restart and cut off.
type testCluster struct {
	t      testing.TB
	ids    []string
	dirs   []string
	mu     sync.Mutex
	trans  []*raft.InmemTransport
	groups []*Group // nil while down
	cut    []bool   // cut off from every other server
	// metrics, when set, holds each server's metrics.
	metrics []*Metrics
}

func addrOf(i int) raft.ServerAddress { return raft.ServerAddress(fmt.Sprintf("127.0.0.1:%d", 7001+i)) }

// newTestCluster opens n servers, bootstraps them as one group and records
// every member.
func newTestCluster(t testing.TB, n int) *testCluster { return newTestClusterWith(t, n, nil) }

// newTestClusterWith is newTestCluster with each server's metrics.
func newTestClusterWith(t testing.TB, n int, metrics []*Metrics) *testCluster {
	c := &testCluster{t: t, trans: make([]*raft.InmemTransport, n), groups: make([]*Group, n), cut: make([]bool, n), metrics: metrics}
	for i := 0; i < n; i++ {
		c.ids = append(c.ids, fmt.Sprintf("s%d", i+1))
		c.dirs = append(c.dirs, t.TempDir())
	}
	t.Cleanup(c.closeAll)
	for i := 0; i < n; i++ {
		c.start(i)
	}
	peers := c.peers()
	for i := 0; i < n; i++ {
		if err := c.groups[i].Bootstrap(peers); err != nil && !errors.Is(err, ErrHasState) { // a leader reached it first
			t.Fatalf("bootstrap %s: %v", c.ids[i], err)
		}
	}
	c.waitLeader(5 * time.Second)
	for _, p := range peers {
		if err := c.retry(5*time.Second, func(g *Group) error { return g.AddServer(context.Background(), p) }); err != nil {
			t.Fatalf("add server %s: %v", p.ID, err)
		}
	}
	return c
}

func (c *testCluster) peers() []Server {
	var out []Server
	for i, id := range c.ids {
		out = append(out, Server{ID: id, RaftAddress: string(addrOf(i)), Node: "node-" + id})
	}
	return out
}

// start opens server i from its data directory on a new transport.
func (c *testCluster) start(i int) {
	_, tr := raft.NewInmemTransportWithTimeout(addrOf(i), 200*time.Millisecond)
	cfg := Config{ID: c.ids[i], Dir: c.dirs[i], Transport: tr, Timing: testTiming, LogOutput: io.Discard, ApplyTimeout: 2 * time.Second}
	if c.metrics != nil {
		cfg.Metrics = c.metrics[i]
	}
	g, err := Open(cfg)
	if err != nil {
		c.t.Fatalf("open %s: %v", c.ids[i], err)
	}
	c.mu.Lock()
	c.trans[i], c.groups[i] = tr, g
	c.mu.Unlock()
	c.wire()
}

// wire connects every two servers that are up and not cut off, and
// disconnects every other pair.
func (c *testCluster) wire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.trans {
		for j := range c.trans {
			if i == j || c.trans[i] == nil || c.trans[j] == nil {
				continue
			}
			if c.groups[i] != nil && c.groups[j] != nil && !c.cut[i] && !c.cut[j] {
				c.trans[i].Connect(addrOf(j), c.trans[j])
			} else {
				c.trans[i].Disconnect(addrOf(j))
			}
		}
	}
}

// kill stops server i as a crash would (no leadership transfer).
func (c *testCluster) kill(i int) {
	c.mu.Lock()
	g := c.groups[i]
	c.groups[i] = nil
	c.mu.Unlock()
	c.wire()
	if g != nil {
		_ = g.Close()
	}
}

// setCut cuts server i off from the others, or heals it.
func (c *testCluster) setCut(i int, cut bool) {
	c.mu.Lock()
	c.cut[i] = cut
	c.mu.Unlock()
	c.wire()
}

func (c *testCluster) group(i int) *Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[i]
}

func (c *testCluster) closeAll() {
	for i := range c.groups {
		c.kill(i)
	}
}

// leader returns a server that is up, not cut off and leads, or -1.
func (c *testCluster) leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, g := range c.groups {
		if g != nil && !c.cut[i] && g.IsLeader() {
			return i
		}
	}
	return -1
}

func (c *testCluster) waitLeader(timeout time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if l := c.leader(); l >= 0 {
			return l
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("no leader among the connected servers within %s", timeout)
	return -1
}

// do runs fn at the leader, retrying at another server while the answer
// is ErrNotLeader (nothing was proposed), until timeout. It returns the
// last error: nil, a refusal by the rules, or ErrNotCommitted.
func (c *testCluster) do(timeout time.Duration, fn func(g *Group) error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ErrNotLeader
		if l := c.leader(); l >= 0 {
			if g := c.group(l); g != nil {
				err = fn(g)
			}
		}
		if !errors.Is(err, ErrNotLeader) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// retry is do that also retries a call whose outcome is unknown
// (ErrNotCommitted): for calls that are safe to repeat (an idempotent
// create, grant or add, or a fence whose retry only moves the epoch again).
func (c *testCluster) retry(timeout time.Duration, fn func(g *Group) error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.do(timeout, fn)
		if !errors.Is(err, ErrNotCommitted) || time.Now().After(deadline) {
			return err
		}
	}
}

// waitLocal waits until server i's own state of volume id satisfies ok
// (followers apply what the leader committed a moment later).
func (c *testCluster) waitLocal(i int, id string, timeout time.Duration, ok func(Volume, []datapath.Attachment) bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var (
			v    Volume
			rows []datapath.Attachment
			err  error
		)
		if g := c.group(i); g != nil {
			v, err = g.Local().Volume(id)
			rows, _ = g.Local().Attachments(id)
		}
		if err == nil && ok(v, rows) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s's state of volume %s after %s: %+v %+v (%v)", c.ids[i], id, timeout, v, rows, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
