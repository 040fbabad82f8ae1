package datapath

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Provisioning (CreateVolume, DeleteVolume) does its slow work - making the
// data file, reserving its blocks, the fsyncs of the file, the directory and
// datapath.db - outside the store-wide lock, which every I/O takes for
// reading: provisioning 50 volumes must not stall the volumes in use. Only the
// bookkeeping around that work takes the lock, briefly:
//
//   - A volume is visible (lookup, ListVolumes, a create of its name) only
//     once its data file and its record are durable: a create publishes it
//     in the maps after both.
//   - A name has at most one create or delete in flight: another create of
//     the name waits for it and then sees its outcome (creating, deleting),
//     so an idempotent create never returns a volume whose delete is under
//     way, and two creates of one name make one volume.
//   - An id whose data file is being made or removed (fileOps) is not issued
//     again, so a delete's removal of a file never meets a create of a file
//     of the same name.
//   - What is promised to creates in flight counts against the capacity
//     (promised), so concurrent creates never promise more than there is.
//
// A crash at any point leaves what Open cleans up: a data file no record
// names (made before the record was committed, or left by a committed
// delete) is an orphan and is removed; a record is committed only once its
// file is durable, so every record has its file.

// pendingCreate is a create in flight.
type pendingCreate struct {
	rec volumeRecord
	// reserved is set (under Store.mu) once the file's blocks are reserved
	// on disk, so free space no longer needs to count them.
	reserved bool
	done     chan struct{} // closed when the create has ended either way
}

// provisioning is the Store's bookkeeping of creates and deletes in flight,
// guarded by Store.mu.
type provisioning struct {
	creating map[string]*pendingCreate // name -> its create in flight
	deleting map[string]chan struct{}  // id -> closed when its delete has ended
	fileOps  map[string]struct{}       // ids whose data file is made or removed
	// prepared: by name, the volumes whose data file PrepareVolume made
	// for a create to be committed naming this server (placement.go);
	// their ids stay in fileOps and their sizes in promised.
	prepared map[string]*preparedVolume
	promised int64 // sizes of the creates in flight
	// unreserved is the part of promised whose blocks are not yet reserved
	// on disk (free space on disk does not show it yet).
	unreserved int64
	// hook, when set (tests), is called at the steps where a crash leaves
	// something to clean up: after the data file is durable ("create:file"),
	// after a create's record is committed ("create:committed") and after a
	// delete's ("delete:committed"), with the volume's id.
	hook func(step, id string)
}

func newProvisioning() provisioning {
	return provisioning{creating: map[string]*pendingCreate{}, deleting: map[string]chan struct{}{}, fileOps: map[string]struct{}{},
		prepared: map[string]*preparedVolume{}}
}

func (p *provisioning) at(step, id string) {
	if p.hook != nil {
		p.hook(step, id)
	}
}

// CreateVolume creates a volume, idempotently by name (see client.CreateVolume).
func (s *Store) CreateVolume(name string, size int64, mode AccessMode) (Volume, error) {
	if err := validName(name); err != nil {
		return Volume{}, err
	}
	if err := validSize(size); err != nil {
		return Volume{}, err
	}
	if err := mode.Validate(); err != nil {
		return Volume{}, err
	}
	p, existing, err := s.beginCreate(name, size, mode)
	if err != nil || p == nil {
		return existing, err
	}
	f, err := s.makeVolume(p)
	return s.endCreate(p, f, err)
}

// beginCreate returns the volume already named name (or refuses one made
// differently), or promises the new one its size and an id and returns it as
// pending: the caller makes it. A create or delete of the name in flight is
// waited for first.
func (s *Store) beginCreate(name string, size int64, mode AccessMode) (*pendingCreate, Volume, error) {
	return s.onceNameFree(name, func() (*pendingCreate, Volume, error) { return s.promiseLocked(name, size, mode, "") })
}

// onceNameFree waits until no create or delete of name is in flight, then
// runs begin under s.mu.
func (s *Store) onceNameFree(name string, begin func() (*pendingCreate, Volume, error)) (*pendingCreate, Volume, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, Volume{}, errClosed
		}
		if wait := s.nameBusyLocked(name); wait != nil {
			s.mu.Unlock()
			<-wait
			continue
		}
		p, v, err := begin()
		s.mu.Unlock()
		return p, v, err
	}
}

// promiseLocked is beginCreate once nothing of name is in flight; the new
// volume gets id, or a new one when id is "".
func (s *Store) promiseLocked(name string, size int64, mode AccessMode, id string) (*pendingCreate, Volume, error) {
	if id, ok := s.names[name]; ok {
		r := s.vols[id].rec
		if r.Size != size || r.Access != mode {
			return nil, Volume{}, fmt.Errorf("%w: volume %q is %s with %d bytes and mode %s; asked for %d bytes and mode %s",
				ErrAlreadyExists, name, r.ID, r.Size, r.Access, size, mode)
		}
		return nil, r.volume(), nil
	}
	if avail := s.availableLocked(); size > avail {
		return nil, Volume{}, fmt.Errorf("%w: volume %q needs %d bytes, %d can still be promised (capacity %d, over-provisioning %d%%, free on disk %d)",
			ErrNoSpace, name, size, avail, s.capacity, s.overPct, s.freeOnDisk())
	}
	if id == "" {
		id = s.newIDLocked()
	}
	p := &pendingCreate{done: make(chan struct{}),
		rec: volumeRecord{ID: id, Name: name, Size: size, Access: mode, Created: s.now().UTC().Truncate(time.Microsecond)}}
	s.prov.creating[name] = p
	s.prov.fileOps[p.rec.ID] = struct{}{}
	s.prov.promised += size
	s.prov.unreserved += size
	return p, Volume{}, nil
}

// nameBusyLocked returns what to wait for when a create of name, or a delete
// of the volume so named, is in flight; nil when none is.
func (s *Store) nameBusyLocked(name string) <-chan struct{} {
	if p := s.prov.creating[name]; p != nil {
		return p.done
	}
	if id, ok := s.names[name]; ok {
		return s.prov.deleting[id]
	}
	return nil
}

// makeVolume makes p's data file and commits its record, outside Store.mu.
// On failure nothing of it is left.
func (s *Store) makeVolume(p *pendingCreate) (File, error) {
	f, err := s.createFile(p)
	if err != nil {
		return nil, fmt.Errorf("create volume %q: %w", p.rec.Name, fileErr(err))
	}
	s.prov.at("create:file", p.rec.ID)
	if s.ctl != nil {
		return s.ctlCreate(p, f)
	}
	if err := s.commits.update(func(tx *bolt.Tx) error { return putVolume(tx, p.rec) }); err != nil {
		_ = f.Close()
		_ = os.Remove(s.imgPath(p.rec.ID))
		return nil, fmt.Errorf("create volume %q: %w", p.rec.Name, err)
	}
	s.prov.at("create:committed", p.rec.ID)
	return f, nil
}

// endCreate ends p: its promise is dropped and, when it was made, the volume
// is published. A store closed meanwhile keeps the volume on disk (it is
// there after a restart) but not open.
func (s *Store) endCreate(p *pendingCreate, f File, err error) (Volume, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.prov.creating, p.rec.Name)
	delete(s.prov.fileOps, p.rec.ID)
	s.prov.promised -= p.rec.Size
	if !p.reserved {
		s.prov.unreserved -= p.rec.Size
	}
	close(p.done)
	if err != nil {
		return Volume{}, err
	}
	if s.closed {
		_ = f.Close()
		return Volume{}, errClosed
	}
	s.vols[p.rec.ID] = &volume{rec: p.rec, attach: map[string]attachmentRecord{}, file: f}
	s.names[p.rec.Name] = p.rec.ID
	return p.rec.volume(), nil
}

// createFile makes p's data file, reserves its size, and makes its existence
// durable before the metadata names it.
func (s *Store) createFile(p *pendingCreate) (File, error) {
	path := s.imgPath(p.rec.ID)
	f, err := s.open(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	err = s.reserve(f, p.rec.Size)
	if err == nil {
		s.mu.Lock()
		p.reserved = true
		s.prov.unreserved -= p.rec.Size
		s.mu.Unlock()
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	return f, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// newIDLocked returns an id no volume has and no data file in the making or
// the removing has.
func (s *Store) newIDLocked() string {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
		id := idPrefix + hex.EncodeToString(b[:])
		if _, busy := s.prov.fileOps[id]; !busy && s.vols[id] == nil {
			return id
		}
	}
}

// DeleteVolume deletes a volume and its data file. Unknown ids are not an error;
// a volume with a live grant is refused with ErrInUse.
func (s *Store) DeleteVolume(id string) error { return s.deleteVolume(id, nil) }

// deleteVolume is DeleteVolume; pend as for grantAs.
func (s *Store) deleteVolume(id string, pend *pendingApply) error {
	if s.ctl != nil && s.othersApplyID(id) {
		if pend != nil {
			// Its other replicas must apply it (this server's copy, if
			// any, is removed as it applies the delete: forget).
			_, err := s.ctlChangeElsewhere(id, pend, func(ctx context.Context) (uint64, error) { return 0, s.ctl.DeleteVolume(ctx, id) })
			return err
		}
		if err := s.ctlCheckHere(id); err != nil {
			return err
		}
	}
	v, done, err := s.beginDelete(id)
	if err == nil && v == nil && s.ctl != nil {
		if pend != nil {
			_, err = s.ctlChangeElsewhere(id, pend, func(ctx context.Context) (uint64, error) { return 0, s.ctl.DeleteVolume(ctx, id) })
			return err
		}
		err = s.ctlCheckHere(id)
	}
	if err != nil || v == nil {
		return err
	}
	if s.ctl != nil {
		ctx, cancel := s.ctlContext()
		err = s.ctl.DeleteVolume(ctx, id) // applied here, it marks v deleted under its write lock
		cancel()
	} else {
		err = s.unrecord(v)
	}
	if err == nil {
		s.prov.at("delete:committed", id)
	}
	s.mu.Lock()
	if err == nil {
		delete(s.vols, id)
		delete(s.names, v.rec.Name)
		s.prov.fileOps[id] = struct{}{}
	}
	delete(s.prov.deleting, id)
	close(done)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	_ = v.file.Close()
	if err := os.Remove(s.imgPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("datapath: data file of deleted volume not removed; it goes at next start", "volume", id, "err", err)
	}
	s.mu.Lock()
	delete(s.prov.fileOps, id)
	s.mu.Unlock()
	return nil
}

// beginDelete finds the volume and marks its delete in flight, once any other
// delete of it has ended; nil when there is no such volume.
func (s *Store) beginDelete(id string) (*volume, chan struct{}, error) {
	for {
		v, err := s.lookup(id)
		if errors.Is(err, ErrNotFound) {
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
		s.mu.Lock()
		if wait := s.prov.deleting[id]; wait != nil {
			s.mu.Unlock()
			<-wait
			continue
		}
		if s.closed || s.vols[id] != v {
			s.mu.Unlock()
			continue // lookup says what became of it
		}
		done := make(chan struct{})
		s.prov.deleting[id] = done
		s.mu.Unlock()
		return v, done, nil
	}
}

// unrecord commits the deletion of v's record and ends its I/O, under v's
// write lock, so that no grant, fence or I/O of v runs meanwhile; a volume
// with a live grant is refused with ErrInUse.
func (s *Store) unrecord(v *volume) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.deleted {
		return errClosed // only Close ends a volume's I/O while its delete is in flight
	}
	if err := v.table().CheckDelete(); err != nil {
		return err
	}
	if err := s.commits.update(func(tx *bolt.Tx) error { return deleteVolume(tx, v.rec) }); err != nil {
		return fmt.Errorf("delete volume %s: %w", v.rec.ID, err)
	}
	v.deleted = true
	s.index.drop(v.rec.ID, v.attach)
	return nil
}
