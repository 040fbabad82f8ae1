package datapath_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// TestStoreGroup_ReplicaBehindOnAGrant_NotAppliedNeverFenced: a grant of a
// replicated volume is done once a majority of its replicas applied it, so
// the writer's first write may reach a replica that has not applied it yet.
// That replica answers ErrNotApplied (send it again), never ErrFenced,
// which the engine takes as final and fails the application's I/O on; a
// write that waits there is taken as soon as the replica applies the grant.
// A write at an epoch the replica applied and found fenced is still
// ErrFenced.
func TestStoreGroup_ReplicaBehindOnAGrant_NotAppliedNeverFenced(t *testing.T) {
	const id = "vol-00000000000000ab"
	lags := make([]*lagging, 3)
	srvs := datapathtest.StartGroupWith(t, 3, datapathtest.GroupConfig{Wrap: func(i int, g *raftstate.Group) datapath.Control {
		lags[i] = &lagging{Group: g}
		return lags[i]
	}})
	r := startReplicatedIn(t, srvs, id, 0, 1, 2)
	behind := 2 // a replica that is neither the holder (0) nor the leader
	if r.srvs[behind].Group == r.leader {
		behind = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e1, err := r.ctl.Grant(ctx, id, "n1")
	must(t, err)
	r.applied(t)
	const member = 1 // a volume of three copies is created at member epoch 1

	lags[behind].hide(id)
	_, err = r.ctl.Fence(ctx, id, "n1")
	must(t, err)
	e2, err := r.ctl.Grant(ctx, id, "n2")
	must(t, err)
	s := r.srvs[behind].Store

	datapath.SetMemberEpochWait(t, 200*time.Millisecond)
	err = s.WriteAtMember(id, "n2", e2, member, 0, []byte("new"))
	if !errors.Is(err, datapath.ErrNotApplied) || errors.Is(err, datapath.ErrFenced) || !strings.Contains(err.Error(), "applied the volume up to epoch") {
		t.Fatalf("n2's write at epoch %d at a replica that has not applied its grant: %v; want ErrNotApplied (send it again), not ErrFenced", e2, err)
	}
	if _, err := s.ReadAt(id, "n2", e2, 0, 3); !errors.Is(err, datapath.ErrNotApplied) {
		t.Fatalf("n2's read there: %v; want ErrNotApplied", err)
	}
	if err := s.Flush(id, "n2", e2); !errors.Is(err, datapath.ErrNotApplied) {
		t.Fatalf("n2's flush there: %v; want ErrNotApplied", err)
	}
	if err := s.WriteAtMember(id, "n3", e1-1, member, 0, []byte("old")); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("a write at an epoch this replica applied, without a grant at it: %v; want ErrFenced", err)
	}

	datapath.SetMemberEpochWait(t, 5*time.Second)
	done := make(chan error, 1)
	go func() { done <- s.WriteAtMember(id, "n2", e2, member, 0, []byte("new")) }()
	select { // it cannot be taken before the replica applies the grant
	case err := <-done:
		t.Fatalf("n2's write returned (%v) before the replica applied its grant; want it waiting", err)
	case <-time.After(100 * time.Millisecond):
	}
	lags[behind].release()
	if err := <-done; err != nil {
		t.Fatalf("n2's write that waited for the replica to apply its grant: %v; want it taken", err)
	}
	if err := s.WriteAtMember(id, "n1", e1, member, 0, []byte("zombie")); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("n1's write at its fenced epoch once the replica applied the fence: %v; want ErrFenced", err)
	}
	got, err := s.ReadAt(id, "n2", e2, 0, 3)
	if err != nil || string(got) != "new" {
		t.Fatalf("read there: %q, %v; want \"new\"", got, err)
	}
}
