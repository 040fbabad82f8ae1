package raftstate

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-storage/vigil/datapath"
)

// TestStart_EveryPeerRecordedAtOnce: three servers bootstrapped together
// with a peer list that gives each one's node and datapath address are all
// recorded with those addresses when Start returns, before any leader
// change: each server saw one leader only, and every follower's own applied
// state records all three, so a create may name a follower that never led.
func TestStart_EveryPeerRecordedAtOnce(t *testing.T) {
	metrics := []*Metrics{NewMetrics(prometheus.NewRegistry()), NewMetrics(prometheus.NewRegistry()), NewMetrics(prometheus.NewRegistry())}
	groups, peers, _ := startThreeWith(t, threeOpts{full: true, metrics: metrics})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := leaderOf(t, groups, -1)
	members, err := groups[l].Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !sameServers(members, peers) {
		t.Fatalf("the leader's record when Start returned: %+v; want every peer with its node and datapath address: %+v", members, peers)
	}
	follower := (l + 1) % 3
	deadline := time.Now().Add(5 * time.Second)
	for !sameServers(groups[follower].Local().Servers(), peers) {
		if time.Now().After(deadline) {
			t.Fatalf("follower %s's applied record: %+v; want %+v", peers[follower].ID, groups[follower].Local().Servers(), peers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := groups[l].CreateVolumeWithID(ctx, "vol-0123456789abcdef", "pvc-1", 1<<20, datapath.AccessRWO, peers[follower].ID); err != nil {
		t.Fatalf("create placed on follower %s: %v", peers[follower].ID, err)
	}
	for i, m := range metrics {
		if n := testutil.ToFloat64(m.leaderChanges); n != 1 {
			t.Fatalf("server %s saw %v leaders; the test needs one leader throughout (a loaded machine?)", peers[i].ID, n)
		}
	}
	if groups[follower].IsLeader() || leaderOf(t, groups, -1) != l {
		t.Fatal("the leadership moved during the test")
	}
}

// sameServers says whether got records exactly want's servers, fields and
// all, in any order.
func sameServers(got, want []Server) bool {
	if len(got) != len(want) {
		return false
	}
	byID := map[string]Server{}
	for _, s := range got {
		byID[s.ID] = s
	}
	for _, w := range want {
		if byID[w.ID] != w {
			return false
		}
	}
	return true
}

// TestStart_ThisServerListedServingElsewhereRefused: a peer list that
// lists this server at another datapath address than it serves at is
// refused by name before anything is bootstrapped.
func TestStart_ThisServerListedServingElsewhereRefused(t *testing.T) {
	addrs := freeAddrs(t, 2)
	dir := t.TempDir()
	self := Server{ID: "s1", RaftAddress: addrs[0], DatapathAddress: "127.0.0.1:9600"}
	peers := []Server{{ID: "s1", RaftAddress: addrs[0], DatapathAddress: "127.0.0.1:9700"}, {ID: "s2", RaftAddress: addrs[1], DatapathAddress: "127.0.0.1:9601"}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Start(ctx, Config{ID: "s1", Dir: dir, Address: addrs[0], Timing: testTiming, LogOutput: io.Discard}, self, peers)
	want := "peer 1: this server (s1) is listed serving clients at 127.0.0.1:9700 but serves them at 127.0.0.1:9600"
	if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), want) {
		t.Fatalf("start: %v; want ErrInvalidArgument containing %q", err, want)
	}
	g, err := Start(ctx, Config{ID: "s1", Dir: dir, Address: addrs[0], Timing: testTiming, LogOutput: io.Discard}, self, nil)
	if err != nil {
		t.Fatalf("a lone start in the same directory after the refusal (nothing was bootstrapped): %v", err)
	}
	_ = g.Close()
}

// TestParsePeers: the forms taken (ID=RAFT, ID=RAFT@DATAPATH, mixed, IPv6)
// and the ones refused, each error naming the item.
func TestParsePeers(t *testing.T) {
	got, err := ParsePeers(" a=10.0.0.1:9601@10.0.0.1:9600, b=10.0.0.2:9601 ,c=[fd00::3]:9601@dp-c.example:9600")
	if err != nil {
		t.Fatal(err)
	}
	want := []Server{{ID: "a", RaftAddress: "10.0.0.1:9601", DatapathAddress: "10.0.0.1:9600"}, {ID: "b", RaftAddress: "10.0.0.2:9601"},
		{ID: "c", RaftAddress: net.JoinHostPort("fd00::3", "9601"), DatapathAddress: "dp-c.example:9600"}}
	if !sameServers(got, want) {
		t.Fatalf("parsed %+v; want %+v", got, want)
	}
	for _, c := range []struct{ in, want string }{
		{"a", `peer 1 "a": want ID=HOST:PORT or ID=HOST:PORT@HOST:PORT`},
		{"=10.0.0.1:9601", `peer 1 "=10.0.0.1:9601": want ID=HOST:PORT`},
		{"a=10.0.0.1:9601,a=10.0.0.2:9601", `peer 2 "a=10.0.0.2:9601": server id a is listed twice (peers 1 and 2)`},
		{"a=10.0.0.1:9601,b=10.0.0.1:9601@x:1", `peer 2 "b=10.0.0.1:9601@x:1": raft address 10.0.0.1:9601 is listed twice (peers 1 and 2)`},
		{"a=10.0.0.1", `peer 1 "a=10.0.0.1": datapath: invalid argument: raft address of server a "10.0.0.1"`},
		{"a=10.0.0.1:9601@10.0.0.1", `peer 1 "a=10.0.0.1:9601@10.0.0.1": datapath: invalid argument: datapath address of server a "10.0.0.1"`},
		{"a=10.0.0.1:9601@10.0.0.1:99999", `datapath address of server a "10.0.0.1:99999": port "99999"; want 1 to 65535`},
		{"a=10.0.0.1:9601@", `peer 1 "a=10.0.0.1:9601@": nothing after @`},
		{"a=10.0.0.1:9601,", `peer 2 "": want ID=HOST:PORT`},
	} {
		_, err := ParsePeers(c.in)
		if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePeers(%q): %v; want ErrInvalidArgument containing %q", c.in, err, c.want)
		}
	}
}

// TestGroup_AddMember_BadInputRefused: AddMember (and AddNonvoter) refuses a malformed id or
// address, a member without a datapath address and one whose Raft address
// does not answer, naming what is wrong, and the group goes on; Start
// refuses to join and bootstrap at once.
func TestGroup_AddMember_BadInputRefused(t *testing.T) {
	addrs := freeAddrs(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	self := Server{ID: "s1", RaftAddress: addrs[0], DatapathAddress: "127.0.0.1:9600"}
	g, err := Start(ctx, Config{ID: "s1", Dir: t.TempDir(), Address: addrs[0], Timing: testTiming, LogOutput: io.Discard}, self, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, c := range []struct{ id, raft, dp, want string }{
		{"s 2", addrs[1], "127.0.0.1:9601", "white space"},
		{"s2", "nowhere", "127.0.0.1:9601", `raft address of server s2 "nowhere"`},
		{"s2", addrs[1], "127.0.0.1", `datapath address of server s2 "127.0.0.1"`},
		{"s2", addrs[1], "", "server s2: no datapath address"},
		{"s2", addrs[1], "127.0.0.1:9601", "server s2's raft address " + addrs[1] + " does not answer"},
	} {
		if err := g.AddMember(ctx, c.id, c.raft, c.dp); !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AddMember(%q, %q, %q): %v; want ErrInvalidArgument containing %q", c.id, c.raft, c.dp, err, c.want)
		}
	}
	for _, c := range []struct{ id, raft, want string }{
		{"s 2", addrs[1], "white space"},
		{"s2", "nowhere", `raft address of server s2 "nowhere"`},
		{"s1", addrs[1], "server s1 is this group's leader, a voter already"},
		{"s2", addrs[1], "server s2's raft address " + addrs[1] + " does not answer"},
	} {
		if err := g.AddNonvoter(ctx, c.id, c.raft); !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("AddNonvoter(%q, %q): %v; want ErrInvalidArgument containing %q", c.id, c.raft, err, c.want)
		}
	}
	if f := g.raft.GetConfiguration(); f.Error() != nil || len(f.Configuration().Servers) != 1 {
		t.Fatalf("the configuration after the refusals: %+v, %v; want s1 alone", f.Configuration(), f.Error())
	}
	if members, err := g.Servers(ctx); err != nil || len(members) != 1 {
		t.Fatalf("members after the refusals: %+v, %v; want s1 alone", members, err)
	}
	_, err = Start(ctx, Config{ID: "s2", Dir: t.TempDir(), Address: addrs[1], Timing: testTiming, LogOutput: io.Discard, Join: true},
		Server{ID: "s2", RaftAddress: addrs[1]}, []Server{{ID: "s2", RaftAddress: addrs[1]}})
	if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), "join a running group or bootstrap one with peers, not both") {
		t.Fatalf("join with peers: %v", err)
	}
}
