package raftstate

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// freeAddrs returns n loopback addresses with ports free right now.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out[i] = l.Addr().String()
		defer l.Close()
	}
	return out
}

// TestStart_EveryLeaderRecordsItself: three servers started at once with
// the same peers (as `serve --raft-peers` does on three nodes). Only the
// first leader records itself at its start; each follower still reports
// its own row (GroupStatus), and a server that becomes the leader later
// records itself (its node and datapath address), so that clients
// refused by a follower learn where the new leader serves.
func TestStart_EveryLeaderRecordsItself(t *testing.T) {
	raftAddrs, dpAddrs := freeAddrs(t, 3), freeAddrs(t, 3)
	var peers []Server
	for i := range raftAddrs {
		peers = append(peers, Server{ID: fmt.Sprintf("node-%d", i+1), RaftAddress: raftAddrs[i]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	groups := make([]*Group, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			self := Server{ID: peers[i].ID, RaftAddress: raftAddrs[i], Node: peers[i].ID, DatapathAddress: dpAddrs[i]}
			cfg := Config{ID: self.ID, Dir: t.TempDir(), Address: raftAddrs[i], Timing: testTiming, LogOutput: io.Discard, ApplyTimeout: 2 * time.Second}
			groups[i], errs[i] = Start(ctx, cfg, self, peers)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %s: %v", peers[i].ID, err)
		}
		t.Cleanup(func() { _ = groups[i].Close() })
	}
	for i, g := range groups {
		self := 0
		for _, row := range g.GroupStatus() {
			if row.Self {
				self++
				if row.ID != peers[i].ID || row.Address != dpAddrs[i] || row.Role == "" {
					t.Errorf("%s's own row: %+v", peers[i].ID, row)
				}
			}
		}
		if self != 1 {
			t.Errorf("%s reports %d rows of its own, want 1: %+v", peers[i].ID, self, g.GroupStatus())
		}
	}
	first := leaderOf(t, groups, -1)
	if err := groups[first].TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	next := leaderOf(t, groups, first)
	deadline := time.Now().Add(5 * time.Second)
	for {
		members, err := groups[next].Servers(ctx)
		recorded := false
		for _, m := range members {
			recorded = recorded || (m.ID == peers[next].ID && m.DatapathAddress == dpAddrs[next] && m.Node == peers[next].ID)
		}
		if err == nil && recorded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new leader %s did not record itself within 5 s: %+v, %v", peers[next].ID, members, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaderOf waits up to 5 s for a leader among groups other than not.
func leaderOf(t *testing.T, groups []*Group, not int) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for i, g := range groups {
			if i != not && g.IsLeader() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no leader other than %d within 5 s", not)
	return -1
}
