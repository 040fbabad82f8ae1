package datapath_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// testServerID is the id of the one-member group of these tests.
const testServerID = "dp-0"

// fastTiming elects a lone server within about 0.1 s.
var fastTiming = raftstate.Timing{HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond,
	LeaderLeaseTimeout: 50 * time.Millisecond, CommitTimeout: 5 * time.Millisecond}

// startLone starts a one-member group in dir/raft with its Raft in
// process, as `vigil-datapath serve` does for a lone server.
func startLone(t testing.TB, dir string, now func() time.Time) *raftstate.Group {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := raftstate.Config{ID: testServerID, Dir: filepath.Join(dir, "raft"), Transport: raftstate.InProcessTransport(),
		Timing: fastTiming, LogOutput: io.Discard, Now: now}
	g, err := raftstate.Start(ctx, cfg, raftstate.Server{ID: testServerID, RaftAddress: raftstate.InProcessAddress}, nil)
	if err != nil {
		t.Fatalf("start the one-member group: %v", err)
	}
	return g
}

// openControlled opens a store in dir under a one-member group; closing
// closes both.
func openControlled(t testing.TB, dir string, opts datapath.Options, wrap func(*raftstate.Group) datapath.Control) (*datapath.Store, func()) {
	t.Helper()
	g := startLone(t, dir, opts.Now)
	opts.Control = g
	if wrap != nil {
		opts.Control = wrap(g)
	}
	s, err := datapath.Open(dir, opts)
	if err != nil {
		_ = g.Close()
		t.Fatalf("open the store under the group: %v", err)
	}
	return s, func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
		if err := g.Close(); err != nil {
			t.Errorf("close group: %v", err)
		}
	}
}

// slowApply delays this server's application of every change to its
// volumes (the refresh of the store's tables) by d, as a loaded data server
// would: a fence must still not return before it.
type slowApply struct {
	*raftstate.Group
	d time.Duration
}

func (s slowApply) OnApplied(fn func([]string)) {
	if fn == nil {
		s.Group.OnApplied(nil)
		return
	}
	s.Group.OnApplied(func(ids []string) { time.Sleep(s.d); fn(ids) })
}

// TestStoreControl_FenceReturnsOnlyOnceApplied: with the control state in
// the group, a fence returns only once it is committed and applied by the
// server holding the volume's data, whose volume lock the apply takes: no
// write lands after the fence returned, none that starts after it is
// acknowledged, even when that server applies slowly (RaceFence). A zombie's
// write arriving right after the fence returned is refused.
func TestStoreControl_FenceReturnsOnlyOnceApplied(t *testing.T) {
	for round := 0; round < 3; round++ {
		s, closeAll := openControlled(t, t.TempDir(), datapath.Options{Capacity: 1 << 30},
			func(g *raftstate.Group) datapath.Control { return slowApply{g, 50 * time.Millisecond} })
		v, err := s.CreateVolume("race", 1<<20, datapath.AccessRWO)
		if err != nil {
			t.Fatal(err)
		}
		epoch, err := s.Grant(v.ID, "zombie")
		if err != nil {
			t.Fatal(err)
		}
		write := func(off int64, p []byte) error { return s.WriteAt(v.ID, "zombie", epoch, off, p) }
		fence := func() error {
			if _, err := s.Fence(v.ID, "zombie"); err != nil {
				return err
			}
			if err := write(0, []byte("zombie")); !errors.Is(err, datapath.ErrFenced) {
				t.Errorf("a zombie write arriving right after the fence returned: %v; want ErrFenced (the fence returned before this server applied it)", err)
			}
			return nil
		}
		datapathtest.RaceFence(t, s.DataFile(v.ID), write, fence)
		closeAll()
	}
}

// TestStoreControl_FenceNode_NoWriteLandsAfterFence: FenceNode through the
// group is one entry for every volume of the node; the same race.
func TestStoreControl_FenceNode_NoWriteLandsAfterFence(t *testing.T) {
	s, closeAll := openControlled(t, t.TempDir(), datapath.Options{Capacity: 1 << 30},
		func(g *raftstate.Group) datapath.Control { return slowApply{g, 20 * time.Millisecond} })
	defer closeAll()
	raceFenceNode(t, s, 2)
}

// copyDir copies the fixture directory src into a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// fixtureClock is a clock a minute after the fixture was written, so its
// announced stop has not run out.
func fixtureClock() time.Time { return time.Date(2026, 11, 29, 4, 1, 0, 0, time.UTC) }

// TestStoreControl_UpgradeFromTheBboltRelease: a data directory written by
// the release that kept the control state in datapath.db
// (testdata/release-bbolt, see its README) opens as a one-member group with
// the same volumes, epochs, attachment tables, failed volume, announced
// stop and data; the epochs go on from there; after a restart the group
// alone holds it; and the release before refuses the migrated file.
func TestStoreControl_UpgradeFromTheBboltRelease(t *testing.T) {
	dir := copyDir(t, filepath.Join("testdata", "release-bbolt"))
	s, closeAll := openControlled(t, dir, datapath.Options{Capacity: 1 << 30, OverProvisioningPercentage: 1000, Now: fixtureClock}, nil)
	checkFixtureState(t, s)
	got, err := s.ReadAt(fixtureA, "node-2", 3, 4096, 28)
	if err != nil || string(got) != "written by node-2 at epoch 3" {
		t.Fatalf("read pvc-a as node-2 at epoch 3: %q, %v", got, err)
	}
	if _, err := s.ReadAt(fixtureA, "node-1", 1, 0, 8); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("read pvc-a as the fenced node-1: %v, want ErrFenced", err)
	}
	if e, err := s.Fence(fixtureA, "node-2"); err != nil || e != 4 {
		t.Fatalf("fence node-2 on pvc-a: epoch %d, %v; want 4 (the epochs go on from the imported 3)", e, err)
	}
	closeAll()

	// Restarted, the group holds everything (datapath.db no longer does).
	s, closeAll = openControlled(t, dir, datapath.Options{Capacity: 1 << 30, OverProvisioningPercentage: 1000, Now: fixtureClock}, nil)
	if e, err := s.Epoch(fixtureA); err != nil || e != 4 {
		t.Fatalf("epoch of pvc-a after a restart: %d, %v; want 4", e, err)
	}
	if e, err := s.Grant(fixtureA, "node-7"); err != nil || e != 5 {
		t.Fatalf("grant pvc-a to node-7 after a restart: epoch %d, %v; want 5", e, err)
	}
	closeAll()

	_, err = datapath.Open(dir, datapath.Options{Capacity: 1 << 30})
	if err == nil || !strings.Contains(err.Error(), "control group") || !strings.Contains(err.Error(), "format version 2") {
		t.Fatalf("open the migrated directory without its group (as the release before would): %v; want a refusal naming the control group", err)
	}
}

// The fixture's volumes (testdata/release-bbolt/README).
const (
	fixtureA = "vol-30f36322caca48de"
	fixtureB = "vol-4714c70449e24e64"
	fixtureC = "vol-fc25a2c9a00f4494"
	fixtureD = "vol-5224f4baa63c2a7e"
	fixtureE = "vol-079c1e97cc8fa6c3"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// checkFixtureState checks what the release before read back from the
// fixture, field by field.
func checkFixtureState(t *testing.T, s *datapath.Store) {
	t.Helper()
	vols, err := s.ListVolumes()
	if err != nil {
		t.Fatal(err)
	}
	wantVols := []datapath.Volume{
		{ID: fixtureA, Name: "pvc-a", Size: 1 << 20, Access: datapath.AccessRWO, Created: at("2026-11-29T04:00:03Z")},
		{ID: fixtureB, Name: "pvc-b", Size: 2 << 20, Access: datapath.AccessRWX, Created: at("2026-11-29T04:00:11Z")},
		{ID: fixtureC, Name: "pvc-c", Size: 1 << 20, Access: datapath.AccessRWO, Created: at("2026-11-29T04:00:22Z")},
		{ID: fixtureD, Name: "pvc-d", Size: 1 << 20, Access: datapath.AccessRWO, Created: at("2026-11-29T04:00:15Z")},
		{ID: fixtureE, Name: "pvc-e", Size: 1 << 20, Access: datapath.AccessRWX, Created: at("2026-11-29T04:00:18Z")},
	}
	if len(vols) != len(wantVols) {
		t.Fatalf("volumes: %+v; want %+v", vols, wantVols)
	}
	for i, v := range vols {
		if w := wantVols[i]; v.ID != w.ID || v.Name != w.Name || v.Size != w.Size || v.Access != w.Access || !v.Created.Equal(w.Created) {
			t.Errorf("volume %d: %+v; want %+v", i, v, w)
		}
	}
	type row struct {
		node    string
		epoch   uint64
		state   datapath.AttachmentState
		use     datapath.GrantUse
		updated string
	}
	want := map[string]struct {
		epoch uint64
		rows  []row
	}{
		fixtureA: {3, []row{{"node-1", 2, datapath.StateFenced, datapath.UseReadWrite, "2026-11-29T04:00:07Z"}, {"node-2", 3, datapath.StateGranted, datapath.UseFilesystemWriter, "2026-11-29T04:00:08Z"}}},
		fixtureB: {2, []row{{"node-1", 1, datapath.StateReleased, datapath.UseReadWrite, "2026-11-29T04:00:14Z"}, {"node-3", 2, datapath.StateGranted, datapath.UseReadOnly, "2026-11-29T04:00:13Z"}}},
		fixtureC: {1, []row{{"node-4", 1, datapath.StateGranted, datapath.UseReadWrite, "2026-11-29T04:00:25Z"}}},
		fixtureD: {2, []row{{"node-9", 2, datapath.StateFenced, datapath.UseReadWrite, "2026-11-29T04:00:17Z"}}},
		fixtureE: {0, nil},
	}
	for id, w := range want {
		e, err := s.Epoch(id)
		if err != nil || e != w.epoch {
			t.Errorf("epoch of %s: %d, %v; want %d", id, e, err, w.epoch)
		}
		as, err := s.Attachments(id)
		if err != nil || len(as) != len(w.rows) {
			t.Errorf("attachments of %s: %+v, %v; want %+v", id, as, err, w.rows)
			continue
		}
		for i, a := range as {
			r := w.rows[i]
			if a.Node != r.node || a.Epoch != r.epoch || a.State != r.state || a.Use != r.use || !a.Updated.Equal(at(r.updated)) {
				t.Errorf("attachment %d of %s: %+v; want %+v", i, id, a, r)
			}
		}
	}
	failed, err := s.FailedVolumes()
	if err != nil || len(failed) != 1 || failed[0].VolumeID != fixtureC || failed[0].Op != "flush" || !failed[0].Since.Equal(at("2026-11-29T04:00:27Z")) {
		t.Errorf("failed volumes: %+v, %v; want pvc-c's flush failure of 04:00:27", failed, err)
	}
	nodes, err := s.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	leaving := map[string]time.Time{}
	live := map[string]int{}
	for _, n := range nodes.Nodes {
		leaving[n.Node], live[n.Node] = n.LeavingUntil, n.LiveGrants
	}
	if !leaving["node-5"].Equal(at("2026-11-29T04:02:19Z")) {
		t.Errorf("node-5's announced stop: until %s; want 2026-11-29T04:02:19Z", leaving["node-5"])
	}
	if live["node-2"] != 1 || live["node-3"] != 1 || live["node-4"] != 1 || live["node-1"] != 0 || live["node-9"] != 0 {
		t.Errorf("live grants per node: %v", live)
	}
}

// TestStoreControl_ChangesGoThroughTheGroupAndSurviveRestart: creates,
// grants, fences, releases, FenceNode, leaves and deletes go through the
// group with AttachTable's rules; the data path checks the applied tables;
// a restart reloads all of it from the group alone.
func TestStoreControl_ChangesGoThroughTheGroupAndSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	s, closeAll := openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, nil)
	a, err := s.CreateVolume("a", 1<<20, datapath.AccessRWO)
	must(t, err)
	if again, err := s.CreateVolume("a", 1<<20, datapath.AccessRWO); err != nil || again.ID != a.ID {
		t.Fatalf("create a again: %+v, %v; want %s", again, err, a.ID)
	}
	if _, err := s.CreateVolume("a", 2<<20, datapath.AccessRWO); !errors.Is(err, datapath.ErrAlreadyExists) {
		t.Fatalf("create a with another size: %v, want ErrAlreadyExists", err)
	}
	e1, err := s.Grant(a.ID, "n1")
	must(t, err)
	must(t, s.WriteAt(a.ID, "n1", e1, 0, []byte("kept")))
	if _, err := s.Grant(a.ID, "n2"); !errors.Is(err, datapath.ErrAttachedElsewhere) {
		t.Fatalf("grant the RWO volume to a second node: %v, want ErrAttachedElsewhere", err)
	}
	until, err := s.Leave("n3", time.Minute)
	must(t, err)
	must(t, s.Heartbeat("n3")) // within LeaveSettle: the stop stays
	if e, err := s.Fence(a.ID, "n1"); err != nil || e != 2 {
		t.Fatalf("fence n1: %d, %v; want epoch 2", e, err)
	}
	if err := s.WriteAt(a.ID, "n1", e1, 0, []byte("zomb")); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("write of the fenced n1: %v, want ErrFenced", err)
	}
	e2, err := s.Grant(a.ID, "n2")
	if err != nil || e2 != 3 {
		t.Fatalf("grant n2 after the fence: %d, %v; want 3", e2, err)
	}
	b, err := s.CreateVolume("b", 4096, datapath.AccessRWX)
	must(t, err)
	_, err = s.Grant(b.ID, "n2")
	must(t, err)
	fenced, err := s.FenceNode("n2")
	if err != nil || len(fenced) != 2 {
		t.Fatalf("FenceNode n2: %v, %v; want both volumes", fenced, err)
	}
	if err := s.Release(a.ID, "n2"); err != nil {
		t.Fatalf("release a fenced node (no change): %v", err)
	}
	must(t, s.DeleteVolume(b.ID))
	if _, err := os.Stat(s.DataFile(b.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data file of the deleted volume: %v, want gone", err)
	}
	if _, err := s.Grant("vol-0000000000000000", "n1"); !errors.Is(err, datapath.ErrNotFound) {
		t.Fatalf("grant an unknown volume: %v, want ErrNotFound", err)
	}
	closeAll()

	s, closeAll = openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, nil)
	defer closeAll()
	vols, err := s.ListVolumes()
	if err != nil || len(vols) != 1 || vols[0].ID != a.ID {
		t.Fatalf("volumes after a restart: %+v, %v; want a only", vols, err)
	}
	as, err := s.Attachments(a.ID)
	if err != nil || len(as) != 2 || as[0].State != datapath.StateFenced || as[0].Epoch != 2 || as[1].State != datapath.StateFenced || as[1].Epoch != 4 {
		t.Fatalf("a's table after a restart: %+v, %v; want n1 fenced at 2, n2 fenced at 4", as, err)
	}
	e5, err := s.Grant(a.ID, "n1")
	if err != nil || e5 != 5 {
		t.Fatalf("grant after the restart: %d, %v; want 5", e5, err)
	}
	if p, err := s.ReadAt(a.ID, "n1", e5, 0, 4); err != nil || string(p) != "kept" {
		t.Fatalf("read after the restart: %q, %v", p, err)
	}
	nodes, err := s.Nodes()
	must(t, err)
	var n3 time.Time
	for _, n := range nodes.Nodes {
		if n.Node == "n3" {
			n3 = n.LeavingUntil
		}
	}
	if !n3.Equal(until) {
		t.Fatalf("n3's stop after the restart: until %s, want %s", n3, until)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestStoreControl_CutOffServerRefusesGrantsAndFences: three servers in one
// group; the leader, which holds a volume's data, is cut off from the other
// two. Its fences and grants are refused (not committed, or not the
// leader), never acknowledged from its own state, and the node it granted
// keeps its grant there, since no fence was committed.
func TestStoreControl_CutOffServerRefusesGrantsAndFences(t *testing.T) {
	ids := []string{"s0", "s1", "s2"}
	trans := make([]*raft.InmemTransport, 3)
	groups := make([]*raftstate.Group, 3)
	stores := make([]*datapath.Store, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	timing := raftstate.Timing{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond}
	for i, id := range ids {
		_, trans[i] = raft.NewInmemTransport(raft.ServerAddress(id + ":1"))
	}
	for i := range trans {
		for j := range trans {
			if i != j {
				trans[i].Connect(trans[j].LocalAddr(), trans[j])
			}
		}
	}
	for i, id := range ids {
		dir := t.TempDir()
		cfg := raftstate.Config{ID: id, Dir: filepath.Join(dir, "raft"), Transport: trans[i], Timing: timing, LogOutput: io.Discard}
		self := raftstate.Server{ID: id, RaftAddress: id + ":1"}
		var err error
		if i == 0 {
			groups[i], err = raftstate.Start(ctx, cfg, self, nil)
		} else if groups[i], err = raftstate.Open(cfg); err == nil {
			err = groups[0].AddServer(ctx, self)
		}
		must(t, err)
		stores[i], err = datapath.Open(dir, datapath.Options{Capacity: 1 << 30, Control: groups[i]})
		must(t, err)
	}
	t.Cleanup(func() {
		for i := range stores {
			_ = stores[i].Close()
			_ = groups[i].Close()
		}
	})
	v, err := stores[0].CreateVolume("pvc-a", 1<<20, datapath.AccessRWO)
	must(t, err)
	e, err := stores[0].Grant(v.ID, "n1")
	must(t, err)
	if _, err := stores[1].Fence(v.ID, "n1"); !errors.Is(err, datapath.ErrNotLeader) {
		t.Fatalf("fence at a follower: %v, want ErrNotLeader", err)
	}

	trans[0].DisconnectAll()
	for _, tr := range trans[1:] {
		tr.Disconnect(trans[0].LocalAddr())
	}
	_, err = stores[0].Fence(v.ID, "n1")
	if !errors.Is(err, datapath.ErrNotCommitted) && !errors.Is(err, datapath.ErrNotLeader) {
		t.Fatalf("fence at the cut-off leader: %v; want it refused as not committed or not the leader", err)
	}
	if _, err := stores[0].Grant(v.ID, "n2"); !errors.Is(err, datapath.ErrNotLeader) && !errors.Is(err, datapath.ErrNotCommitted) {
		t.Fatalf("grant at the cut-off server: %v; want it refused", err)
	}
	if _, err := stores[0].FenceNode("n1"); !errors.Is(err, datapath.ErrNotLeader) && !errors.Is(err, datapath.ErrNotCommitted) {
		t.Fatalf("FenceNode at the cut-off server: %v; want it refused", err)
	}
	if err := stores[0].WriteAt(v.ID, "n1", e, 0, []byte("still granted")); err != nil {
		t.Fatalf("n1's write at its data server after a fence that was refused: %v; no fence was committed, so its grant stands", err)
	}
}

// TestStoreControl_DataFileNotAppliedYet: a server started again answers
// before it has applied the group's log. For a volume whose data file it has
// but whose create it has not applied, its answer must be ErrNotApplied
// (send it again), not ErrNotFound: an engine takes not-found as final and
// fails the kernel's I/O, which kills the volume's ext4 journal for good.
// The state behind is made here by a data file the group does not name. A
// volume without a data file is still ErrNotFound.
func TestStoreControl_DataFileNotAppliedYet(t *testing.T) {
	dir := t.TempDir()
	s, closeAll := openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, nil)
	v, err := s.CreateVolume("known", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	behind := "vol-00000000000000aa"
	if err := os.WriteFile(filepath.Join(filepath.Dir(s.DataFile(v.ID)), behind+".img"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	err = s.WriteAt(behind, "n1", 1, 0, []byte("x"))
	if !errors.Is(err, datapath.ErrNotApplied) || errors.Is(err, datapath.ErrNotFound) || !strings.Contains(err.Error(), "send it again") {
		t.Errorf("write to a volume whose data file is here but whose create is not applied: %v; want ErrNotApplied", err)
	}
	if _, err := s.ReadAt(behind, "n1", 1, 0, 1); !errors.Is(err, datapath.ErrNotApplied) {
		t.Errorf("read of it: %v; want ErrNotApplied", err)
	}
	if err := s.WriteAt("vol-00000000000000bb", "n1", 1, 0, []byte("x")); !errors.Is(err, datapath.ErrNotFound) {
		t.Errorf("write to a volume of which nothing is here: %v; want ErrNotFound", err)
	}
}
