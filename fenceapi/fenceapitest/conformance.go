package fenceapitest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/fenceapi"
)

// FenceBackend is the back end under test: the method set of controller.FenceBackend,
// declared again here because the controller's tests import this package, and
// FenceNode, the whole-node fence an operator's tools may call.
type FenceBackend interface {
	Driver() string
	FenceNode(ctx context.Context, node string) ([]fenceapi.Fenced, error)
	FenceVolumes(ctx context.Context, node string, handles []string) ([]fenceapi.Fenced, error)
	Grants(ctx context.Context, node string) ([]fenceapi.Grant, error)
	Connectivity(ctx context.Context) (fenceapi.Report, error)
}

// Control arranges a back end's state for the suite, through a path of its
// own: SetUnavailable cuts the FenceBackend off, never the Control.
type Control interface {
	// NewVolume creates a ReadWriteOnce volume and returns its handle.
	NewVolume(ctx context.Context, name string) (handle string, err error)
	// Grant gives node a grant on the volume and returns its epoch: the same
	// epoch again if node already holds a live grant, a higher one otherwise;
	// an error while another node holds a live grant.
	Grant(ctx context.Context, handle, node string) (epoch uint64, err error)
	// Release ends node's live grant on the volume cleanly (a detach).
	Release(ctx context.Context, handle, node string) error
	// Heartbeat is node's agent saying it is alive.
	Heartbeat(ctx context.Context, node string) error
	// Leave is node's agent announcing a graceful stop of up to d; a d that is
	// not positive is an error.
	Leave(ctx context.Context, node string, d time.Duration) error
	// Advance moves the back end's clock forward by d.
	Advance(d time.Duration)
	// SetUnavailable cuts the FenceBackend off from the back end (true), or lets it
	// reach the back end again (false).
	SetUnavailable(cut bool)
}

// Backend makes the back ends under test.
type Backend struct {
	// New returns a fresh back end (no volumes, no nodes) and its control.
	// It registers its own cleanup with t.
	New func(t *testing.T) (FenceBackend, Control)
}

// RunConformance runs every behaviour a fencing back end must have against b,
// each on a fresh back end. Timing: a heartbeat at least 5 s after a Leave
// must clear it (the datapath ignores heartbeats within 1 s of the Leave).
func RunConformance(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f FenceBackend, c Control)
	}{
		{"DriverIsNamed", testDriver},
		{"FenceNodeRevokesOnlyLiveGrants", testFenceNodeOnlyLive},
		{"FenceNodeIsIdempotent", testFenceNodeIdempotent},
		{"ConcurrentFenceNodeFencesEachVolumeOnce", testFenceNodeConcurrent},
		{"FenceVolumesRevokesOnlyTheNamedLiveGrants", testFenceVolumesOnlyNamed},
		{"FenceVolumesIsIdempotent", testFenceVolumesIdempotent},
		{"EpochsOnlyGrow", testEpochsOnlyGrow},
		{"GrantsReflectGrantsReleasesAndFences", testGrantsReflect},
		{"ConnectivityListsHeartbeatsAndLiveGrants", testConnectivity},
		{"LeaveHidesSilenceUntilItRunsOut", testLeave},
		{"HeartbeatClearsLeave", testHeartbeatClearsLeave},
		{"UnavailableProvesNothing", testUnavailable},
		{"BadNodeNameChangesNothing", testBadNode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, c := b.New(t)
			tc.fn(t, f, c)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func newVolume(t *testing.T, c Control, name string) string {
	t.Helper()
	h, err := c.NewVolume(ctx(t), name)
	if err != nil {
		t.Fatalf("NewVolume(%s): %v", name, err)
	}
	return h
}

func grant(t *testing.T, c Control, handle, node string) uint64 {
	t.Helper()
	e, err := c.Grant(ctx(t), handle, node)
	if err != nil {
		t.Fatalf("Grant(%s, %s): %v", handle, node, err)
	}
	return e
}

// grantsOf returns node's rows by handle, checking that each volume appears
// once and carries an update time.
func grantsOf(t *testing.T, f FenceBackend, node string) map[string]fenceapi.Grant {
	t.Helper()
	gs, err := f.Grants(ctx(t), node)
	if err != nil {
		t.Fatalf("Grants(%s): %v", node, err)
	}
	out := make(map[string]fenceapi.Grant, len(gs))
	for _, g := range gs {
		if _, dup := out[g.Handle]; dup {
			t.Fatalf("Grants(%s) lists volume %s twice: %+v", node, g.Handle, gs)
		}
		if g.Updated.IsZero() {
			t.Fatalf("Grants(%s): row %+v has no update time", node, g)
		}
		out[g.Handle] = g
	}
	return out
}

func fenceNode(t *testing.T, f FenceBackend, node string) map[string]uint64 {
	t.Helper()
	fs, err := f.FenceNode(ctx(t), node)
	if err != nil {
		t.Fatalf("FenceNode(%s): %v", node, err)
	}
	out := make(map[string]uint64, len(fs))
	for _, v := range fs {
		if _, dup := out[v.Handle]; dup {
			t.Fatalf("FenceNode(%s) lists volume %s twice: %+v", node, v.Handle, fs)
		}
		out[v.Handle] = v.Epoch
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func testDriver(t *testing.T, f FenceBackend, _ Control) {
	if f.Driver() == "" {
		t.Fatal("Driver() is empty; it must name the CSI driver whose volumes the back end fences")
	}
}

func testFenceNodeOnlyLive(t *testing.T, f FenceBackend, c Control) {
	v1, v2, v3, v4 := newVolume(t, c, "v1"), newVolume(t, c, "v2"), newVolume(t, c, "v3"), newVolume(t, c, "v4")
	e1, e2 := grant(t, c, v1, "node-a"), grant(t, c, v2, "node-a")
	grant(t, c, v3, "node-a")
	if err := c.Release(ctx(t), v3, "node-a"); err != nil {
		t.Fatal(err)
	}
	e4 := grant(t, c, v4, "node-b")
	released := grantsOf(t, f, "node-a")[v3]

	fenced := fenceNode(t, f, "node-a")
	if got := keys(fenced); fmt.Sprint(got) != fmt.Sprint(keys(map[string]bool{v1: true, v2: true})) {
		t.Fatalf("FenceNode(node-a) fenced %v; want exactly the live grants %s and %s", got, v1, v2)
	}
	if fenced[v1] <= e1 || fenced[v2] <= e2 {
		t.Fatalf("new epochs %d, %d; want above the grants' %d, %d", fenced[v1], fenced[v2], e1, e2)
	}
	rows := grantsOf(t, f, "node-a")
	for _, h := range []string{v1, v2} {
		if g := rows[h]; g.State != fenceapi.StateFenced || g.State.Live() || g.Epoch != fenced[h] {
			t.Fatalf("node-a on %s after FenceNode: %+v; want fenced at epoch %d", h, g, fenced[h])
		}
	}
	if g := rows[v3]; g != released {
		t.Fatalf("the released row changed: %+v, was %+v", g, released)
	}
	if g := grantsOf(t, f, "node-b")[v4]; !g.State.Live() || g.Epoch != e4 {
		t.Fatalf("node-b's grant changed: %+v; want live at %d", g, e4)
	}
	// The fenced node no longer holds the RWO volume: another node may take it.
	if e := grant(t, c, v1, "node-b"); e <= fenced[v1] {
		t.Fatalf("grant after the fence has epoch %d, not above the fence's %d", e, fenced[v1])
	}
}

func testFenceNodeIdempotent(t *testing.T, f FenceBackend, c Control) {
	v := newVolume(t, c, "v")
	grant(t, c, v, "node-a")
	if got := fenceNode(t, f, "node-a"); len(got) != 1 {
		t.Fatalf("first FenceNode = %v; want %s", got, v)
	}
	before := grantsOf(t, f, "node-a")
	c.Advance(time.Second)
	if got := fenceNode(t, f, "node-a"); len(got) != 0 {
		t.Fatalf("second FenceNode = %v; want nothing (already fenced)", got)
	}
	if after := grantsOf(t, f, "node-a"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("second FenceNode changed the rows:\n%v\n%v", before, after)
	}
	if got := fenceNode(t, f, "never-granted"); len(got) != 0 {
		t.Fatalf("FenceNode of a node with no rows = %v; want nothing", got)
	}
}

func testFenceNodeConcurrent(t *testing.T, f FenceBackend, c Control) {
	want := map[string]bool{}
	for i := range 20 {
		h := newVolume(t, c, fmt.Sprintf("v%02d", i))
		grant(t, c, h, "node-a")
		want[h] = true
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		wg   sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fs, err := f.FenceNode(ctx(t), "node-a")
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, v := range fs {
				seen[v.Handle]++
			}
		}()
	}
	wg.Wait()
	for h := range want {
		if seen[h] != 1 {
			t.Errorf("volume %s reported fenced by %d of 4 concurrent FenceNode calls; want exactly 1", h, seen[h])
		}
	}
	for h, g := range grantsOf(t, f, "node-a") {
		if g.State.Live() {
			t.Errorf("node-a is still live on %s after concurrent FenceNode calls", h)
		}
	}
}

func fenceVolumes(t *testing.T, f FenceBackend, node string, handles ...string) map[string]uint64 {
	t.Helper()
	fs, err := f.FenceVolumes(ctx(t), node, handles)
	if err != nil {
		t.Fatalf("FenceVolumes(%s, %v): %v", node, handles, err)
	}
	out := make(map[string]uint64, len(fs))
	for _, v := range fs {
		if _, dup := out[v.Handle]; dup {
			t.Fatalf("FenceVolumes(%s) lists volume %s twice: %+v", node, v.Handle, fs)
		}
		out[v.Handle] = v.Epoch
	}
	return out
}

// testFenceVolumesOnlyNamed: of the node's volumes, only the named ones where
// its grant is live are fenced; a live grant not named keeps working, and a
// named volume the back end does not know is no error.
func testFenceVolumesOnlyNamed(t *testing.T, f FenceBackend, c Control) {
	v1, v2, v3, v4 := newVolume(t, c, "v1"), newVolume(t, c, "v2"), newVolume(t, c, "v3"), newVolume(t, c, "v4")
	e1, e2 := grant(t, c, v1, "node-a"), grant(t, c, v2, "node-a")
	grant(t, c, v3, "node-a")
	if err := c.Release(ctx(t), v3, "node-a"); err != nil {
		t.Fatal(err)
	}
	e4 := grant(t, c, v4, "node-b")
	before := grantsOf(t, f, "node-a")

	fenced := fenceVolumes(t, f, "node-a", v1, v3, v4, "no-such-volume")
	if got := keys(fenced); fmt.Sprint(got) != fmt.Sprint([]string{v1}) {
		t.Fatalf("FenceVolumes(node-a, %s %s %s no-such-volume) fenced %v; want exactly the named live grant %s", v1, v3, v4, got, v1)
	}
	rows := grantsOf(t, f, "node-a")
	if g := rows[v1]; g.State != fenceapi.StateFenced || fenced[v1] <= e1 || g.Epoch != fenced[v1] {
		t.Fatalf("node-a on %s after FenceVolumes: %+v; want fenced at an epoch above %d", v1, g, e1)
	}
	if g := rows[v2]; !g.State.Live() || g.Epoch != e2 {
		t.Fatalf("node-a on %s, not named: %+v; want its grant untouched (live at %d)", v2, g, e2)
	}
	if g := rows[v3]; g != before[v3] {
		t.Fatalf("the released row changed: %+v, was %+v", g, before[v3])
	}
	if g := grantsOf(t, f, "node-b")[v4]; !g.State.Live() || g.Epoch != e4 {
		t.Fatalf("node-b's grant changed: %+v; want live at %d", g, e4)
	}
	if got := fenceVolumes(t, f, "node-a"); len(got) != 0 {
		t.Fatalf("FenceVolumes with no volume = %v; want nothing", got)
	}
}

func testFenceVolumesIdempotent(t *testing.T, f FenceBackend, c Control) {
	v := newVolume(t, c, "v")
	grant(t, c, v, "node-a")
	if got := fenceVolumes(t, f, "node-a", v, v); len(got) != 1 {
		t.Fatalf("first FenceVolumes (the volume named twice) = %v; want %s once", got, v)
	}
	before := grantsOf(t, f, "node-a")
	c.Advance(time.Second)
	if got := fenceVolumes(t, f, "node-a", v); len(got) != 0 {
		t.Fatalf("second FenceVolumes = %v; want nothing (already fenced)", got)
	}
	if after := grantsOf(t, f, "node-a"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("second FenceVolumes changed the rows:\n%v\n%v", before, after)
	}
}

func testEpochsOnlyGrow(t *testing.T, f FenceBackend, c Control) {
	v := newVolume(t, c, "v")
	var last uint64
	step := func(what string, e uint64) {
		t.Helper()
		if e <= last {
			t.Fatalf("%s: epoch %d, not above the previous %d", what, e, last)
		}
		last = e
	}
	step("grant node-a", grant(t, c, v, "node-a"))
	if again := grant(t, c, v, "node-a"); again != last {
		t.Fatalf("repeated grant to node-a has epoch %d, want the same %d", again, last)
	}
	step("fence node-a", fenceNode(t, f, "node-a")[v])
	step("grant node-b", grant(t, c, v, "node-b"))
	if err := c.Release(ctx(t), v, "node-b"); err != nil {
		t.Fatal(err)
	}
	step("grant node-a again", grant(t, c, v, "node-a"))
	step("fence node-a again", fenceNode(t, f, "node-a")[v])
	step("grant node-b again", grant(t, c, v, "node-b"))
	if g := grantsOf(t, f, "node-b")[v]; g.Epoch != last || !g.State.Live() {
		t.Fatalf("node-b's row = %+v; want live at %d", g, last)
	}
}

func testGrantsReflect(t *testing.T, f FenceBackend, c Control) {
	if rows := grantsOf(t, f, "stranger"); len(rows) != 0 {
		t.Fatalf("Grants of a node never granted = %v; want none", rows)
	}
	v := newVolume(t, c, "v")
	e := grant(t, c, v, "node-a")
	if g := grantsOf(t, f, "node-a")[v]; g.State != fenceapi.StateGranted || g.Epoch != e || g.Handle != v {
		t.Fatalf("after grant: %+v; want granted at %d", g, e)
	}
	if err := c.Release(ctx(t), v, "node-a"); err != nil {
		t.Fatal(err)
	}
	if g := grantsOf(t, f, "node-a")[v]; g.State != fenceapi.StateReleased || g.State.Live() {
		t.Fatalf("after release: %+v; want released", g)
	}
	e2 := grant(t, c, v, "node-a")
	if g := grantsOf(t, f, "node-a")[v]; g.State != fenceapi.StateGranted || g.Epoch != e2 || e2 <= e {
		t.Fatalf("after a new grant: %+v; want granted at a new epoch above %d", g, e)
	}
	fenced := fenceNode(t, f, "node-a")
	if g := grantsOf(t, f, "node-a")[v]; g.State != fenceapi.StateFenced || g.Epoch != fenced[v] {
		t.Fatalf("after FenceNode: %+v; want fenced at %d", g, fenced[v])
	}
	if rows := grantsOf(t, f, "node-b"); len(rows) != 0 {
		t.Fatalf("Grants of another node = %v; want none", rows)
	}
}

func connectivity(t *testing.T, f FenceBackend) fenceapi.Report {
	t.Helper()
	r, err := f.Connectivity(ctx(t))
	if err != nil {
		t.Fatalf("Connectivity: %v", err)
	}
	if r.Now.IsZero() || r.Since.IsZero() || r.Now.Before(r.Since) {
		t.Fatalf("Connectivity clock: now %s, since %s; want since <= now, both set", r.Now, r.Since)
	}
	return r
}

func wantSilence(t *testing.T, r fenceapi.Report, node string, want time.Duration, wantOK bool) {
	t.Helper()
	if d, ok := r.Silence(node); ok != wantOK || d != want {
		t.Fatalf("Silence(%s) = %s, %v; want %s, %v (report %+v)", node, d, ok, want, wantOK, r)
	}
}

func testConnectivity(t *testing.T, f FenceBackend, c Control) {
	v := newVolume(t, c, "v")
	grant(t, c, v, "silent")
	c.Advance(2 * time.Second)
	if err := c.Heartbeat(ctx(t), "beater"); err != nil {
		t.Fatal(err)
	}
	c.Advance(3 * time.Second)
	r := connectivity(t, f)
	wantSilence(t, r, "beater", 3*time.Second, true)
	// Listed for its live grant although it never spoke: silent since the start.
	wantSilence(t, r, "silent", r.Now.Sub(r.Since), true)
	wantSilence(t, r, "stranger", 0, false)
	if err := c.Heartbeat(ctx(t), "silent"); err != nil {
		t.Fatal(err)
	}
	wantSilence(t, connectivity(t, f), "silent", 0, true)
}

func testLeave(t *testing.T, f FenceBackend, c Control) {
	if err := c.Heartbeat(ctx(t), "node-a"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []time.Duration{0, -time.Second} {
		if err := c.Leave(ctx(t), "node-a", bad); err == nil {
			t.Fatalf("Leave for %s was accepted; want an error", bad)
		}
	}
	wantSilence(t, connectivity(t, f), "node-a", 0, true)
	if err := c.Leave(ctx(t), "node-a", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	r := connectivity(t, f)
	wantSilence(t, r, "node-a", 0, false)
	c.Advance(29 * time.Second)
	wantSilence(t, connectivity(t, f), "node-a", 0, false)
	// Run out: silent since the end of the announced stop.
	c.Advance(2 * time.Second)
	wantSilence(t, connectivity(t, f), "node-a", time.Second, true)
}

func testHeartbeatClearsLeave(t *testing.T, f FenceBackend, c Control) {
	if err := c.Leave(ctx(t), "node-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Advance(5 * time.Second)
	if err := c.Heartbeat(ctx(t), "node-a"); err != nil {
		t.Fatal(err)
	}
	r := connectivity(t, f)
	wantSilence(t, r, "node-a", 0, true)
	for _, n := range r.Nodes {
		if n.Node == "node-a" && n.LeavingUntil.After(r.Now) {
			t.Fatalf("node-a still leaving until %s after its heartbeat", n.LeavingUntil)
		}
	}
	// A later silence counts again.
	c.Advance(7 * time.Second)
	wantSilence(t, connectivity(t, f), "node-a", 7*time.Second, true)
}

func testUnavailable(t *testing.T, f FenceBackend, c Control) {
	v := newVolume(t, c, "v")
	e := grant(t, c, v, "node-a")
	if err := c.Heartbeat(ctx(t), "node-a"); err != nil {
		t.Fatal(err)
	}
	c.SetUnavailable(true)
	fs, err := f.FenceNode(ctx(t), "node-a")
	if !errors.Is(err, fenceapi.ErrUnavailable) || len(fs) != 0 {
		t.Fatalf("FenceNode while cut off = %v, %v; want nothing and ErrUnavailable", fs, err)
	}
	if fs, err := f.FenceVolumes(ctx(t), "node-a", []string{v}); !errors.Is(err, fenceapi.ErrUnavailable) || len(fs) != 0 {
		t.Fatalf("FenceVolumes while cut off = %v, %v; want nothing and ErrUnavailable", fs, err)
	}
	gs, err := f.Grants(ctx(t), "node-a")
	if !errors.Is(err, fenceapi.ErrUnavailable) || len(gs) != 0 {
		t.Fatalf("Grants while cut off = %v, %v; want nothing and ErrUnavailable", gs, err)
	}
	r, err := f.Connectivity(ctx(t))
	if !errors.Is(err, fenceapi.ErrUnavailable) || len(r.Nodes) != 0 {
		t.Fatalf("Connectivity while cut off = %+v, %v; want nothing and ErrUnavailable", r, err)
	}
	c.SetUnavailable(false)
	if g := grantsOf(t, f, "node-a")[v]; !g.State.Live() || g.Epoch != e {
		t.Fatalf("after the cut node-a's row is %+v; want its grant untouched (live at %d)", g, e)
	}
}

func testBadNode(t *testing.T, f FenceBackend, c Control) {
	v := newVolume(t, c, "v")
	e := grant(t, c, v, "node-a")
	for _, bad := range []string{"", "node a", "node\x00a"} {
		if fs, err := f.FenceNode(ctx(t), bad); err == nil || len(fs) != 0 {
			t.Errorf("FenceNode(%q) = %v, %v; want an error", bad, fs, err)
		}
		if fs, err := f.FenceVolumes(ctx(t), bad, []string{v}); err == nil || len(fs) != 0 {
			t.Errorf("FenceVolumes(%q) = %v, %v; want an error", bad, fs, err)
		}
		if gs, err := f.Grants(ctx(t), bad); err == nil || len(gs) != 0 {
			t.Errorf("Grants(%q) = %v, %v; want an error", bad, gs, err)
		}
	}
	if g := grantsOf(t, f, "node-a")[v]; !g.State.Live() || g.Epoch != e {
		t.Fatalf("after refused calls node-a's row is %+v; want live at %d", g, e)
	}
}
