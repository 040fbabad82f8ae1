package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"

	"github.com/vigil-storage/vigil/internal/boltformat"
)

const (
	idPrefix   = "vol-"
	dbFile     = "datapath.db"
	volumesDir = "volumes"
	imgSuffix  = ".img"
)

// Options configure a Store.
type Options struct {
	// Capacity is the total bytes the store may provision (the sum of volume
	// sizes). 0 means the size of the file system holding the data directory.
	Capacity int64
	// OverProvisioningPercentage is how much of Capacity volume sizes may add
	// up to: 100 (or 0, the default) reserves each volume's full size on disk
	// at creation (fallocate), so a write inside a volume never meets a full
	// disk; above 100 (at most MaxOverProvisioningPercentage) volumes are thin
	// files and a full disk fails writes with ErrNoSpace.
	OverProvisioningPercentage int
	// Now is the clock (default time.Now); tests pass a fake one.
	Now func() time.Time
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
	// OpenFile opens volumes' data files (default OpenOSFile); tests pass a
	// fault-injecting layer.
	OpenFile OpenFileFunc
	// Control, when set, holds the control state (volumes, attachment
	// tables and epochs, announced stops) instead of datapath.db (see
	// control.go); the Store opens the volumes whose data the control state
	// places on this server (Control.Self). A datapath.db of the release
	// before is imported into it at the first Open. Its applied state must
	// be current when Open is called (the server waits for the group).
	Control Control
}

// Store is the volume server's state: volumes (one sparse file each), the
// attachment table with epochs (bbolt) and the activity record (memory). It is
// safe for concurrent use. Server exposes it over gRPC.
type Store struct {
	dir      string
	db       *bolt.DB
	commits  groupCommit // Grant, Fence and Release commit through it
	now      func() time.Time
	log      *slog.Logger
	capacity int64
	overPct  int // OverProvisioningPercentage; 100: volumes reserved on disk
	open     OpenFileFunc
	// ctl, when set, holds the control state (control.go).
	ctl Control
	// stopSweep ends the sweep of abandoned data files (abandoned.go) and
	// the catching up after a start (caughtup.go).
	stopSweep chan struct{}
	// caughtUp: the server settled with the control group since Open.
	caughtUp atomic.Bool

	// mu guards vols, names, closed and prov. Every I/O holds it for
	// reading (lookup), so it is held for writing only briefly: never across
	// a file operation or a commit (provision.go).
	mu     sync.RWMutex
	vols   map[string]*volume
	names  map[string]string
	closed bool
	prov   provisioning // creates and deletes in flight (provision.go)
	act    activity
	index  nodeIndex // node -> its volumes and live grants (nodes.go)
	leaves leaves    // graceful stops announced with Leave (leave.go)
	// sessions order each (volume, node)'s writes, over both channels
	// (writesession.go).
	sessions writeSessions
	// started is when Open ran: activity before it is unknown.
	started time.Time
}

// volume is one open volume. mu orders I/O against the calls that revoke a
// node: writes and reads hold it for reading while they check the (node, epoch)
// and touch the file; Fence, Release and Delete hold it for writing. So when
// Fence returns, no write that passed the check is still in flight, and every
// later write sees the fence.
type volume struct {
	mu      sync.RWMutex
	rec     volumeRecord
	attach  map[string]attachmentRecord
	file    File
	deleted bool
	// failed, when set, is the latched failure of a flush: every I/O is
	// refused (failure.go).
	failed *failureRecord
	// syncs tracks the volume's syncs in flight (failure.go).
	syncs volSyncs
	// memberEpoch is the volume's member epoch as this server applied it
	// (0 for a single copy, and without a control group): a write must
	// carry it (checkMember).
	memberEpoch uint64
	// changed is closed, and replaced, each time this server applies a
	// change of v (a write ahead of what it applied waits for it); nil
	// without a control group.
	changed chan struct{}
	// set is v's replica set as this server applied it (empty without a
	// control group): a replica serves reads only while in its in-sync set
	// (replicaio.go).
	set ReplicaSet
	// dirty is, while this server's copy is in sync, the dirty-region map
	// of each replica out of sync, by server id (dirtytrack.go); changed
	// under mu held for writing, marked under mu held for reading.
	dirty map[string]*dirtyFile
}

// Open opens (or creates) the store in dir: dir/datapath.db for metadata and
// dir/volumes/<id>.img for data. A second Open of the same dir fails while the
// first holds it.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: data directory: empty path", ErrInvalidArgument)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, volumesDir), 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	db, err := bolt.Open(filepath.Join(dir, dbFile), 0o600, &bolt.Options{Timeout: 2 * time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("data directory %s is in use by another datapath server (lock on %s)", dir, dbFile)
		}
		return nil, fmt.Errorf("open %s: %w", filepath.Join(dir, dbFile), err)
	}
	s := &Store{dir: dir, db: db, commits: groupCommit{db: db}, now: opts.Now, log: opts.Logger, capacity: opts.Capacity, overPct: max(opts.OverProvisioningPercentage, 100), open: opts.OpenFile,
		ctl: opts.Control, vols: map[string]*volume{}, names: map[string]string{}, index: newNodeIndex(), prov: newProvisioning()}
	if s.now == nil {
		s.now = time.Now
	}
	if s.open == nil {
		s.open = OpenOSFile
	}
	s.started = s.now().UTC()
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := s.load(); err != nil {
		s.closeFiles()
		_ = db.Close()
		return nil, err
	}
	if s.capacity == 0 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			s.closeFiles()
			_ = db.Close()
			return nil, fmt.Errorf("size of the file system under %s: %w", dir, err)
		}
		s.capacity = int64(st.Blocks) * int64(st.Bsize)
	}
	if s.ctl != nil {
		s.stopSweep = make(chan struct{})
		go s.sweepAbandoned(s.stopSweep)
		s.startCatchUp(s.stopSweep)
	}
	return s, nil
}

// Validate checks the capacity and the over-provisioning percentage (Open
// does; a caller may check them before it opens anything else).
func (o Options) Validate() error {
	if p := o.OverProvisioningPercentage; p != 0 && (p < 100 || p > MaxOverProvisioningPercentage) {
		return fmt.Errorf("%w: over-provisioning percentage %d: want 100 (every volume reserved on disk) to %d (thin volumes, up to %d times the capacity)",
			ErrInvalidArgument, p, MaxOverProvisioningPercentage, MaxOverProvisioningPercentage/100)
	}
	if o.Capacity < 0 {
		return fmt.Errorf("%w: capacity %d bytes: must be 0 (the file system's size) or positive", ErrInvalidArgument, o.Capacity)
	}
	return nil
}

func (s *Store) load() error {
	if s.ctl != nil {
		return s.loadControlled()
	}
	if err := initBuckets(s.db); err != nil {
		if errors.Is(err, boltformat.ErrTooNew) || errors.Is(err, boltformat.ErrBadVersion) {
			return err // names the file already
		}
		return fmt.Errorf("datapath.db: %w", err)
	}
	loaded, err := loadAll(s.db)
	if err != nil {
		return fmt.Errorf("datapath.db is damaged: %w", err)
	}
	for _, lv := range loaded {
		path := s.imgPath(lv.rec.ID)
		f, err := s.open(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("volume %s (%s): data file: %w", lv.rec.ID, lv.rec.Name, err)
		}
		s.vols[lv.rec.ID] = &volume{rec: lv.rec, attach: lv.attach, file: f, failed: lv.failed}
		if lv.failed != nil {
			s.log.Error("datapath: volume is failed (a flush of its data failed); it refuses I/O until an operator clears it",
				"volume", lv.rec.ID, "name", lv.rec.Name, "since", lv.failed.Since, "op", lv.failed.Op, "err", lv.failed.Error)
		}
		s.names[lv.rec.Name] = lv.rec.ID
		for node, a := range lv.attach {
			s.index.set(node, lv.rec.ID, false, a.State == StateGranted)
		}
		if fi, err := os.Stat(path); err == nil && fi.Size() != lv.rec.Size {
			return fmt.Errorf("volume %s (%s): data file %s is %d bytes, metadata says %d", lv.rec.ID, lv.rec.Name, path, fi.Size(), lv.rec.Size)
		}
	}
	if err := s.loadLeaves(); err != nil {
		return err
	}
	return s.removeOrphans()
}

// removeOrphans deletes data files that no volume record names: left by a crash
// between creating the file and committing the record, or between committing a
// delete and removing the file.
func (s *Store) removeOrphans() error {
	entries, err := os.ReadDir(filepath.Join(s.dir, volumesDir))
	if err != nil {
		return fmt.Errorf("list volumes directory: %w", err)
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), imgSuffix)
		if !ok || s.vols[id] != nil {
			continue
		}
		s.log.Warn("datapath: removing orphan data file", "file", e.Name())
		if err := os.Remove(filepath.Join(s.dir, volumesDir, e.Name())); err != nil {
			return fmt.Errorf("remove orphan data file %s: %w", e.Name(), err)
		}
	}
	return nil
}

func (s *Store) imgPath(id string) string {
	return filepath.Join(s.dir, volumesDir, id+imgSuffix)
}

// Close flushes every volume's data to disk and closes the store. Calls made
// after Close fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.ctl != nil {
		s.ctl.OnApplied(nil)
		close(s.stopSweep)
	}
	var errs []error
	for _, v := range s.vols {
		if err := s.closeVolume(v); err != nil {
			errs = append(errs, err)
		}
	}
	s.closeFiles()
	if err := s.db.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// closeVolume ends v's I/O and flushes it, latching a failure (failure.go)
// before the database closes. A volume failed before is not flushed again.
func (s *Store) closeVolume(v *volume) error {
	v.mu.Lock()
	v.deleted = true // no more I/O
	v.closeDirtyLocked()
	failed := v.failed != nil
	v.mu.Unlock()
	if failed {
		return nil
	}
	return s.syncVolume(v, opClose)
}

func (s *Store) closeFiles() {
	for _, v := range s.vols {
		_ = v.file.Close()
	}
}

// errClosed is returned by calls on a closed store.
var errClosed = errors.New("datapath: store is closed")

// lookup finds a volume by id, checking the id's shape first.
func (s *Store) lookup(id string) (*volume, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	s.mu.RLock()
	v, closed := s.vols[id], s.closed
	s.mu.RUnlock()
	if closed {
		return nil, errClosed
	}
	if v == nil {
		return nil, fmt.Errorf("%w: volume %s", ErrNotFound, id)
	}
	return v, nil
}

// GetVolume returns one volume.
func (s *Store) GetVolume(id string) (Volume, error) {
	v, err := s.lookupHeld(id)
	if err != nil {
		return Volume{}, err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.deleted {
		return Volume{}, fmt.Errorf("%w: volume %s", ErrNotFound, id)
	}
	return v.rec.volume(), nil
}

// ListVolumes returns every volume sorted by name. A volume whose delete is
// committed is left out, as GetVolume leaves it out.
func (s *Store) ListVolumes() ([]Volume, error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, errClosed
	}
	vols := make([]*volume, 0, len(s.vols))
	for _, v := range s.vols {
		vols = append(vols, v)
	}
	s.mu.RUnlock()
	out := make([]Volume, 0, len(vols))
	for _, v := range vols {
		v.mu.RLock()
		if !v.deleted {
			out = append(out, v.rec.volume())
		}
		v.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Capacity returns the bytes still available for new volumes.
func (s *Store) Capacity() (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, errClosed
	}
	return s.availableLocked(), nil
}

// availableLocked is what can still be promised: the capacity (times the
// over-provisioning) less the sizes of the volumes and of the creates in
// flight, and, where volumes are reserved on disk, no more than the file
// system has free now less what creates in flight have yet to reserve.
func (s *Store) availableLocked() int64 {
	used := s.prov.promised
	for _, v := range s.vols {
		used += v.rec.Size
	}
	total := s.capacity/100*int64(s.overPct) + s.capacity%100*int64(s.overPct)/100
	avail := max(total-used, 0)
	if s.overPct == 100 {
		if free := s.freeOnDisk(); free >= 0 {
			avail = min(avail, max(free-s.prov.unreserved, 0))
		}
	}
	return avail
}

// freeOnDisk is what the data directory's file system has free for this
// process (Bavail), or -1 when it cannot be read.
func (s *Store) freeOnDisk() int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// MaxOverProvisioningPercentage bounds OverProvisioningPercentage.
const MaxOverProvisioningPercentage = 1000

// allocator is a File that can reserve its blocks (fallocate).
type allocator interface {
	Allocate(size int64) error
}

// reserve gives a new data file its size: its blocks reserved on disk, so that
// no write inside it can meet a full file system, or a thin file when the
// store over-provisions (or the File cannot reserve, a test layer).
func (s *Store) reserve(f File, size int64) error {
	a, ok := f.(allocator)
	if s.overPct > 100 || !ok {
		return f.Truncate(size)
	}
	err := a.Allocate(size)
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("the file system under %s cannot reserve a volume's blocks (fallocate: %v): "+
			"put the data directory on ext4 or XFS, or allow thin volumes with an over-provisioning percentage above 100", s.dir, err)
	}
	return err
}

// DataFile returns the path of the volume's sparse data file (whether or not
// the volume exists): dir/volumes/<id>.img.
func (s *Store) DataFile(id string) string { return s.imgPath(id) }
