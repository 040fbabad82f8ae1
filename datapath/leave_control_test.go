package datapath_test

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// stuckClear holds every ClearLeave of the group until released, as a
// commit held up by a slow disk or a busy apply would.
type stuckClear struct {
	*raftstate.Group
	release chan struct{}
}

func (s stuckClear) ClearLeave(ctx context.Context, node string) error {
	<-s.release
	return s.Group.ClearLeave(ctx, node)
}

// TestStoreControl_HeartbeatDoesNotWaitForTheClearOfItsLeave: the heartbeat
// that ends a node's announced stop returns, and is in the node report, while
// the clear of the stop is still being committed; the clear lands once the
// group commits it.
func TestStoreControl_HeartbeatDoesNotWaitForTheClearOfItsLeave(t *testing.T) {
	release := make(chan struct{})
	s, closeAll := openControlled(t, t.TempDir(), datapath.Options{Capacity: 1 << 30}, func(g *raftstate.Group) datapath.Control {
		return stuckClear{Group: g, release: release}
	})
	defer closeAll()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	_, err := s.Leave("n1", time.Minute)
	must(t, err)
	time.Sleep(datapath.LeaveSettle + 100*time.Millisecond)
	for i := 0; i < 3; i++ {
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- s.Heartbeat("n1") }()
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(2 * time.Second):
			t.Fatalf("heartbeat %d still waits after 2s on the clear of the node's announced stop (a Raft apply)", i)
		}
		r, err := s.Nodes()
		must(t, err)
		if len(r.Nodes) != 1 || r.Nodes[0].LastHeartbeat.Before(start) || r.Nodes[0].LeavingUntil.IsZero() {
			t.Fatalf("node report while the clear waits: %+v; want n1's heartbeat, its stop not cleared yet", r.Nodes)
		}
	}
	close(release)
	released = true
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := s.Nodes()
		must(t, err)
		if len(r.Nodes) == 1 && r.Nodes[0].LeavingUntil.IsZero() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node report 5s after the clear was released: %+v; want n1's stop cleared", r.Nodes)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
