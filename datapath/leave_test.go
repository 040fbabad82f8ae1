package datapath

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// node returns node's entry of a Nodes report; ok is false when it is not listed.
func node(t testing.TB, s *Store, name string) (NodeStatus, bool) {
	t.Helper()
	r, err := s.Nodes()
	if err != nil {
		t.Fatalf("Nodes: %v", err)
	}
	for _, n := range r.Nodes {
		if n.Node == name {
			return n, true
		}
	}
	return NodeStatus{}, false
}

func TestStore_Leave_BadInputChangesNothing(t *testing.T) {
	clock := newTestClock()
	s := openClock(t, t.TempDir(), clock)
	cases := []struct {
		node    string
		d       time.Duration
		mention string
	}{
		{"n1", 0, "must be positive"},
		{"n1", -time.Second, "must be positive"},
		{"", time.Second, "node is empty"},
		{strings.Repeat("n", MaxNodeLen+1), time.Second, "at most 253"},
		{"n 1", time.Second, "white space"},
		{"n\x001", time.Second, "control"},
	}
	for _, c := range cases {
		_, err := s.Leave(c.node, c.d)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("Leave(%.20q, %s) = %v; want ErrInvalidArgument mentioning %q", c.node, c.d, err, c.mention)
		}
	}
	if r, _ := s.Nodes(); len(r.Nodes) != 0 {
		t.Fatalf("refused Leaves listed nodes: %+v", r.Nodes)
	}
}

func TestStore_Leave_ClampedPersistedAndClearedByHeartbeat(t *testing.T) {
	clock := newTestClock()
	dir := t.TempDir()
	s := openClock(t, dir, clock)
	start := clock.Now()
	until, err := s.Leave("n1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := start.Add(MaxLeave); !until.Equal(want) {
		t.Fatalf("Leave for an hour runs until %s, want it cut to %s", until, want)
	}
	if n, ok := node(t, s, "n1"); !ok || !n.LeavingUntil.Equal(until) || n.LiveGrants != 0 {
		t.Fatalf("Nodes lists n1 as %+v (listed %v); want leaving until %s", n, ok, until)
	}
	// A restart of the server keeps the announcement.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Add(10 * time.Second)
	s = openClock(t, dir, clock)
	if n, ok := node(t, s, "n1"); !ok || !n.LeavingUntil.Equal(until) {
		t.Fatalf("after restart n1 is %+v (listed %v); want leaving until %s", n, ok, until)
	}
	// The node is back: its heartbeat ends the announcement, durably.
	if err := s.Heartbeat("n1"); err != nil {
		t.Fatal(err)
	}
	if n, _ := node(t, s, "n1"); !n.LeavingUntil.IsZero() || !n.LastHeartbeat.Equal(clock.Now()) {
		t.Fatalf("after a heartbeat n1 is %+v; want no announcement and the heartbeat", n)
	}
	_ = s.Close()
	s = openClock(t, dir, clock)
	if n, ok := node(t, s, "n1"); ok {
		t.Fatalf("the cleared announcement came back after restart: %+v", n)
	}
}

func TestStore_Leave_HeartbeatWithinSettleDoesNotClear(t *testing.T) {
	clock := newTestClock()
	s := openClock(t, t.TempDir(), clock)
	until, err := s.Leave("n1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A heartbeat sent before the Leave may be handled after it.
	clock.Add(LeaveSettle / 2)
	_ = s.Heartbeat("n1")
	if n, _ := node(t, s, "n1"); !n.LeavingUntil.Equal(until) {
		t.Fatalf("a heartbeat within %s of the Leave cleared it: %+v", LeaveSettle, n)
	}
	clock.Add(LeaveSettle)
	_ = s.Heartbeat("n1")
	if n, _ := node(t, s, "n1"); !n.LeavingUntil.IsZero() {
		t.Fatalf("a heartbeat after %s did not clear the Leave: %+v", LeaveSettle, n)
	}
}

func TestStore_Leave_RunOutIsDroppedAtRestart(t *testing.T) {
	clock := newTestClock()
	dir := t.TempDir()
	s := openClock(t, dir, clock)
	until, err := s.Leave("n1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Until the restart the report keeps the end: silence counts from it.
	clock.Add(time.Minute)
	if n, ok := node(t, s, "n1"); !ok || !n.LeavingUntil.Equal(until) {
		t.Fatalf("run-out Leave: %+v (listed %v)", n, ok)
	}
	_ = s.Close()
	s = openClock(t, dir, clock)
	if n, ok := node(t, s, "n1"); ok {
		t.Fatalf("a Leave that ran out before the restart is still listed: %+v", n)
	}
}

func TestStore_Nodes_HeartbeatsIOLiveGrantsAndRestart(t *testing.T) {
	clock := newTestClock()
	dir := t.TempDir()
	s := openClock(t, dir, clock)
	v := mustCreate(t, s, "a", 1<<20, AccessRWO)
	w := mustCreate(t, s, "b", 1<<20, AccessRWO)
	f := mustCreate(t, s, "f", 1<<20, AccessRWO)
	ea := mustGrant(t, s, v.ID, "worker")
	mustGrant(t, s, w.ID, "worker")
	mustGrant(t, s, f.ID, "fenced-only")
	if _, err := s.FenceNode("fenced-only"); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second)
	if err := s.Heartbeat("beater"); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Second)
	if err := s.WriteAt(v.ID, "worker", ea, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	r, err := s.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	started := r.Started
	if !r.Now.Equal(clock.Now()) || !started.Equal(clock.Now().Add(-2*time.Second)) {
		t.Fatalf("report clock %s, started %s; want %s and the open time", r.Now, started, clock.Now())
	}
	if len(r.Nodes) != 2 || r.Nodes[0].Node != "beater" || r.Nodes[1].Node != "worker" {
		t.Fatalf("Nodes = %+v; want beater and worker (fenced-only has no live grant and never spoke)", r.Nodes)
	}
	if b := r.Nodes[0]; !b.LastHeartbeat.Equal(started.Add(time.Second)) || !b.LastIO.IsZero() || b.LiveGrants != 0 {
		t.Fatalf("beater = %+v", b)
	}
	if w := r.Nodes[1]; !w.LastHeartbeat.IsZero() || !w.LastIO.Equal(clock.Now()) || w.LiveGrants != 2 || !w.LastSeen().Equal(clock.Now()) {
		t.Fatalf("worker = %+v", w)
	}
	// After a restart of the server only the live grants are known: the
	// worker is listed, silent since the new start; the beater is forgotten.
	_ = s.Close()
	clock.Add(time.Minute)
	s = openClock(t, dir, clock)
	r, _ = s.Nodes()
	if len(r.Nodes) != 1 || r.Nodes[0].Node != "worker" || !r.Nodes[0].LastSeen().IsZero() || r.Nodes[0].LiveGrants != 2 || !r.Started.Equal(clock.Now()) {
		t.Fatalf("after restart Nodes = %+v, started %s", r.Nodes, r.Started)
	}
}
