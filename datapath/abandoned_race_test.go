package datapath_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// lagging is a server whose store has not yet seen the committed changes
// of one volume (hidden): its applied reads lack it and the store is told
// of its changes only at release, as when the leader commits a create the
// store's apply has not reached.
type lagging struct {
	*raftstate.Group
	mu       sync.Mutex
	hidden   string
	held     [][]string
	observer func([]string)
}

func (l *lagging) hides(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return id == l.hidden
}

func (l *lagging) AppliedVolume(id string) (datapath.ControlVolume, []datapath.Attachment, bool) {
	if l.hides(id) {
		return datapath.ControlVolume{}, nil, false
	}
	return l.Group.AppliedVolume(id)
}

func (l *lagging) AppliedVolumes() []datapath.ControlVolume {
	return slices.DeleteFunc(l.Group.AppliedVolumes(), func(v datapath.ControlVolume) bool { return l.hides(v.ID) })
}

func (l *lagging) OnApplied(fn func([]string)) {
	l.mu.Lock()
	l.observer = fn
	l.mu.Unlock()
	l.Group.OnApplied(func(ids []string) {
		l.mu.Lock()
		if slices.Contains(ids, l.hidden) {
			l.held = append(l.held, ids)
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		fn(ids)
	})
}

// hide starts hiding the changes of id.
func (l *lagging) hide(id string) {
	l.mu.Lock()
	l.hidden = id
	l.mu.Unlock()
}

// release stops hiding and tells the store of the changes it held back.
func (l *lagging) release() {
	l.mu.Lock()
	held, fn := l.held, l.observer
	l.hidden, l.held = "", nil
	l.mu.Unlock()
	for _, ids := range held {
		fn(ids)
	}
}

// TestStore_RemoveAbandoned_CreateCommitsDuringTheSweep: a create that
// names an old prepared file commits between the sweep's checks of the
// server's own state (which has not applied it yet) and the removal: the
// file is kept and the volume takes I/O once applied. A file removed as
// abandoned is never named by a create after: that create is refused,
// saying why, and the group has no such volume.
func TestStore_RemoveAbandoned_CreateCommitsDuringTheSweep(t *testing.T) {
	datapath.SetPrepareHold(t, 20*time.Millisecond)
	dir := t.TempDir()
	var lag *lagging
	s, closeAll := openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, func(g *raftstate.Group) datapath.Control {
		lag = &lagging{Group: g}
		return lag
	})
	defer closeAll()
	late, _, err := s.PrepareVolume("late", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	gone, _, err := s.PrepareVolume("gone", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the prepared volumes' hold
	ageFiles(t, dir, late.ID, gone.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lag.hide(late.ID)
	datapath.OnAbandonChecked(t, func(id string) {
		if id != late.ID {
			return
		}
		if _, err := lag.Group.CreateVolumeWithID(ctx, late.ID, "late", 1<<20, datapath.AccessRWO, testServerID); err != nil {
			t.Errorf("the create committed during the sweep: %v", err)
		}
	})
	removed, err := s.RemoveAbandoned(ctx)
	if err != nil || !slices.Equal(removed, []string{gone.ID}) {
		t.Fatalf("removed %v, %v; want %s only (%s was created during the sweep)", removed, err, gone.ID, late.ID)
	}
	lag.release()
	if !fileExists(dataFile(dir, late.ID)) {
		t.Fatalf("the data file of volume %s, whose create committed during the sweep, was removed", late.ID)
	}
	checkKept(t, s, dir, late)

	_, err = s.CreatePlacedVolume(gone.ID, "gone", 1<<20, datapath.AccessRWO, testServerID)
	if !errors.Is(err, datapath.ErrNotFound) || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("a create naming the removed file: %v; want ErrNotFound saying it was removed as abandoned", err)
	}
	if _, _, named := lag.Group.AppliedVolume(gone.ID); named {
		t.Fatalf("the group has volume %s, whose data file was removed", gone.ID)
	}
}
