package datapath_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// ageFiles sets the data files of ids back past datapath.AbandonedAfter.
func ageFiles(t *testing.T, dir string, ids ...string) {
	t.Helper()
	old := time.Now().Add(-datapath.AbandonedAfter - time.Minute)
	for _, id := range ids {
		if err := os.Chtimes(dataFile(dir, id), old, old); err != nil {
			t.Fatal(err)
		}
	}
}

func dataFile(dir, id string) string { return filepath.Join(dir, "volumes", id+".img") }

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// committedAndPrepared makes, on s, a volume prepared and never committed,
// one prepared and committed (a placed create) and one created by the
// server itself.
func committedAndPrepared(t *testing.T, s *datapath.Store) (prepared, placed, own datapath.Volume) {
	t.Helper()
	var err error
	if prepared, _, err = s.PrepareVolume("prepared", 1<<20, datapath.AccessRWO); err != nil {
		t.Fatal(err)
	}
	p, _, err := s.PrepareVolume("placed", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	if placed, err = s.CreatePlacedVolume(p.ID, "placed", 1<<20, datapath.AccessRWO, testServerID); err != nil {
		t.Fatal(err)
	}
	if own, err = s.CreateVolume("own", 1<<20, datapath.AccessRWO); err != nil {
		t.Fatal(err)
	}
	return prepared, placed, own
}

// checkKept fails unless the committed volumes' files are there and they
// still take I/O.
func checkKept(t *testing.T, s *datapath.Store, dir string, vols ...datapath.Volume) {
	t.Helper()
	for _, v := range vols {
		if !fileExists(dataFile(dir, v.ID)) {
			t.Fatalf("the data file of committed volume %s (%s) was removed", v.ID, v.Name)
		}
		if _, err := s.GetVolume(v.ID); err != nil {
			t.Fatalf("committed volume %s: %v", v.Name, err)
		}
	}
}

// TestStore_RemoveAbandoned_OldUnnamedFilesOnly: a prepared file whose
// create was never committed is removed once AbandonedAfter old, not
// before; the files of committed volumes (a placed create, the server's
// own), just as old, are kept.
func TestStore_RemoveAbandoned_OldUnnamedFilesOnly(t *testing.T) {
	datapath.SetPrepareHold(t, 20*time.Millisecond)
	dir := t.TempDir()
	s, closeAll := openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, nil)
	defer closeAll()
	prepared, placed, own := committedAndPrepared(t, s)
	time.Sleep(100 * time.Millisecond) // past the prepared volume's hold
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if removed, err := s.RemoveAbandoned(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("young files: removed %v, %v; want none", removed, err)
	}
	ageFiles(t, dir, prepared.ID, placed.ID, own.ID)
	removed, err := s.RemoveAbandoned(ctx)
	if err != nil || !slices.Equal(removed, []string{prepared.ID}) {
		t.Fatalf("removed %v, %v; want the never committed %s only", removed, err, prepared.ID)
	}
	if fileExists(dataFile(dir, prepared.ID)) {
		t.Fatal("the abandoned file is still there")
	}
	checkKept(t, s, dir, placed, own)
	if again, _, err := s.PrepareVolume("prepared", 1<<20, datapath.AccessRWO); err != nil || again.ID == prepared.ID {
		t.Fatalf("a new prepare of the name: %+v, %v; want a new volume", again, err)
	}
}

// TestStore_RemoveAbandoned_AfterARestart: the same with the server
// restarted between the prepare and the sweep (the prepared volume is then
// known by its file only).
func TestStore_RemoveAbandoned_AfterARestart(t *testing.T) {
	dir := t.TempDir()
	s, closeAll := openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, nil)
	prepared, placed, own := committedAndPrepared(t, s)
	closeAll()
	s, closeAll = openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, nil)
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if removed, err := s.RemoveAbandoned(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("young files after the restart: removed %v, %v; want none", removed, err)
	}
	ageFiles(t, dir, prepared.ID, placed.ID, own.ID)
	if _, err := s.RemoveAbandoned(ctx); err != nil { // the sweep at start may have been first
		t.Fatal(err)
	}
	if fileExists(dataFile(dir, prepared.ID)) {
		t.Fatal("the abandoned file is still there after the restart and the sweep")
	}
	checkKept(t, s, dir, placed, own)
}

// behind is a server whose applied state lacks one committed volume (it is
// behind the group) until caughtUp; its state is not settled until then.
type behind struct {
	*raftstate.Group
	hidden   string
	caughtUp *atomic.Bool
}

func (b behind) AppliedVolume(id string) (datapath.ControlVolume, []datapath.Attachment, bool) {
	if id == b.hidden && !b.caughtUp.Load() {
		return datapath.ControlVolume{}, nil, false
	}
	return b.Group.AppliedVolume(id)
}

func (b behind) AppliedVolumes() []datapath.ControlVolume {
	return slices.DeleteFunc(b.Group.AppliedVolumes(), func(v datapath.ControlVolume) bool { return v.ID == b.hidden && !b.caughtUp.Load() })
}

func (b behind) Settled(ctx context.Context) error {
	if !b.caughtUp.Load() {
		return fmt.Errorf("%w: test: behind the group", raftstate.ErrNotCommitted)
	}
	return b.Group.Settled(ctx)
}

// TestStore_RemoveAbandoned_NotSettledKeepsAll: a server behind the group,
// whose applied state does not name a committed volume yet, keeps that
// volume's old data file (its state is not settled) and says so; once it
// caught up, the group names the file and it stays.
func TestStore_RemoveAbandoned_NotSettledKeepsAll(t *testing.T) {
	dir := t.TempDir()
	s, closeAll := openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, nil)
	own, err := s.CreateVolume("own", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	closeAll()
	caughtUp := &atomic.Bool{}
	s, closeAll = openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, func(g *raftstate.Group) datapath.Control {
		return behind{Group: g, hidden: own.ID, caughtUp: caughtUp}
	})
	defer closeAll()
	ageFiles(t, dir, own.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	removed, err := s.RemoveAbandoned(ctx)
	if err == nil || !strings.Contains(err.Error(), "kept") || len(removed) != 0 {
		t.Fatalf("removed %v, %v; want nothing removed and an error saying the files are kept", removed, err)
	}
	if !fileExists(dataFile(dir, own.ID)) {
		t.Fatalf("the data file of committed volume %s was removed by a server behind the group", own.ID)
	}
	caughtUp.Store(true)
	if removed, err := s.RemoveAbandoned(ctx); err != nil || len(removed) != 0 {
		t.Fatalf("caught up: removed %v, %v; want none (the group names it)", removed, err)
	}
	if !fileExists(dataFile(dir, own.ID)) {
		t.Fatalf("the data file of committed volume %s was removed once the server caught up", own.ID)
	}
}
