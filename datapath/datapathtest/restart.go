package datapathtest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// member is what Restart needs to start a server of StartGroup again.
type member struct {
	i        int
	raft     raftstate.Config
	wrap     func(i int, g *raftstate.Group) datapath.Control
	capacity int64
}

// restartWait bounds how long Restart waits for the server's old ports.
const restartWait = 10 * time.Second

// Restart stops a server of StartGroup as a crash would (Stop: its store
// and group member closed, no leave announced, no leadership handed over;
// nothing is done when it is stopped already) and starts it again on its
// data directory, at its Raft and datapath addresses, with its Control
// from GroupConfig.Wrap again. Its member rejoins the group with its log,
// snapshots and term, as `vigil-datapath serve` does after a restart: its
// store opens the volumes of the state the member restored (its last
// snapshot's) and follows the log from there once the leader tells it
// what is committed. Restart returns once the store is open (Open waits a
// moment for it to catch up, not longer).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.member == nil {
		t.Fatal("datapathtest: Restart: only a server of StartGroup can be restarted")
	}
	s.Stop()
	m := s.member
	var g *raftstate.Group
	retry(t, "open the control group member "+m.raft.ID+" again", func() (err error) {
		g, err = raftstate.Open(m.raft)
		return err
	})
	var ctl datapath.Control = g
	if m.wrap != nil {
		if w := m.wrap(m.i, g); w != nil {
			ctl = w
		}
	}
	store, err := datapath.Open(s.Dir, datapath.Options{Capacity: m.capacity, Control: ctl})
	if err != nil {
		_ = g.Close()
		t.Fatalf("open datapath store %d again: %v", m.i, err)
	}
	srv, err := datapath.NewServer(store, s.auth)
	if err != nil {
		t.Fatalf("datapath server: %v", err)
	}
	var lis net.Listener
	retry(t, "listen at "+s.Addr+" again", func() (err error) {
		lis, err = net.Listen("tcp", s.Addr)
		return err
	})
	s.Store, s.Group = store, g
	s.stop = serve(t, srv, lis, store, g)
}

// retry calls fn until it succeeds or restartWait passes (a port the
// stopped server held may take a moment to be free again).
func retry(t testing.TB, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(restartWait)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("datapathtest: %s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitSnapshot waits, within ctx, until the server's control group member
// has a snapshot of its state at log index index or later on disk (the
// state a Restart restores before it catches up); the group's timing must
// let it snapshot (raftstate.Timing's SnapshotInterval and
// SnapshotThreshold).
func (s *Server) WaitSnapshot(ctx context.Context, index uint64) error {
	for {
		if got := s.lastSnapshot(); got >= index {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lastSnapshot is the log index of the member's newest complete snapshot
// on disk (named TERM-INDEX-MILLIS by the file snapshot store), 0 if none.
func (s *Server) lastSnapshot() uint64 {
	entries, _ := os.ReadDir(filepath.Join(s.Dir, "raft", "snapshots", "snapshots"))
	var last uint64
	for _, e := range entries {
		parts := strings.Split(e.Name(), "-")
		if !e.IsDir() || len(parts) != 3 || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if _, err := os.Stat(filepath.Join(s.Dir, "raft", "snapshots", "snapshots", e.Name(), "meta.json")); err != nil {
			continue
		}
		if i, err := strconv.ParseUint(parts[1], 10, 64); err == nil && i > last {
			last = i
		}
	}
	return last
}
