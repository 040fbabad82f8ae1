package datapath_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// behindGroup is a server whose Settled fails until settle is closed: a
// server started again that has not learned the leader's commit index yet.
type behindGroup struct {
	*raftstate.Group
	settle chan struct{}
}

func (b behindGroup) Settled(ctx context.Context) error {
	select {
	case <-b.settle:
		return b.Group.Settled(ctx)
	case <-ctx.Done():
		return errors.New("no leader heard from yet")
	}
}

// TestStoreControl_NothingAnsweredBeforeCaughtUp: a server started again
// answers no call that reads a volume's attachment table (its I/O checks
// (node, epoch) against it) before it has settled with the control group:
// its applied state may be the snapshot's, where a node fenced since looks
// granted at its old epoch. Each such call is refused with ErrNotApplied,
// which callers send again, and nothing is written; once the server has
// caught up, the same calls are served.
func TestStoreControl_NothingAnsweredBeforeCaughtUp(t *testing.T) {
	dir := t.TempDir()
	s, closeAll := openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, nil)
	v, err := s.CreateVolume("a", 1<<20, datapath.AccessRWO)
	must(t, err)
	epoch, err := s.Grant(v.ID, "n1")
	must(t, err)
	must(t, s.WriteAt(v.ID, "n1", epoch, 0, []byte("before")))
	closeAll()

	settle := make(chan struct{})
	s, closeAll = openControlled(t, dir, datapath.Options{Capacity: 1 << 30}, func(g *raftstate.Group) datapath.Control {
		return behindGroup{Group: g, settle: settle}
	})
	defer closeAll()
	notApplied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, datapath.ErrNotApplied) || !strings.Contains(err.Error(), "has not caught up") || !strings.Contains(err.Error(), "send it again") {
			t.Errorf("%s before the server caught up: %v; want ErrNotApplied saying it has not caught up", what, err)
		}
	}
	notApplied("write", s.WriteAt(v.ID, "n1", epoch, 0, []byte("behind")))
	_, err = s.ReadAt(v.ID, "n1", epoch, 0, 6)
	notApplied("read", err)
	notApplied("flush", s.Flush(v.ID, "n1", epoch))
	_, err = s.Attachments(v.ID)
	notApplied("attachments", err)
	_, err = s.NodeGrants("n1")
	notApplied("node grants", err)
	_, err = s.Connectivity("n1", v.ID, time.Minute)
	notApplied("connectivity", err)

	close(settle)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.ReadAt(v.ID, "n1", epoch, 0, 6)
		if err == nil {
			if string(got) != "before" {
				t.Fatalf("read after the server caught up: %q; want %q (the refused write must have written nothing)", got, "before")
			}
			break
		}
		if !errors.Is(err, datapath.ErrNotApplied) || time.Now().After(deadline) {
			t.Fatalf("read once the group settles: %v; want it served within 10 s", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(t, s.WriteAt(v.ID, "n1", epoch, 0, []byte("after!")))
	rows, err := s.NodeGrants("n1")
	if err != nil || len(rows) != 1 || rows[0].Epoch != epoch {
		t.Errorf("node grants once caught up: %+v, %v; want n1's grant at epoch %d", rows, err, epoch)
	}
}
