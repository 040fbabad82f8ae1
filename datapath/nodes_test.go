package datapath

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// testClock is a clock the test moves by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func openClock(t testing.TB, dir string, clock *testClock) *Store {
	t.Helper()
	s, err := Open(dir, Options{Capacity: 1 << 30, Now: clock.Now})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustGrant(t testing.TB, s *Store, id, node string) uint64 {
	t.Helper()
	e, err := s.Grant(id, node)
	if err != nil {
		t.Fatalf("Grant(%s, %s): %v", id, node, err)
	}
	return e
}

// rows renders a node's rows as "id:state:epoch" in volume id order.
func rows(t testing.TB, s *Store, node string) string {
	t.Helper()
	gs, err := s.NodeGrants(node)
	if err != nil {
		t.Fatalf("NodeGrants(%s): %v", node, err)
	}
	var b []string
	for _, g := range gs {
		if g.Node != node {
			t.Fatalf("NodeGrants(%s) returned a row of node %s", node, g.Node)
		}
		b = append(b, fmt.Sprintf("%s:%s:%d", g.VolumeID, g.State, g.Epoch))
	}
	return strings.Join(b, " ")
}

func TestStore_NodeGrants_OnlyTheNodesRows(t *testing.T) {
	s := openTest(t, t.TempDir())
	a := mustCreate(t, s, "a", 1<<20, AccessRWO)
	b := mustCreate(t, s, "b", 1<<20, AccessRWO)
	x := mustCreate(t, s, "x", 1<<20, AccessRWX)
	mustCreate(t, s, "untouched", 1<<20, AccessRWO)
	ea := mustGrant(t, s, a.ID, "n1")
	eb := mustGrant(t, s, b.ID, "n1")
	if err := s.Release(b.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	ex1 := mustGrant(t, s, x.ID, "n1")
	mustGrant(t, s, x.ID, "n2")
	got := rows(t, s, "n1")
	want := sortedRows(map[string]string{a.ID: fmt.Sprintf("granted:%d", ea), b.ID: fmt.Sprintf("released:%d", eb), x.ID: fmt.Sprintf("granted:%d", ex1)})
	if got != want {
		t.Fatalf("NodeGrants(n1) = %s\nwant %s", got, want)
	}
	if got := rows(t, s, "n3"); got != "" {
		t.Fatalf("NodeGrants of a node without rows = %q, want none", got)
	}
	if live := s.index.liveGrants("n1"); live != 2 {
		t.Fatalf("index counts %d live grants for n1, want 2", live)
	}
}

func sortedRows(m map[string]string) string {
	var out []string
	for id, row := range m {
		out = append(out, id+":"+row)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func TestStore_NodeGrants_BadNode(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, node := range []string{"", strings.Repeat("n", MaxNodeLen+1), "a b", "bad\x00node", "\xff"} {
		_, err := s.NodeGrants(node)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "node") {
			t.Errorf("NodeGrants(%.20q) = %v, want ErrInvalidArgument naming the node", node, err)
		}
		if _, err := s.FenceNode(node); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("FenceNode(%.20q) = %v, want ErrInvalidArgument", node, err)
		}
	}
}

func TestStore_FenceNode_OnlyLiveGrantsOnceEach(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	var live []Volume
	for i := range 5 {
		v := mustCreate(t, s, fmt.Sprintf("live-%d", i), 1<<20, AccessRWO)
		mustGrant(t, s, v.ID, "dead")
		live = append(live, v)
	}
	released := mustCreate(t, s, "released", 1<<20, AccessRWO)
	mustGrant(t, s, released.ID, "dead")
	if err := s.Release(released.ID, "dead"); err != nil {
		t.Fatal(err)
	}
	other := mustCreate(t, s, "other", 1<<20, AccessRWO)
	otherEpoch := mustGrant(t, s, other.ID, "alive")
	relBefore, _ := s.Epoch(released.ID)

	got, err := s.FenceNode("dead")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(live) {
		t.Fatalf("FenceNode fenced %d volumes (%+v), want the %d live ones", len(got), got, len(live))
	}
	for i, f := range got {
		if i > 0 && got[i-1].VolumeID >= f.VolumeID {
			t.Fatalf("FenceNode result not sorted by volume id: %+v", got)
		}
		e, _ := s.Epoch(f.VolumeID)
		as, _ := s.Attachments(f.VolumeID)
		if e != f.Epoch || len(as) != 1 || as[0].State != StateFenced || as[0].Epoch != f.Epoch {
			t.Fatalf("volume %s: epoch %d, rows %+v; FenceNode said %d", f.VolumeID, e, as, f.Epoch)
		}
		if err := s.WriteAt(f.VolumeID, "dead", f.Epoch-1, 0, []byte("zombie")); !errors.Is(err, ErrFenced) {
			t.Fatalf("write by the fenced node: %v, want ErrFenced", err)
		}
	}
	if e, _ := s.Epoch(released.ID); e != relBefore {
		t.Fatalf("a released volume was fenced again: epoch %d -> %d", relBefore, e)
	}
	if as, _ := s.Attachments(other.ID); as[0].State != StateGranted || as[0].Epoch != otherEpoch {
		t.Fatalf("another node's grant changed: %+v", as)
	}
	before := rows(t, s, "dead")
	again, err := s.FenceNode("dead")
	if err != nil || len(again) != 0 {
		t.Fatalf("second FenceNode = %+v, %v; want nothing fenced", again, err)
	}
	if after := rows(t, s, "dead"); after != before {
		t.Fatalf("second FenceNode changed rows:\n%s\n%s", before, after)
	}
	if n := s.index.liveGrants("dead"); n != 0 {
		t.Fatalf("index still counts %d live grants", n)
	}
	// Durable: a reopened store has the same rows and rebuilds the index.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, dir)
	if after := rows(t, s2, "dead"); after != before {
		t.Fatalf("after reopen:\n%s\nwant\n%s", after, before)
	}
	if n, m := s2.index.liveGrants("dead"), s2.index.liveGrants("alive"); n != 0 || m != 1 {
		t.Fatalf("rebuilt index: dead %d live, alive %d; want 0 and 1", n, m)
	}
}

func TestStore_FenceNode_ConcurrentCallsFenceEachVolumeOnce(t *testing.T) {
	s := openTest(t, t.TempDir())
	want := map[string]uint64{}
	for i := range 40 {
		v := mustCreate(t, s, fmt.Sprintf("v%02d", i), 4096, AccessRWO)
		want[v.ID] = mustGrant(t, s, v.ID, "dead") + 1
	}
	results := make([][]FencedVolume, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.FenceNode("dead")
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	seen := map[string]int{}
	for _, r := range results {
		for _, f := range r {
			seen[f.VolumeID]++
			if f.Epoch != want[f.VolumeID] {
				t.Errorf("volume %s fenced at epoch %d, want exactly one bump to %d", f.VolumeID, f.Epoch, want[f.VolumeID])
			}
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("volume %s reported fenced %d times, want once", id, seen[id])
		}
	}
}

func TestStore_DeleteVolume_LeavesTheNodeIndex(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "a", 4096, AccessRWO)
	mustGrant(t, s, v.ID, "n1")
	if _, err := s.FenceNode("n1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(v.ID); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, s, "n1"); got != "" {
		t.Fatalf("NodeGrants after delete = %q, want none", got)
	}
	if vs := s.index.volumesOf("n1"); len(vs) != 0 {
		t.Fatalf("index still names %v", vs)
	}
}

func TestStore_NodeCalls_ClosedStore(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Capacity: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if _, err := s.NodeGrants("n1"); !errors.Is(err, errClosed) {
		t.Errorf("NodeGrants: %v", err)
	}
	if _, err := s.FenceNode("n1"); !errors.Is(err, errClosed) {
		t.Errorf("FenceNode: %v", err)
	}
	if _, err := s.Nodes(); !errors.Is(err, errClosed) {
		t.Errorf("Nodes: %v", err)
	}
	if _, err := s.Leave("n1", time.Second); !errors.Is(err, errClosed) {
		t.Errorf("Leave: %v", err)
	}
}
