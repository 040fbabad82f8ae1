package datapathtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// GroupTiming is the control group timing of StartGroup: a lost leader is
// replaced within a few hundred milliseconds.
var GroupTiming = raftstate.Timing{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
	LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: 5 * time.Millisecond}

// StartGroup starts n plaintext datapath servers on loopback whose stores
// keep their control state in one Raft group over loopback TCP: server 0
// bootstraps it and leads, the others join it, each with its id
// (datapath-0, ...), its data directory and its datapath address recorded.
// They share their tokens. Each is stopped at the test's end (or by Stop).
func StartGroup(t testing.TB, n int) []*Server {
	t.Helper()
	return StartGroupTimed(t, n, GroupTiming)
}

// StartGroupTimed is StartGroup with the group's timing (benchmarks on a
// loaded machine take raftstate.DefaultTiming, whose leader is not deposed
// by a scheduling hiccup of 100 ms).
func StartGroupTimed(t testing.TB, n int, timing raftstate.Timing) []*Server {
	t.Helper()
	return StartGroupWrapped(t, n, timing, nil)
}

// StartGroupWrapped is StartGroupTimed with each store's Control given by
// wrap (server i's group member; nil wrap, or a nil answer, is the member
// itself), so a test can slow down or hold a server's apply.
func StartGroupWrapped(t testing.TB, n int, timing raftstate.Timing, wrap func(i int, g *raftstate.Group) datapath.Control) []*Server {
	t.Helper()
	return StartGroupWith(t, n, GroupConfig{Timing: timing, Wrap: wrap})
}

// GroupConfig says how StartGroupWith runs the group.
type GroupConfig struct {
	Timing raftstate.Timing
	// Wrap, when set, gives server i's Control (a nil answer: the member).
	Wrap func(i int, g *raftstate.Group) datapath.Control
	// Capacity, when set, is server i's capacity (default 1 TiB); leader is
	// the server that leads when the stores open.
	Capacity func(i, leader int) int64
	// Bootstrap starts the n servers at once with one peer list that gives
	// each one's Raft and datapath address (as `serve --raft-peers
	// ID=RAFT@DATAPATH` on n nodes), instead of server 0 alone adding the
	// others; any of them may lead.
	Bootstrap bool
	// BootID, when set, is the boot id server i reports
	// (datapath.WithBootID); none otherwise.
	BootID func(i int) string
}

// StartGroupWith is StartGroup as cfg says.
func StartGroupWith(t testing.TB, n int, cfg GroupConfig) []*Server {
	t.Helper()
	timing, wrap := cfg.Timing, cfg.Wrap
	nt := newNodeTokens()
	out := make([]*Server, n)
	lis := make([]net.Listener, n)
	groups := make([]*raftstate.Group, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range out {
		var err error
		if lis[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatalf("listen: %v", err)
		}
		out[i] = &Server{Token: nt.controller, Dir: t.TempDir(), auth: nt, Addr: lis[i].Addr().String()}
	}
	if cfg.Bootstrap {
		startTogether(t, ctx, out, groups, timing)
	} else {
		startGrown(t, ctx, out, groups, timing)
	}
	leader := -1
	for i, g := range groups {
		if g.IsLeader() {
			leader = i
		}
	}
	for i, s := range out {
		var ctl datapath.Control = groups[i]
		if wrap != nil {
			if w := wrap(i, groups[i]); w != nil {
				ctl = w
			}
		}
		capacity := int64(1 << 40)
		if cfg.Capacity != nil {
			capacity = cfg.Capacity(i, leader)
		}
		store, err := datapath.Open(s.Dir, datapath.Options{Capacity: capacity, Control: ctl})
		if err != nil {
			t.Fatalf("open datapath store %d: %v", i, err)
		}
		var opts []datapath.ServerOption
		if cfg.BootID != nil {
			opts = append(opts, datapath.WithBootID(cfg.BootID(i)))
		}
		srv, err := datapath.NewServer(store, nt, opts...)
		if err != nil {
			t.Fatalf("datapath server: %v", err)
		}
		s.Store, s.Group = store, groups[i]
		s.stop = serve(t, srv, lis[i], store, groups[i])
		s.member = &member{i: i, raft: raftstate.Config{ID: groups[i].Self(), Dir: s.Dir + "/raft", Address: groups[i].Address(), Timing: timing, LogOutput: io.Discard},
			wrap: wrap, capacity: capacity}
	}
	return out
}

// startGrown starts server 0's group member alone, and has it add the others.
func startGrown(t testing.TB, ctx context.Context, out []*Server, groups []*raftstate.Group, timing raftstate.Timing) {
	t.Helper()
	for i := range out {
		var err error
		id := fmt.Sprintf("datapath-%d", i)
		cfg := raftstate.Config{ID: id, Dir: out[i].Dir + "/raft", Address: "127.0.0.1:0", Timing: timing, LogOutput: io.Discard}
		self := raftstate.Server{ID: id, DatapathAddress: out[i].Addr}
		if i == 0 {
			groups[i], err = raftstate.Start(ctx, cfg, self, nil)
		} else {
			groups[i], err = raftstate.Open(cfg)
			if err == nil {
				self.RaftAddress = groups[i].Address()
				err = addAtLeader(ctx, groups[:i], self)
			}
		}
		if err != nil {
			t.Fatalf("control group member %s: %v", id, err)
		}
	}
}

// addAtLeader adds self at the member of members that leads, again at the
// next leader when the one asked loses its leadership meanwhile (the short
// timings of the tests on a loaded machine), until ctx ends.
func addAtLeader(ctx context.Context, members []*raftstate.Group, self raftstate.Server) error {
	for {
		var err error
		for _, g := range members {
			if g.IsLeader() {
				if err = g.AddServer(ctx, self); err == nil {
					return nil
				}
			}
		}
		if err == nil {
			err = errors.New("no member leads")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("add-server %s: %w (last: %v)", self.ID, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startTogether starts every server's group member at once with one peer
// list of them all, their datapath addresses included.
func startTogether(t testing.TB, ctx context.Context, out []*Server, groups []*raftstate.Group, timing raftstate.Timing) {
	t.Helper()
	peers := make([]raftstate.Server, len(out))
	for i := range out {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		peers[i] = raftstate.Server{ID: fmt.Sprintf("datapath-%d", i), RaftAddress: l.Addr().String(), DatapathAddress: out[i].Addr}
		_ = l.Close() // a free port now, for the member to listen on
	}
	errs := make([]error, len(out))
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := raftstate.Config{ID: peers[i].ID, Dir: out[i].Dir + "/raft", Address: peers[i].RaftAddress, Timing: timing, LogOutput: io.Discard}
			groups[i], errs[i] = raftstate.Start(ctx, cfg, peers[i], peers)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, g := range groups {
				if g != nil {
					_ = g.Close()
				}
			}
			t.Fatalf("control group member %s: %v", peers[i].ID, err)
		}
	}
}
