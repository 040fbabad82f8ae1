package datapath

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestWriteSessions_OpenWaitsForWritesInProgress: a write that passed the
// generation check before a new generation was opened ends before open
// returns, so nothing of an older generation lands after the client has the
// new one.
func TestWriteSessions_OpenWaitsForWritesInProgress(t *testing.T) {
	var s writeSessions
	now := time.Now()
	gen := s.open("v", "n", 3, now)
	inWrite, finish := make(chan struct{}), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		wrote <- s.write("v", "n", 3, gen, func() error { close(inWrite); <-finish; return nil })
	}()
	<-inWrite
	opened := make(chan uint64, 1)
	go func() { opened <- s.open("v", "n", 3, now) }()
	select {
	case <-opened:
		t.Fatal("open returned while a write of the older generation was in progress")
	case <-time.After(100 * time.Millisecond):
	}
	close(finish)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	next := <-opened
	if next <= gen {
		t.Fatalf("generation %d after %d; want it larger", next, gen)
	}
	err := s.write("v", "n", 3, gen, func() error { t.Fatal("a stale write ran"); return nil })
	if !errors.Is(err, ErrStaleSession) {
		t.Fatalf("write under the older generation: %v; want ErrStaleSession", err)
	}
	if err := s.write("v", "n", 3, next, func() error { return nil }); err != nil {
		t.Fatalf("write under the current generation: %v", err)
	}
}

func TestWriteSessions_Write_RefusesAllButTheCurrentGeneration(t *testing.T) {
	var s writeSessions
	now := time.Now()
	gen := s.open("v", "n", 3, now)
	other := s.open("v", "m", 3, now)
	cases := []struct {
		name           string
		volumeID, node string
		epoch, gen     uint64
		wantErrStale   bool
	}{
		{"current", "v", "n", 3, gen, false},
		{"generation 0", "v", "n", 3, 0, true},
		{"another node's generation", "v", "n", 3, other, true},
		{"another epoch", "v", "n", 4, gen, true},
		{"no session", "w", "n", 3, gen, true},
	}
	for _, c := range cases {
		ran := false
		err := s.write(c.volumeID, c.node, c.epoch, c.gen, func() error { ran = true; return nil })
		if c.wantErrStale != errors.Is(err, ErrStaleSession) || ran == c.wantErrStale {
			t.Errorf("%s: err %v, ran %v; want stale %v", c.name, err, ran, c.wantErrStale)
		}
	}
}

// TestWriteSessions_SweepForgetsIdleSessions: a session without a write for
// two sweeps is forgotten (its writes are refused, a new open works); a
// session in use is kept.
func TestWriteSessions_SweepForgetsIdleSessions(t *testing.T) {
	var s writeSessions
	t0 := time.Now()
	idle := s.open("v", "idle", 1, t0)
	busy := s.open("v", "busy", 1, t0)
	noop := func() error { return nil }
	for i := 1; i <= 2; i++ {
		if err := s.write("v", "busy", 1, busy, noop); err != nil {
			t.Fatal(err)
		}
		s.open("v", "other", 1, t0.Add(time.Duration(i)*sessionSweepEvery))
	}
	if n := s.len(); n != 2 {
		t.Fatalf("%d sessions after two sweeps; want 2 (busy, other)", n)
	}
	if err := s.write("v", "idle", 1, idle, noop); !errors.Is(err, ErrStaleSession) {
		t.Fatalf("write to a forgotten session: %v; want ErrStaleSession", err)
	}
	if err := s.write("v", "busy", 1, busy, noop); err != nil {
		t.Fatalf("write to a session in use: %v", err)
	}
	again := s.open("v", "idle", 1, t0.Add(2*sessionSweepEvery))
	if err := s.write("v", "idle", 1, again, noop); err != nil || again <= idle {
		t.Fatalf("reopened session: generation %d (was %d), %v", again, idle, err)
	}
}

// BenchmarkWriteSessions_Write is what the session check adds to each bulk
// write on the server (the table lookup and the session's read lock), with
// writers on every core.
func BenchmarkWriteSessions_Write(b *testing.B) {
	var s writeSessions
	gen := s.open("vol-0123456789abcdef", "node-a", 3, time.Now())
	noop := func() error { return nil }
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.write("vol-0123456789abcdef", "node-a", 3, gen, noop); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStore_WriteAt_Session compares, on one store, a volume write as
// the bulk channel's server makes it (under the write session's check and
// read lock) with the same write without a session, at 4 KiB (where the
// check weighs most) and 1 MiB, with writers on every core. The ordering of
// write sessions must not cost more than 10 % of the write's throughput.
func BenchmarkStore_WriteAt_Session(b *testing.B) {
	s := openTest(b, b.TempDir())
	v := mustCreate(b, s, "bench", 64<<20, AccessRWO)
	epoch, err := s.Grant(v.ID, "node-a")
	if err != nil {
		b.Fatal(err)
	}
	var sessions writeSessions
	gen := sessions.open(v.ID, "node-a", epoch, time.Now())
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, session := range []bool{false, true} {
			name := fmt.Sprintf("size=%dKiB/session=%v", size>>10, session)
			b.Run(name, func(b *testing.B) {
				p := make([]byte, size)
				var next atomic.Int64
				b.SetBytes(int64(size))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						off := next.Add(1) % (64 << 20 / int64(size)) * int64(size)
						write := func() error { return s.WriteAt(v.ID, "node-a", epoch, off, p) }
						var err error
						if session {
							err = sessions.write(v.ID, "node-a", epoch, gen, write)
						} else {
							err = write()
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
