package datapath_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// downReplica starts a group of four servers with a volume on the first
// three (the holder first), grants it to n1 and has every replica take a
// write ("before" at 0); it returns the group, n1's epoch and a replica
// that is neither the holder nor the leader, stopped as a crash stops it.
// Restarting it holds its applies until the returned release, which the
// caller defers (a held apply would keep its member from stopping).
func downReplica(t *testing.T, id string) (r *replicated, epoch uint64, down int, release func()) {
	t.Helper()
	var hold chan struct{}
	srvs := datapathtest.StartGroupWith(t, 4, datapathtest.GroupConfig{Timing: datapathtest.GroupTiming,
		Wrap: func(_ int, g *raftstate.Group) datapath.Control {
			if hold == nil {
				return nil
			}
			return holdApply(g, hold)
		}})
	r = startReplicatedIn(t, srvs, id, 0, 1, 2)
	down = 2
	if r.srvs[down].Group == r.leader {
		down = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	epoch, err := r.ctl.Grant(ctx, id, "n1")
	must(t, err)
	r.applied(t)
	for i, s := range r.srvs[:3] {
		if err := s.Store.WriteAtMember(id, "n1", epoch, 1, 0, []byte("before")); err != nil {
			t.Fatalf("write at replica %d: %v", i, err)
		}
	}
	r.srvs[down].Stop()
	hold = make(chan struct{})
	release = sync.OnceFunc(func() { close(hold) })
	return r, epoch, down, release
}

// imgExists says whether server i of r has the data file of id.
func (r *replicated) imgExists(t *testing.T, i int, id string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(r.srvs[i].Dir, "volumes", id+".img"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// TestStoreGroup_ReplicaMovedAwayWhileDown_RemovedOnceCaughtUp: the group
// replaces the replica of a server that is down. Started again, the server
// replays the move before it has caught up, and keeps the file then; once
// caught up it removes it (the pass at catch-up, not a minute later with
// the sweep), and serves the volume no more.
func TestStoreGroup_ReplicaMovedAwayWhileDown_RemovedOnceCaughtUp(t *testing.T) {
	const id = "vol-00000000000000aa"
	r, epoch, down, release := downReplica(t, id)
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.leader.MarkReplicaOutOfSync(ctx, id, r.ids[down], 1, "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.leader.ReplaceReplica(ctx, id, r.ids[down], r.ids[3], 2); err != nil {
		t.Fatal(err)
	}
	r.srvs[down].Restart(t)
	if !r.imgExists(t, down, id) {
		t.Fatal("the data file of the moved replica is gone before the restarted server applied anything")
	}
	release()
	deadline := time.Now().Add(10 * time.Second)
	for r.imgExists(t, down, id) {
		if time.Now().After(deadline) {
			t.Fatal("the data file of the replica the group moved away while its server was down is still there 10 s after the restart; want it removed once the server caught up")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.srvs[down].Store.WriteAtMember(id, "n1", epoch, 3, 0, []byte("x")); !errors.Is(err, datapath.ErrNotHolder) {
		t.Errorf("a write at the server whose replica moved away: %v; want ErrNotHolder", err)
	}
}

// TestStoreGroup_ReplicaMovedAwayAndBack_KeepsItsFile: while a server is
// down the group moves its replica away and back, and marks it in sync
// again. Started again, the server replays the move away before it has
// caught up: its applied set does not name it then, but a later change it
// has not applied yet does, with its copy in sync, the copy in this file.
// It keeps the file; once caught up it serves the volume from it again.
func TestStoreGroup_ReplicaMovedAwayAndBack_KeepsItsFile(t *testing.T) {
	const id = "vol-00000000000000aa"
	r, epoch, down, release := downReplica(t, id)
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.leader.MarkReplicaOutOfSync(ctx, id, r.ids[down], 1, "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.leader.ReplaceReplica(ctx, id, r.ids[down], r.ids[3], 2); err != nil {
		t.Fatal(err)
	}
	if _, err := r.leader.ReplaceReplica(ctx, id, r.ids[3], r.ids[down], 3); err != nil {
		t.Fatal(err)
	}
	if _, err := r.leader.MarkReplicaInSync(ctx, id, r.ids[down], 4); err != nil {
		t.Fatal(err)
	}
	r.srvs[down].Restart(t)
	release() // the replay goes through the store's apply, the move away first
	s := r.srvs[down].Store
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.WriteAtMember(id, "n1", epoch, 5, 6, []byte("after"))
		if err == nil {
			break
		}
		if !errors.Is(err, datapath.ErrNotApplied) || time.Now().After(deadline) {
			t.Fatalf("a write at member epoch 5 at the replica moved away and back in sync: %v (data file there: %v); want it taken once the server caught up",
				err, r.imgExists(t, down, id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := s.ReadAt(id, "n1", epoch, 0, 11)
	if err != nil || string(got) != "beforeafter" {
		t.Errorf("read at the replica moved away and back: %q, %v; want %q (its file kept)", got, err, "beforeafter")
	}
}
