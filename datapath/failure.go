package datapath

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A failed flush is never forgotten. After fdatasync fails, the kernel may
// have dropped the dirty pages it could not write and marked them clean, so a
// later fdatasync succeeds although writes acknowledged before it are gone.
// The store therefore latches the first failure of a volume's flush: the
// volume is marked failed in memory at once and in datapath.db
// (failed/<id>), every later read, write and flush of it is refused with
// ErrVolumeFailed, saying why and what to do, and only ClearFailure (an
// operator, ClearFailureCommand) ends it.
// A sync that starts after a failed one sees the latch instead of a success
// that proves nothing (TestStore_Flush_FailureLatches), and a sync that ran
// alongside a failed one, and may have succeeded because the kernel reported
// the error to the other, waits for it and sees the latch too (volSyncs).

// failureRecord is a volume's latched flush failure.
type failureRecord struct {
	// Since is when the flush failed (server clock, UTC).
	Since time.Time `json:"since"`
	// Op is the operation whose flush failed: opFlush or opClose.
	Op string `json:"op"`
	// Error is the operating system's error.
	Error string `json:"error"`
}

// Operations whose flush may fail.
const (
	opFlush = "flush"
	opClose = "close"
)

// FailedVolume is a volume whose data file failed to flush (FailedVolumes).
type FailedVolume struct {
	VolumeID string
	// Name is the caller's name of the volume (for CSI: the PV name).
	Name string
	// Since is when the flush failed (server clock).
	Since time.Time
	// Op is the operation whose flush failed ("flush", or "close" when the
	// server stopped).
	Op string
	// Error is the operating system's error.
	Error string
}

// failedErr is the refusal of op on a failed volume. The caller holds v.mu.
func (v *volume) failedErr(op string) error {
	f := v.failed
	return fmt.Errorf("%w: %s volume %s (%s): flushing its data file to disk failed at %s (%s: %s), so writes acknowledged before then may not be on disk; "+
		"every read, write and flush of it is refused until an operator checks the disk and the volume's data, then runs `%s %s`",
		ErrVolumeFailed, op, v.rec.ID, v.rec.Name, f.Since.Format(time.RFC3339), f.Op, f.Error, ClearFailureCommand, v.rec.ID)
}

// volSyncs lets a volume's syncs run side by side, as the kernel likes them,
// yet keeps a failure from going unnoticed: the kernel reports a failed
// writeback once per open file, so of two syncs running together one may get
// the error and the other success. A sync that succeeds therefore waits for
// every sync that began before it ended, and then looks at the latch.
type volSyncs struct {
	mu      sync.Mutex
	ended   *sync.Cond      // broadcast when a sync ends
	next    uint64          // ticket of the next sync
	running map[uint64]bool // tickets of the syncs running
}

// syncVolume makes v's acknowledged writes durable (see volSyncs) and
// latches a failure. op names the caller (opFlush, opClose).
func (s *Store) syncVolume(v *volume, op string) error {
	q := &v.syncs
	q.mu.Lock()
	if q.running == nil {
		q.running, q.ended = map[uint64]bool{}, sync.NewCond(&q.mu)
	}
	ticket := q.next
	q.next++
	q.running[ticket] = true
	q.mu.Unlock()

	err := s.syncOnce(v, op) // a failure is latched before the sync ends

	q.mu.Lock()
	delete(q.running, ticket)
	q.ended.Broadcast()
	for limit := q.next; err == nil && runningBelow(q.running, limit); {
		q.ended.Wait()
	}
	q.mu.Unlock()
	if err != nil {
		return err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.failed != nil {
		return v.failedErr(op) // a sync alongside this one took the error
	}
	return nil
}

func runningBelow(running map[uint64]bool, limit uint64) bool {
	for t := range running {
		if t < limit {
			return true
		}
	}
	return false
}

// syncOnce is one sync of v's file: refused at once if v is failed, latched
// if it fails.
func (s *Store) syncOnce(v *volume, op string) error {
	v.mu.RLock()
	if v.failed != nil {
		defer v.mu.RUnlock()
		return v.failedErr(op)
	}
	v.mu.RUnlock()
	err := v.file.Datasync()
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("%s volume %s: %w", op, v.rec.ID, fileErr(err)) // deleted or closed under the flush
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.deleted && op != opClose {
		return fmt.Errorf("%w: %s volume %s: deleted under the flush (%v)", ErrNotFound, op, v.rec.ID, err)
	}
	s.latchLocked(v, op, err)
	return v.failedErr(op)
}

// latchLocked marks v failed, in memory first (so I/O is refused from now
// on) and then in datapath.db. The caller holds v.mu for writing. If the
// record cannot be written either, the failure holds in memory until the
// server stops, and the log says so.
func (s *Store) latchLocked(v *volume, op string, cause error) {
	if v.failed != nil {
		return
	}
	f := failureRecord{Since: s.now().UTC(), Op: op, Error: cause.Error()}
	v.failed = &f
	s.log.Error("datapath: a flush of a volume's data file failed: the volume is failed and refuses I/O until an operator clears it",
		"volume", v.rec.ID, "name", v.rec.Name, "op", op, "err", cause)
	if err := s.commits.update(func(tx *bolt.Tx) error { return putFailure(tx, v.rec.ID, f) }); err != nil {
		s.log.Error("datapath: the volume's failure could not be recorded in datapath.db either: it holds only until this server stops",
			"volume", v.rec.ID, "err", err)
	}
}

// FailedVolumes lists the failed volumes, sorted by id.
func (s *Store) FailedVolumes() ([]FailedVolume, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	out := []FailedVolume{}
	for _, v := range s.vols {
		v.mu.RLock()
		if f := v.failed; f != nil && !v.deleted {
			out = append(out, FailedVolume{VolumeID: v.rec.ID, Name: v.rec.Name, Since: f.Since, Op: f.Op, Error: f.Error})
		}
		v.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolumeID < out[j].VolumeID })
	return out, nil
}

// ClearFailure ends a volume's failure: an operator checked the disk and
// the volume's data and takes what is there. I/O is accepted again once the
// change is durable. A volume that is not failed is refused with
// ErrInvalidArgument, and nothing changes.
func (s *Store) ClearFailure(volumeID string) error {
	v, err := s.lookupHeld(volumeID)
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.deleted {
		return fmt.Errorf("%w: volume %s", ErrNotFound, volumeID)
	}
	if v.failed == nil {
		return fmt.Errorf("%w: clear failure of volume %s (%s): the volume is not failed, so there is nothing to clear; only a volume whose flush failed refuses I/O and needs it",
			ErrInvalidArgument, volumeID, v.rec.Name)
	}
	if err := s.commits.update(func(tx *bolt.Tx) error { return deleteFailure(tx, volumeID) }); err != nil {
		return fmt.Errorf("clear failure of volume %s: %w", volumeID, err)
	}
	s.log.Warn("datapath: an operator cleared a volume's failure; it accepts I/O again",
		"volume", volumeID, "name", v.rec.Name, "failedSince", v.failed.Since, "err", v.failed.Error)
	v.failed = nil
	return nil
}
