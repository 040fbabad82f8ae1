package datapath_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// heldApply is a control group member whose state machine applies no
// change of a volume until release is closed: the store's apply
// (OnApplied), which runs inside the state machine's, waits for it from
// the moment the member opens. A server restarted with it keeps the state
// it restored (its last snapshot's) and is not caught up, as a server
// started again is until it learns what the leader committed and has
// applied it.
type heldApply struct {
	*raftstate.Group
	fn *atomic.Pointer[func([]string)]
}

func holdApply(g *raftstate.Group, release <-chan struct{}) heldApply {
	h := heldApply{Group: g, fn: new(atomic.Pointer[func([]string)])}
	g.OnApplied(func(ids []string) {
		<-release
		if fn := h.fn.Load(); fn != nil && *fn != nil {
			(*fn)(ids)
		}
	})
	return h
}

func (h heldApply) OnApplied(fn func([]string)) { h.fn.Store(&fn) }

// snapshotTiming is the tests' group timing with a snapshot after every
// change, so a server restarted restores a recent state.
func snapshotTiming() raftstate.Timing {
	t := datapathtest.GroupTiming
	t.SnapshotInterval, t.SnapshotThreshold = 50*time.Millisecond, 1
	return t
}

// TestStoreGroup_ReplicaRestart_FenceWhileDownAppliedFirst: a server that
// holds a replica (not the holder) of a volume of three is stopped as a
// crash stops it, after writes every replica acknowledged and a snapshot of
// its state in which node n1 holds the grant. While it is down the group
// fences n1 and grants n2. Started again, it restores that snapshot, where
// n1 is still granted at its old epoch; until it has caught up it answers
// every write and read with ErrNotApplied (not caught up, send it again),
// the zombie write of n1 included, and writes nothing. Once caught up it
// refuses n1's write as fenced, takes n2's at the new epoch, and its data
// file still holds what it took before the restart.
func TestStoreGroup_ReplicaRestart_FenceWhileDownAppliedFirst(t *testing.T) {
	const id = "vol-00000000000000aa"
	var hold chan struct{} // the restarted server's applies wait for it
	srvs := datapathtest.StartGroupWith(t, 3, datapathtest.GroupConfig{Timing: snapshotTiming(),
		Wrap: func(_ int, g *raftstate.Group) datapath.Control {
			if hold == nil {
				return nil
			}
			return holdApply(g, hold)
		}})
	r := startReplicatedIn(t, srvs, id, 0, 1, 2)
	down := 2 // a replica that is neither the holder (0) nor the leader
	if r.srvs[down].Group == r.leader {
		down = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e1, err := r.ctl.Grant(ctx, id, "n1")
	must(t, err)
	r.applied(t)
	for i, s := range r.srvs {
		if err := s.Store.WriteAtMember(id, "n1", e1, 1, 0, []byte("before")); err != nil {
			t.Fatalf("write at replica %d before the restart: %v", i, err)
		}
	}
	granted, _ := r.srvs[down].Group.LastApplied()
	if err := r.srvs[down].WaitSnapshot(ctx, granted); err != nil {
		t.Fatalf("a snapshot of server %d's state with n1's grant: %v", down, err)
	}

	r.srvs[down].Stop()
	if _, err := r.ctl.Fence(ctx, id, "n1"); err != nil {
		t.Fatalf("fence n1 with one replica of three down: %v", err)
	}
	e2, err := r.ctl.Grant(ctx, id, "n2")
	must(t, err)

	hold = make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	defer release()
	r.srvs[down].Restart(t)
	s := r.srvs[down].Store
	notApplied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, datapath.ErrNotApplied) || !strings.Contains(err.Error(), "has not caught up") {
			t.Errorf("%s at the restarted replica before it caught up: %v; want ErrNotApplied saying it has not caught up", what, err)
		}
	}
	notApplied("n1's write at its fenced epoch", s.WriteAtMember(id, "n1", e1, 1, 0, []byte("zombie")))
	notApplied("n2's write", s.WriteAtMember(id, "n2", e2, 1, 6, []byte("after")))
	_, err = s.ReadAt(id, "n2", e2, 0, 6)
	notApplied("n2's read", err)

	release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.WriteAtMember(id, "n2", e2, 1, 6, []byte("after"))
		if err == nil {
			break
		}
		if !errors.Is(err, datapath.ErrNotApplied) || time.Now().After(deadline) {
			t.Fatalf("n2's write at the restarted replica once it may catch up: %v; want it taken within 10 s", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.WriteAtMember(id, "n1", e1, 1, 0, []byte("zombie")); !errors.Is(err, datapath.ErrFenced) {
		t.Errorf("n1's write at its fenced epoch once the replica caught up: %v; want ErrFenced", err)
	}
	got, err := s.ReadAt(id, "n2", e2, 0, 11)
	if err != nil || string(got) != "beforeafter" {
		t.Errorf("read at the restarted replica: %q, %v; want %q (what it took before the restart, then n2's write, nothing of n1's)", got, err, "beforeafter")
	}
}
