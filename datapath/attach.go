package datapath

import (
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// Grant gives node a read-write grant on the volume and returns its epoch:
// GrantAs with UseReadWrite.
func (s *Store) Grant(volumeID, node string) (uint64, error) {
	return s.GrantAs(volumeID, node, UseReadWrite)
}

// GrantAs gives node a grant of the given use on the volume and returns its
// epoch (see client.GrantAs for the rules; grantConflict decides who may hold
// grants together). A node that already holds a live grant keeps its epoch;
// a different use is recorded in place, after the same check.
func (s *Store) GrantAs(volumeID, node string, use GrantUse) (uint64, error) {
	if err := use.Validate(); err != nil {
		return 0, err
	}
	v, err := s.lockLive(volumeID, node)
	if err != nil {
		return 0, err
	}
	defer v.mu.Unlock()
	a, live := v.attach[node]
	live = live && a.State == StateGranted
	if live && a.use() == use {
		return a.Epoch, nil
	}
	if why := grantConflict(v.rec.Access, node, use, v.attach); why != "" {
		return 0, fmt.Errorf("%w: grant volume %s to node %s as %s: %s", ErrAttachedElsewhere, volumeID, node, use, why)
	}
	if live {
		return s.changeUse(v, node, a, use)
	}
	a, err = s.moveEpoch(v, node, StateGranted, use)
	if err != nil {
		return 0, fmt.Errorf("grant volume %s to node %s: %w", volumeID, node, err)
	}
	return a.Epoch, nil
}

// grantConflict says why node may not hold a live grant of use on a volume of
// access mode mode next to the other nodes' grants in attach, or "" when it
// may. An RWO volume has at most one live grant. On any volume a filesystem
// writer is the only writer: a filesystem mounted read-write on two nodes, or
// written underneath by another node, is corrupted. Readers never conflict on
// an RWX volume, nor do raw block writers among themselves.
func grantConflict(mode AccessMode, node string, use GrantUse, attach map[string]attachmentRecord) string {
	others := make([]string, 0, len(attach))
	for other := range attach {
		others = append(others, other)
	}
	sort.Strings(others)
	for _, other := range others {
		a := attach[other]
		if other == node || a.State != StateGranted {
			continue
		}
		switch {
		case mode == AccessRWO:
			return fmt.Sprintf("it is RWO and node %s holds a live grant (epoch %d); fence or release that node first", other, a.Epoch)
		case use == UseFilesystemWriter && a.use().Writes():
			return fmt.Sprintf("a filesystem is mounted read-write on one node only, and node %s holds a live %s grant (epoch %d); "+
				"several nodes may write the volume only as raw block devices (volumeMode: Block)", other, a.use(), a.Epoch)
		case use.Writes() && a.use() == UseFilesystemWriter:
			return fmt.Sprintf("node %s has its filesystem mounted read-write (epoch %d), and no other node may write under it; fence or release that node first",
				other, a.Epoch)
		}
	}
	return ""
}

// changeUse records a new use for node's live grant, keeping its epoch. The
// caller holds v.mu for writing, so writes in flight under the old use are
// done.
func (s *Store) changeUse(v *volume, node string, a attachmentRecord, use GrantUse) (uint64, error) {
	a.Use, a.Updated = use, s.now().UTC()
	if err := s.commits.update(func(tx *bolt.Tx) error { return putAttachment(tx, v.rec, node, a) }); err != nil {
		return 0, fmt.Errorf("grant volume %s to node %s as %s: %w", v.rec.ID, node, use, err)
	}
	v.attach[node] = a
	return a.Epoch, nil
}

// Fence revokes node on the volume and returns the volume's new epoch. It holds
// the volume's write lock, so it waits for writes in flight and no later write
// passes the epoch check; the fence is committed to bbolt before it returns.
func (s *Store) Fence(volumeID, node string) (uint64, error) {
	v, err := s.lockLive(volumeID, node)
	if err != nil {
		return 0, err
	}
	defer v.mu.Unlock()
	a, err := s.moveEpoch(v, node, StateFenced, "")
	if err != nil {
		return 0, fmt.Errorf("fence node %s on volume %s: %w", node, volumeID, err)
	}
	return a.Epoch, nil
}

// lockLive returns the volume holding its write lock, which every change of
// its attachment table takes, so the change waits for writes in flight and no
// later write passes the epoch check; a deleted volume is ErrNotFound. The
// caller unlocks v.mu.
func (s *Store) lockLive(volumeID, node string) (*volume, error) {
	if err := validNode(node); err != nil {
		return nil, err
	}
	v, err := s.lookup(volumeID)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	if v.deleted {
		v.mu.Unlock()
		return nil, fmt.Errorf("%w: volume %s", ErrNotFound, volumeID)
	}
	return v, nil
}

// moveEpoch issues the volume's next epoch to node in the given state and use
// (none for a fence), durably. The caller holds v.mu for writing.
func (s *Store) moveEpoch(v *volume, node string, state AttachmentState, use GrantUse) (attachmentRecord, error) {
	rec := v.rec
	rec.Epoch++
	a := attachmentRecord{Epoch: rec.Epoch, State: state, Updated: s.now().UTC(), Use: use}
	if err := s.commits.update(func(tx *bolt.Tx) error { return putAttachment(tx, rec, node, a) }); err != nil {
		return attachmentRecord{}, err
	}
	old, had := v.attach[node]
	v.rec = rec
	v.attach[node] = a
	s.index.set(node, rec.ID, had && old.State == StateGranted, state == StateGranted)
	return a, nil
}

// Release ends node's live grant on the volume, under the volume's write lock
// like Fence. A node without a live grant is left as it is.
func (s *Store) Release(volumeID, node string) error {
	v, err := s.lockLive(volumeID, node)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	a, ok := v.attach[node]
	if !ok || a.State != StateGranted {
		return nil
	}
	a.State, a.Updated = StateReleased, s.now().UTC()
	if err := s.commits.update(func(tx *bolt.Tx) error { return putAttachment(tx, v.rec, node, a) }); err != nil {
		return fmt.Errorf("release node %s on volume %s: %w", node, volumeID, err)
	}
	v.attach[node] = a
	s.index.set(node, volumeID, true, false)
	return nil
}

// Attachments returns the volume's attachment table sorted by node.
func (s *Store) Attachments(volumeID string) ([]Attachment, error) {
	v, err := s.lookup(volumeID)
	if err != nil {
		return nil, err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.deleted {
		return nil, fmt.Errorf("%w: volume %s", ErrNotFound, volumeID)
	}
	out := make([]Attachment, 0, len(v.attach))
	for node, a := range v.attach {
		out = append(out, Attachment{VolumeID: volumeID, Node: node, Epoch: a.Epoch, State: a.State, Use: a.use(), Updated: a.Updated})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// Epoch returns the highest epoch issued for the volume.
func (s *Store) Epoch(volumeID string) (uint64, error) {
	v, err := s.lookup(volumeID)
	if err != nil {
		return 0, err
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.rec.Epoch, nil
}

// checkIO says whether (node, epoch) may do I/O on v. The caller holds v.mu.
// A node without a live grant learns that it is fenced; only the holder of a
// live grant learns that the volume failed.
func (v *volume) checkIO(op, node string, epoch uint64) error {
	if v.deleted {
		return fmt.Errorf("%w: volume %s", ErrNotFound, v.rec.ID)
	}
	a, ok := v.attach[node]
	switch {
	case !ok:
		return fmt.Errorf("%w: %s volume %s: node %s has no grant (epoch %d)", ErrFenced, op, v.rec.ID, node, epoch)
	case a.State == StateFenced:
		return fmt.Errorf("%w: %s volume %s: node %s was fenced at epoch %d (request carries epoch %d)", ErrFenced, op, v.rec.ID, node, a.Epoch, epoch)
	case a.State == StateReleased:
		return fmt.Errorf("%w: %s volume %s: node %s released its grant (epoch %d; request carries epoch %d)", ErrFenced, op, v.rec.ID, node, a.Epoch, epoch)
	case a.Epoch != epoch:
		return fmt.Errorf("%w: %s volume %s: node %s carries epoch %d, its grant is epoch %d", ErrFenced, op, v.rec.ID, node, epoch, a.Epoch)
	case v.failed != nil:
		return v.failedErr(op)
	}
	return nil
}

// checkWrite is checkIO for a write, which a read-only grant refuses with
// ErrReadOnly. The caller holds v.mu.
func (v *volume) checkWrite(node string, epoch uint64) error {
	if err := v.checkIO("write", node, epoch); err != nil {
		return err
	}
	if a := v.attach[node]; !a.use().Writes() {
		return fmt.Errorf("%w: write volume %s: node %s holds a read-only grant (epoch %d); it was published for reading only",
			ErrReadOnly, v.rec.ID, node, a.Epoch)
	}
	return nil
}
