package datapath

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"testing"
	"time"
)

func TestStore_WriteAt_BadRangesChangeNothing(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "a", 64<<10, AccessRWO)
	e, _ := s.Grant(v.ID, "n1")
	before, _ := os.ReadFile(s.imgPath(v.ID))
	cases := []struct {
		off  int64
		n    int
		want error
	}{
		{-1, 1, ErrOutOfRange},
		{64 << 10, 1, ErrOutOfRange},
		{64<<10 - 1, 2, ErrOutOfRange},
		{1 << 62, 4096, ErrOutOfRange},
		{0, MaxIOSize + 1, ErrInvalidArgument},
	}
	for _, c := range cases {
		err := s.WriteAt(v.ID, "n1", e, c.off, bytes.Repeat([]byte{0xff}, c.n))
		if !errors.Is(err, c.want) {
			t.Errorf("WriteAt(off %d, %d bytes) = %v, want %v", c.off, c.n, err, c.want)
		}
		if _, err := s.ReadAt(v.ID, "n1", e, c.off, c.n); !errors.Is(err, c.want) {
			t.Errorf("ReadAt(off %d, %d bytes) = %v, want %v", c.off, c.n, err, c.want)
		}
	}
	if err := s.WriteAt("vol-00000000000000ff", "n1", e, 0, []byte("x")); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown volume: %v, want ErrNotFound", err)
	}
	if err := s.WriteAt(v.ID, "", e, 0, []byte("x")); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty node: %v, want ErrInvalidArgument", err)
	}
	after, _ := os.ReadFile(s.imgPath(v.ID))
	if !bytes.Equal(before, after) {
		t.Fatal("refused writes changed the data file")
	}
	// The last byte and a zero-length write at the end are fine.
	if err := s.WriteAt(v.ID, "n1", e, 64<<10-1, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAt(v.ID, "n1", e, 64<<10, nil); err != nil {
		t.Fatal(err)
	}
}

func TestStore_Flush_Fenced(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "a", 4096, AccessRWO)
	e, _ := s.Grant(v.ID, "n1")
	if err := s.Flush(v.ID, "n1", e); err != nil {
		t.Fatal(err)
	}
	_, _ = s.Fence(v.ID, "n1")
	if err := s.Flush(v.ID, "n1", e); !errors.Is(err, ErrFenced) {
		t.Fatalf("flush after fence: %v, want ErrFenced", err)
	}
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func TestStore_Connectivity_HeartbeatAndIO(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := Open(t.TempDir(), Options{Capacity: 1 << 30, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := mustCreate(t, s, "a", 4096, AccessRWO)
	e, _ := s.Grant(v.ID, "n1")

	c, _ := s.Connectivity("n1", v.ID, 5*time.Second)
	if c.Connected || c.IOActive || !c.LastHeartbeat.IsZero() {
		t.Fatalf("before anything: %+v", c)
	}
	_ = s.Heartbeat("n1")
	clk.add(2 * time.Second)
	c, _ = s.Connectivity("n1", v.ID, 5*time.Second)
	if !c.Connected || c.IOActive {
		t.Fatalf("after heartbeat: %+v", c)
	}
	_ = s.WriteAt(v.ID, "n1", e, 0, []byte("x"))
	clk.add(4 * time.Second) // heartbeat 6s old, I/O 4s old
	c, _ = s.Connectivity("n1", v.ID, 5*time.Second)
	if !c.Connected || !c.IOActive || c.LastIO.IsZero() {
		t.Fatalf("after I/O: %+v", c)
	}
	clk.add(2 * time.Second)
	c, _ = s.Connectivity("n1", v.ID, 5*time.Second)
	if c.Connected || c.IOActive {
		t.Fatalf("after 6s of silence: %+v", c)
	}
	c, _ = s.Connectivity("n1", "", time.Minute)
	if !c.Connected || c.IOActive {
		t.Fatalf("node only, 1m window: %+v", c)
	}
	if _, err := s.Connectivity("n1", v.ID, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("zero window: %v", err)
	}
	if _, err := s.Connectivity("n1", "vol-00000000000000ff", time.Second); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
}
