package datapath_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// openFaulty opens a store in dir on a fault-injecting file layer; the
// caller closes it.
func openFaulty(t *testing.T, dir string, fs *datapathtest.Faults) *datapath.Store {
	t.Helper()
	opts := datapath.Options{Capacity: 1 << 30}
	if fs != nil {
		opts.OpenFile = fs.Open
	}
	s, err := datapath.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

// grantedVolume creates a 1 MiB volume and grants it to node-1.
func grantedVolume(t *testing.T, s *datapath.Store) (datapath.Volume, uint64) {
	t.Helper()
	v, err := s.CreateVolume("pvc-1", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Grant(v.ID, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	return v, e
}

// refusesIO fails the test unless every read, write and flush of the volume
// as (node-1, e) is refused with ErrVolumeFailed and a message that says
// what to do.
func refusesIO(t *testing.T, s *datapath.Store, id string, e uint64) {
	t.Helper()
	_, rerr := s.ReadAt(id, "node-1", e, 0, 512)
	for op, err := range map[string]error{
		"read":  rerr,
		"write": s.WriteAt(id, "node-1", e, 0, []byte("after")),
		"flush": s.Flush(id, "node-1", e),
	} {
		if !errors.Is(err, datapath.ErrVolumeFailed) {
			t.Fatalf("%s of the failed volume: %v; want ErrVolumeFailed", op, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "clear-failure "+id) || !strings.Contains(msg, "input/output error") {
			t.Fatalf("%s refusal does not say why and what to do: %s", op, msg)
		}
	}
}

// TestStore_Flush_FailureLatches: once a flush of a volume's file failed,
// the volume refuses every I/O although the next sync would succeed, after a
// restart too, until ClearFailure.
func TestStore_Flush_FailureLatches(t *testing.T) {
	dir, fs := t.TempDir(), datapathtest.NewFaults()
	s := openFaulty(t, dir, fs)
	v, e := grantedVolume(t, s)
	path := s.DataFile(v.ID)
	if err := s.WriteAt(v.ID, "node-1", e, 0, []byte("acknowledged")); err != nil {
		t.Fatal(err)
	}
	fs.FailNextSync(path)
	if err := s.Flush(v.ID, "node-1", e); !errors.Is(err, datapath.ErrVolumeFailed) {
		t.Fatalf("flush on a failing disk: %v; want ErrVolumeFailed", err)
	}
	syncs := fs.Syncs(path)
	refusesIO(t, s, v.ID, e) // the layer's next sync would succeed
	if got := fs.Syncs(path); got != syncs {
		t.Fatalf("a flush after the failure synced again (%d syncs, %d before): its success would prove nothing", got, syncs)
	}
	if _, err := s.ReadAt(v.ID, "node-2", 1, 0, 512); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("read by a node without a grant: %v; want ErrFenced", err)
	}
	failed, err := s.FailedVolumes()
	if err != nil || len(failed) != 1 || failed[0].VolumeID != v.ID || failed[0].Name != "pvc-1" || failed[0].Op != "flush" || failed[0].Since.IsZero() {
		t.Fatalf("FailedVolumes = %+v, %v; want pvc-1 failed at a flush", failed, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v (a volume failed before is not flushed again)", err)
	}

	s = openFaulty(t, dir, nil)
	defer s.Close()
	refusesIO(t, s, v.ID, e)
	if err := s.ClearFailure(v.ID); err != nil {
		t.Fatalf("ClearFailure: %v", err)
	}
	if err := s.WriteAt(v.ID, "node-1", e, 0, []byte("after")); err != nil {
		t.Fatalf("write after the operator cleared the failure: %v", err)
	}
	if err := s.Flush(v.ID, "node-1", e); err != nil {
		t.Fatalf("flush after the operator cleared the failure: %v", err)
	}
	if failed, err := s.FailedVolumes(); err != nil || len(failed) != 0 {
		t.Fatalf("FailedVolumes after clearing = %+v, %v; want none", failed, err)
	}
}

// TestStore_Flush_OverlappingSyncSeesTheFailure: the kernel reports a failed
// writeback to one of the syncs running together; a flush whose sync
// succeeded alongside a failing one does not return before it, and then
// reports the failure instead of a success that proves nothing.
func TestStore_Flush_OverlappingSyncSeesTheFailure(t *testing.T) {
	dir, fs := t.TempDir(), datapathtest.NewFaults()
	s := openFaulty(t, dir, fs)
	defer s.Close()
	v, e := grantedVolume(t, s)
	path := s.DataFile(v.ID)
	fs.FailNextSync(path)
	entered, release := fs.HoldNextSync(path)
	defer release()
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { first <- s.Flush(v.ID, "node-1", e) }()
	<-entered // the failing sync has begun
	go func() { second <- s.Flush(v.ID, "node-1", e) }()
	select {
	case err := <-second:
		t.Fatalf("a flush alongside a failing sync returned before it: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	for name, ch := range map[string]chan error{"failing": first, "overlapping": second} {
		if err := <-ch; !errors.Is(err, datapath.ErrVolumeFailed) {
			t.Fatalf("%s flush: %v; want ErrVolumeFailed", name, err)
		}
	}
}

// TestStore_ClearFailure_BadInput: an unknown volume and a volume that is not
// failed are refused with errors that say so, and change nothing.
func TestStore_ClearFailure_BadInput(t *testing.T) {
	s := openFaulty(t, t.TempDir(), nil)
	defer s.Close()
	v, e := grantedVolume(t, s)
	err := s.ClearFailure("vol-00000000000000ff")
	if !errors.Is(err, datapath.ErrNotFound) {
		t.Fatalf("unknown volume: %v; want ErrNotFound", err)
	}
	err = s.ClearFailure(v.ID)
	if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), "not failed") {
		t.Fatalf("volume that is not failed: %v; want ErrInvalidArgument saying it is not failed", err)
	}
	if err := s.ClearFailure("not an id"); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Fatalf("malformed id: %v; want ErrInvalidArgument", err)
	}
	if err := s.WriteAt(v.ID, "node-1", e, 0, []byte("x")); err != nil {
		t.Fatalf("write after refused clears: %v", err)
	}
}

// TestStore_Close_FailedSyncLatches: a sync that fails while the server
// stops is recorded too, and the next start refuses the volume's I/O.
func TestStore_Close_FailedSyncLatches(t *testing.T) {
	dir, fs := t.TempDir(), datapathtest.NewFaults()
	s := openFaulty(t, dir, fs)
	v, e := grantedVolume(t, s)
	if err := s.WriteAt(v.ID, "node-1", e, 0, []byte("unflushed")); err != nil {
		t.Fatal(err)
	}
	fs.FailNextSync(s.DataFile(v.ID))
	if err := s.Close(); !errors.Is(err, datapath.ErrVolumeFailed) {
		t.Fatalf("Close with a failing sync: %v; want ErrVolumeFailed", err)
	}
	s = openFaulty(t, dir, nil)
	defer s.Close()
	refusesIO(t, s, v.ID, e)
	if failed, _ := s.FailedVolumes(); len(failed) != 1 || failed[0].Op != "close" {
		t.Fatalf("FailedVolumes = %+v; want the volume, failed at close", failed)
	}
}

// TestStore_DeleteVolume_ForgetsFailure: deleting a failed volume deletes its
// failure with it.
func TestStore_DeleteVolume_ForgetsFailure(t *testing.T) {
	dir, fs := t.TempDir(), datapathtest.NewFaults()
	s := openFaulty(t, dir, fs)
	v, e := grantedVolume(t, s)
	fs.FailNextSync(s.DataFile(v.ID))
	if err := s.Flush(v.ID, "node-1", e); !errors.Is(err, datapath.ErrVolumeFailed) {
		t.Fatalf("flush: %v", err)
	}
	if err := s.Release(v.ID, "node-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(v.ID); err != nil {
		t.Fatalf("delete a failed volume: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openFaulty(t, dir, nil)
	defer s.Close()
	if failed, err := s.FailedVolumes(); err != nil || len(failed) != 0 {
		t.Fatalf("FailedVolumes after delete and restart = %+v, %v", failed, err)
	}
}

// BenchmarkStore_Flush_Parallel: 4 KiB writes each followed by a flush, from
// several goroutines on one volume, so the flushes of the volume, which run
// one at a time since a failed one must latch, contend.
func BenchmarkStore_Flush_Parallel(b *testing.B) {
	s, err := datapath.Open(b.TempDir(), datapath.Options{Capacity: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	v, err := s.CreateVolume("pvc-1", 64<<20, datapath.AccessRWO)
	if err != nil {
		b.Fatal(err)
	}
	e, err := s.Grant(v.ID, "node-1")
	if err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetBytes(4096)
	b.SetParallelism(2) // 2×GOMAXPROCS writers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		for pb.Next() {
			off := (next.Add(1) * 4096) % (64 << 20)
			if err := s.WriteAt(v.ID, "node-1", e, off, buf); err != nil {
				b.Error(err)
				return
			}
			if err := s.Flush(v.ID, "node-1", e); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
