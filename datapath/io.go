package datapath

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// WriteAt writes p at off on the volume as (node, epoch), at member epoch 0
// (WriteAtMember). The epoch check and the write happen under the volume's
// read lock, so a concurrent Fence either waits for this write or makes it
// fail with ErrFenced before anything is written.
func (s *Store) WriteAt(volumeID, node string, epoch uint64, off int64, p []byte) error {
	return s.WriteAtMember(volumeID, node, epoch, 0, off, p)
}

// WriteAtMember is WriteAt carrying the member epoch of the volume's
// replica set that the writer holds: a write at any other member epoch than
// the one this server applied is refused with ErrStaleMemberEpoch, after
// the (node, epoch) check and before anything is written. A volume of one
// copy is at member epoch 0 for good, so WriteAt, and every client from
// before replica sets, writes it as before. Every copy of a replicated
// volume will check each write so (docs/architecture.md, "Replicated
// volumes"); both channels carry it (an absent one is 0).
func (s *Store) WriteAtMember(volumeID, node string, epoch, member uint64, off int64, p []byte) error {
	return s.write(volumeID, node, epoch, member, off, int64(len(p)), func(f File) error {
		_, err := f.WriteAt(p, off)
		return err
	})
}

// writeVec is WriteAtMember for a payload in pieces (gRPC's receive
// buffers), written with pwritev.
func (s *Store) writeVec(volumeID, node string, epoch, member uint64, off int64, iov [][]byte) error {
	var n int64
	for _, p := range iov {
		n += int64(len(p))
	}
	return s.write(volumeID, node, epoch, member, off, n, func(f File) error { return pwritev(f, iov, off) })
}

func (s *Store) write(volumeID, node string, epoch, member uint64, off, n int64, do func(File) error) error {
	if err := validNode(node); err != nil {
		return err
	}
	v, err := s.lookupHeld(volumeID)
	if err != nil {
		return err
	}
	var timer *time.Timer
	for {
		ahead, err := s.writeOnce(v, node, epoch, member, off, n, do)
		if ahead == nil {
			return err
		}
		if timer == nil {
			timer = time.NewTimer(memberEpochWait)
			defer timer.Stop()
		}
		select {
		case <-ahead: // a new member epoch applied: check again
		case <-timer.C:
			return fmt.Errorf("%w (waited %s for this server to apply it)", err, memberEpochWait)
		}
	}
}

// writeOnce checks and writes under v's read lock. A write at a member
// epoch newer than this server applied is refused with ahead set, closed
// once this server applies another: the caller may wait for it and try
// again (never under the lock, which the apply takes).
func (s *Store) writeOnce(v *volume, node string, epoch, member uint64, off, n int64, do func(File) error) (ahead <-chan struct{}, err error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if err := v.checkWrite(node, epoch); err != nil {
		return v.aheadLocked(epoch, member), err
	}
	if err := v.checkMember("write", member); err != nil {
		return v.aheadLocked(epoch, member), err
	}
	if err := validRange("write", v.rec.ID, off, n, v.rec.Size); err != nil {
		return nil, err
	}
	// The regions this write touches are marked, durably, in the map of
	// every replica out of sync before the write is done (dirtytrack.go).
	if err := v.markDirtyLocked(off, n); err != nil {
		return nil, fmt.Errorf("write volume %s at %d: %w", v.rec.ID, off, err)
	}
	if err := do(v.file); err != nil {
		return nil, fmt.Errorf("write volume %s at %d: %w", v.rec.ID, off, fileErr(err))
	}
	s.act.io(v.rec.ID, node, s.now())
	return nil, nil
}

// ReadAt reads n bytes at off on the volume as (node, epoch).
func (s *Store) ReadAt(volumeID, node string, epoch uint64, off int64, n int) ([]byte, error) {
	if err := validNode(node); err != nil {
		return nil, err
	}
	v, err := s.lookupHeld(volumeID)
	if err != nil {
		return nil, err
	}
	buf, inSync, member, err := s.readOnce(v, node, epoch, off, n)
	if inSync != nil {
		return nil, s.errNotInSync("read", volumeID, member, inSync) // outside v.mu: it reads the group's members
	}
	return buf, err
}

// readOnce checks and reads under v's read lock; inSync is set (nothing
// read) when this server's replica of v is not in sync at the member
// epoch it applied.
func (s *Store) readOnce(v *volume, node string, epoch uint64, off int64, n int) (buf []byte, inSync []string, member uint64, err error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if err := v.checkIO("read", node, epoch); err != nil {
		return nil, nil, 0, err
	}
	if in := s.notInSyncLocked(v); in != nil {
		return nil, in, v.memberEpoch, nil
	}
	if err := validRange("read", v.rec.ID, off, int64(n), v.rec.Size); err != nil {
		return nil, nil, 0, err
	}
	buf = make([]byte, n)
	if _, err := v.file.ReadAt(buf, off); err != nil {
		return nil, nil, 0, fmt.Errorf("read volume %s at %d: %w", v.rec.ID, off, fileErr(err))
	}
	s.act.io(v.rec.ID, node, s.now())
	return buf, nil, 0, nil
}

// Flush makes the volume's acknowledged writes durable. The (node, epoch) check
// happens under the read lock; the sync itself runs outside it, so a Fence does
// not wait for a disk flush (a flush writes nothing new). A failed sync marks
// the volume failed for good (failure.go): this and every later I/O on it
// gets ErrVolumeFailed.
func (s *Store) Flush(volumeID, node string, epoch uint64) error {
	if err := validNode(node); err != nil {
		return err
	}
	v, err := s.lookupHeld(volumeID)
	if err != nil {
		return err
	}
	v.mu.RLock()
	err = v.checkIO(opFlush, node, epoch)
	v.mu.RUnlock()
	if err != nil {
		return err
	}
	if err := s.syncVolume(v, opFlush); err != nil {
		return err
	}
	s.act.io(volumeID, node, s.now())
	return nil
}

// fileErr turns "file already closed" (the volume was deleted or the store
// closed under a flush) into ErrNotFound, and a full disk into ErrNoSpace.
func fileErr(err error) error {
	switch {
	case errors.Is(err, os.ErrClosed):
		return fmt.Errorf("%w: volume is gone: %v", ErrNotFound, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EFBIG), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: the data directory's file system is full: %v", ErrNoSpace, err)
	}
	return err
}

// Heartbeat records that node is alive, and ends a graceful stop it announced
// with Leave (see there). It never waits for a token check or a Raft apply:
// with a Control the end of the stop is committed in the background.
func (s *Store) Heartbeat(node string) error {
	if err := validNode(node); err != nil {
		return err
	}
	now := s.now()
	s.act.heartbeat(node, now)
	s.clearLeave(node, now)
	return nil
}

// MaxConnectivityWindow is the longest window Connectivity accepts.
const MaxConnectivityWindow = 24 * time.Hour

// Connectivity answers whether node is connected and did I/O on volumeID within
// the window (see client.Connectivity).
func (s *Store) Connectivity(node, volumeID string, within time.Duration) (Connectivity, error) {
	if err := validNode(node); err != nil {
		return Connectivity{}, err
	}
	if within <= 0 || within > MaxConnectivityWindow {
		return Connectivity{}, fmt.Errorf("%w: connectivity window %s; allowed are more than 0 up to %s", ErrInvalidArgument, within, MaxConnectivityWindow)
	}
	if volumeID != "" {
		if _, err := s.lookupHeld(volumeID); err != nil {
			return Connectivity{}, err
		}
	}
	now := s.now()
	c := Connectivity{Node: node, VolumeID: volumeID, Window: within, Now: now.UTC()}
	recent := func(t time.Time) bool { return !t.IsZero() && now.Sub(t) <= within }
	c.LastHeartbeat = s.act.lastHeartbeat(node)
	anyIO := s.act.lastAnyIO(node)
	if volumeID != "" {
		c.LastIO = s.act.lastIO(volumeID, node)
		c.IOActive = recent(c.LastIO)
	}
	c.Connected = recent(c.LastHeartbeat) || recent(anyIO)
	return c, nil
}

// activity keeps, in memory, the last I/O per (volume, node) and per node, and
// the last heartbeat per node. Updates are lock-free after the first one for a
// key. It is not persisted: it describes the current server process's view, and
// a node must heartbeat again after a server restart to count as connected.
type activity struct {
	ioByVolume sync.Map // ioKey -> *atomic.Int64 (Unix ns)
	ioByNode   sync.Map // node -> *atomic.Int64
	heartbeats sync.Map // node -> *atomic.Int64
}

type ioKey struct{ volume, node string }

func stamp(m *sync.Map, key any, t time.Time) {
	ns := t.UnixNano()
	if v, ok := m.Load(key); ok {
		storeMax(v.(*atomic.Int64), ns)
		return
	}
	v, _ := m.LoadOrStore(key, new(atomic.Int64))
	storeMax(v.(*atomic.Int64), ns)
}

func storeMax(a *atomic.Int64, ns int64) {
	for {
		old := a.Load()
		if ns <= old || a.CompareAndSwap(old, ns) {
			return
		}
	}
}

func load(m *sync.Map, key any) time.Time {
	v, ok := m.Load(key)
	if !ok {
		return time.Time{}
	}
	return time.Unix(0, v.(*atomic.Int64).Load()).UTC()
}

func (a *activity) io(volume, node string, t time.Time) {
	stamp(&a.ioByVolume, ioKey{volume, node}, t)
	stamp(&a.ioByNode, node, t)
}

func (a *activity) heartbeat(node string, t time.Time) { stamp(&a.heartbeats, node, t) }

func (a *activity) lastHeartbeat(node string) time.Time { return load(&a.heartbeats, node) }
func (a *activity) lastAnyIO(node string) time.Time     { return load(&a.ioByNode, node) }
func (a *activity) lastIO(volume, node string) time.Time {
	return load(&a.ioByVolume, ioKey{volume, node})
}
