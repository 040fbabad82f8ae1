package raftstate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

var bg = context.Background()

// createAndGrant makes a volume on server s1 and grants it to n1.
func createAndGrant(t *testing.T, c *testCluster) Volume {
	t.Helper()
	var v Volume
	err := c.retry(3*time.Second, func(g *Group) (err error) {
		v, err = g.CreateVolume(bg, "pv-1", 1<<20, datapath.AccessRWO, "s1")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.retry(3*time.Second, func(g *Group) error {
		e, err := g.Grant(bg, v.ID, "n1", datapath.UseReadWrite)
		if err == nil && e != 1 {
			t.Fatalf("first grant: epoch %d, want 1", e)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fence fences node at the leader and checks that the epoch went up.
func fence(t *testing.T, c *testCluster, id, node string, above uint64) uint64 {
	t.Helper()
	var e uint64
	err := c.retry(5*time.Second, func(g *Group) (err error) {
		e, err = g.Fence(bg, id, node)
		return err
	})
	if err != nil {
		t.Fatalf("fence %s: %v", node, err)
	}
	if e <= above {
		t.Fatalf("fence %s: epoch %d, not above %d acknowledged before", node, e, above)
	}
	return e
}

// TestGroup_FollowerAndCutOffLeaderRefuse: a follower refuses grants,
// fences and reads, naming the leader; a leader cut off from the majority
// never acknowledges a fence and never answers a read from its state.
func TestGroup_FollowerAndCutOffLeaderRefuse(t *testing.T) {
	c := newTestCluster(t, 3)
	v := createAndGrant(t, c)
	l := c.waitLeader(time.Second)
	f := (l + 1) % 3
	_, err := c.group(f).Fence(bg, v.ID, "n1")
	if !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "the leader is "+c.ids[l]) {
		t.Fatalf("fence at a follower: %v, want ErrNotLeader naming %s", err, c.ids[l])
	}
	if _, err := c.group(f).Attachments(bg, v.ID); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("read at a follower: %v, want ErrNotLeader", err)
	}

	c.setCut(l, true)
	old := c.group(l)
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	if e, err := old.Fence(ctx, v.ID, "n1"); err == nil {
		t.Fatalf("a cut-off leader acknowledged a fence (epoch %d)", e)
	} else if !errors.Is(err, ErrNotCommitted) && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("fence at a cut-off leader: %v", err)
	}
	if a, err := old.Attachments(ctx, v.ID); err == nil {
		t.Fatalf("a cut-off leader answered a read from its state: %+v", a)
	}
	nl := c.waitLeader(3 * time.Second)
	if nl == l {
		t.Fatal("the cut-off server is still the leader")
	}
	e := fence(t, c, v.ID, "n1", 1)
	c.setCut(l, false)
	// The old leader's uncommitted fence, if it was appended, is
	// overwritten: every server comes to the epoch the majority acknowledged.
	for i := range c.ids {
		c.waitLocal(i, v.ID, 3*time.Second, func(got Volume, _ []datapath.Attachment) bool { return got.Epoch == e })
	}
}

// TestGroup_LeaderKillRestartAndSnapshots_EpochsNeverGoBack kills the
// leader, restarts it from its data directory after the others moved on
// past a snapshot, then restarts every server: every acknowledged epoch
// is above the one before, and every server ends with the last one.
func TestGroup_LeaderKillRestartAndSnapshots_EpochsNeverGoBack(t *testing.T) {
	c := newTestCluster(t, 3)
	v := createAndGrant(t, c)
	var last uint64 = 1
	l := c.waitLeader(time.Second)
	killedAt := c.group(l).raft.LastIndex()
	c.kill(l)
	start := time.Now()
	last = fence(t, c, v.ID, "n1", last)
	t.Logf("first fence %s after the leader's kill", time.Since(start))
	for i := 0; i < 3*int(testTiming.SnapshotThreshold); i++ { // past a snapshot and its trailing log
		last = fence(t, c, v.ID, "n2", last)
	}
	nl := c.waitLeader(time.Second)
	// The library snapshots on its own timer, which a loaded machine may
	// not have run yet: take one, so that the log is trimmed for sure.
	if err := c.group(nl).raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatalf("snapshot on the leader: %v", err)
	}
	if first, _ := c.group(nl).store.FirstIndex(); first <= killedAt+1 {
		t.Fatalf("the leader's log still starts at %d, after the killed server's %d: it would not need a snapshot", first, killedAt)
	}
	c.start(l) // catches up from a snapshot: its log ends before the kept trail
	c.waitLocal(l, v.ID, 5*time.Second, func(got Volume, _ []datapath.Attachment) bool { return got.Epoch == last })
	last = fence(t, c, v.ID, "n1", last)

	for i := range c.ids {
		c.kill(i)
	}
	for i := range c.ids {
		c.start(i)
	}
	c.waitLeader(5 * time.Second)
	var rows []datapath.Attachment
	err := c.retry(5*time.Second, func(g *Group) (err error) {
		rows, err = g.Attachments(bg, v.ID)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Epoch != last || rows[0].State != datapath.StateFenced {
		t.Fatalf("after restarting every server: %+v, want n1 fenced at %d", rows, last)
	}
	last = fence(t, c, v.ID, "n1", last)
	e := uint64(0)
	err = c.retry(3*time.Second, func(g *Group) (err error) { e, err = g.Grant(bg, v.ID, "n3", datapath.UseReadWrite); return err })
	if err != nil || e != last+1 {
		t.Fatalf("grant after everything: %d %v, want %d", e, err, last+1)
	}
}

// TestGroup_OneMemberGrowsToThree bootstraps a one-member group, adds two
// voters, loses the first server and goes on.
func TestGroup_OneMemberGrowsToThree(t *testing.T) {
	c := &testCluster{t: t, trans: make([]*raft.InmemTransport, 3), groups: make([]*Group, 3), cut: make([]bool, 3)}
	for i := 0; i < 3; i++ {
		c.ids = append(c.ids, []string{"s1", "s2", "s3"}[i])
		c.dirs = append(c.dirs, t.TempDir())
	}
	t.Cleanup(c.closeAll)
	c.start(0)
	peers := c.peers()
	if err := c.group(0).Bootstrap(peers[:1]); err != nil {
		t.Fatal(err)
	}
	c.waitLeader(3 * time.Second)
	if err := c.retry(3*time.Second, func(g *Group) error { return g.AddServer(bg, peers[0]) }); err != nil {
		t.Fatal(err)
	}
	v := createAndGrant(t, c)
	c.start(1)
	c.start(2)
	for _, p := range peers[1:] {
		if err := c.retry(3*time.Second, func(g *Group) error { return g.AddServer(bg, p) }); err != nil {
			t.Fatalf("add %s: %v", p.ID, err)
		}
	}
	if err := c.retry(3*time.Second, func(g *Group) error { return g.RemoveServer(bg, "s1") }); !errors.Is(err, datapath.ErrInUse) {
		t.Fatalf("remove the server holding a volume's data: %v, want ErrInUse", err)
	}
	if st := c.group(c.waitLeader(time.Second)).Status(); len(st.Voters) != 3 || st.Role != "leader" {
		t.Fatalf("status after growing: %+v", st)
	}
	for i := range c.ids {
		c.waitLocal(i, v.ID, 3*time.Second, func(Volume, []datapath.Attachment) bool { return true })
	}
	c.kill(0)
	e := fence(t, c, v.ID, "n1", 1)
	if servers := c.group(c.waitLeader(time.Second)).Local().Servers(); len(servers) != 3 || servers[2].Node != "node-s3" {
		t.Fatalf("members recorded: %+v", servers)
	}
	t.Logf("fence after losing the first server: epoch %d", e)
}

// TestGroup_Bootstrap_BadPeersRefused: a peer list that cannot make a group
// is refused with what is wrong, and the server can still bootstrap.
func TestGroup_Bootstrap_BadPeersRefused(t *testing.T) {
	_, tr := raft.NewInmemTransport(addrOf(0))
	g, err := Open(Config{ID: "s1", Dir: t.TempDir(), Transport: tr, Timing: testTiming, LogOutput: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	self := Server{ID: "s1", RaftAddress: string(addrOf(0))}
	other := Server{ID: "s2", RaftAddress: string(addrOf(1))}
	cases := []struct {
		name  string
		peers []Server
		want  string
	}{
		{"none", nil, "bootstrap with no peers"},
		{"without this server", []Server{other}, "do not include this server (s1)"},
		{"this server elsewhere", []Server{{ID: "s1", RaftAddress: "127.0.0.1:9999"}}, "listed at 127.0.0.1:9999 but listens at 127.0.0.1:7001"},
		{"id twice", []Server{self, {ID: "s1", RaftAddress: string(addrOf(2))}}, "peer 2: server id s1 is listed twice"},
		{"address twice", []Server{self, {ID: "s2", RaftAddress: string(addrOf(0))}}, "peer 2: raft address 127.0.0.1:7001 is listed twice"},
		{"no port", []Server{self, {ID: "s2", RaftAddress: "127.0.0.1"}}, `peer 2: datapath: invalid argument: raft address of server s2 "127.0.0.1"`},
		{"port out of range", []Server{self, {ID: "s2", RaftAddress: "127.0.0.1:70000"}}, `port "70000"; want 1 to 65535`},
		{"empty id", []Server{self, {RaftAddress: string(addrOf(1))}}, "server id is empty"},
		{"space in id", []Server{self, {ID: "s 2", RaftAddress: string(addrOf(1))}}, "white space"},
	}
	for _, c := range cases {
		err := g.Bootstrap(c.peers)
		if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want ErrInvalidArgument containing %q", c.name, err, c.want)
		}
	}
	if err := g.Bootstrap([]Server{self}); err != nil {
		t.Fatalf("a good list after the bad ones: %v", err)
	}
	if err := g.Bootstrap([]Server{self}); !errors.Is(err, ErrHasState) || !strings.Contains(err.Error(), "already has Raft state") {
		t.Fatalf("second bootstrap: %v", err)
	}
}

// TestGroup_BadInputRefusedBeforeProposing: a call with bad input is
// refused with a clear error and appends nothing to the log.
func TestGroup_BadInputRefusedBeforeProposing(t *testing.T) {
	c := newTestCluster(t, 1)
	v := createAndGrant(t, c)
	g := c.group(0)
	before := g.raft.LastIndex()
	snap := snapBytes(t, g.Local())
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"bad node", func() error { _, err := g.Grant(bg, v.ID, "", datapath.UseReadWrite); return err }, "node is empty"},
		{"bad use", func() error { _, err := g.Grant(bg, v.ID, "n2", "rwx"); return err }, `grant use "rwx"`},
		{"bad volume id", func() error { _, err := g.Fence(bg, "pv-1", "n1"); return err }, "is not of the form vol-"},
		{"bad size", func() error { _, err := g.CreateVolume(bg, "pv-2", 0, datapath.AccessRWO, "s1"); return err }, "volume size 0 bytes"},
		{"bad mode", func() error { _, err := g.CreateVolume(bg, "pv-2", 1, "rwz", "s1"); return err }, `access mode "rwz"`},
		{"bad leave", func() error { _, err := g.Leave(bg, "n1", -time.Second); return err }, "the duration must be positive"},
		{"bad member", func() error { return g.AddServer(bg, Server{ID: "s2", RaftAddress: ":"}) }, `raft address of server s2 ":"`},
	}
	for _, c := range cases {
		err := c.call()
		if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want ErrInvalidArgument containing %q", c.name, err, c.want)
		}
	}
	if after := g.raft.LastIndex(); after != before {
		t.Fatalf("bad input appended to the log: last index %d -> %d", before, after)
	}
	if !bytes.Equal(snap, snapBytes(t, g.Local())) {
		t.Fatal("bad input changed the state")
	}
}

func TestOpen_BadConfigRefused(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no id", Config{Dir: t.TempDir(), Address: "127.0.0.1:0"}, "server id is empty"},
		{"no dir", Config{ID: "s1", Address: "127.0.0.1:0"}, "data directory: empty path"},
		{"bad address", Config{ID: "s1", Dir: t.TempDir(), Address: "localhost"}, `raft address "localhost"`},
		{"lease above heartbeat", Config{ID: "s1", Dir: t.TempDir(), Address: "127.0.0.1:1",
			Timing: Timing{HeartbeatTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: time.Second}}, "raft timing"},
	}
	for _, c := range cases {
		g, err := Open(c.cfg)
		if err == nil {
			g.Close()
		}
		if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want ErrInvalidArgument containing %q", c.name, err, c.want)
		}
	}
}
