package datapath

import (
	"context"
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
// epoch (see client.GrantAs for the rules; AttachTable.Grant decides). A node
// that already holds a live grant keeps its epoch; a different use is
// recorded in place, after the same check.
func (s *Store) GrantAs(volumeID, node string, use GrantUse) (uint64, error) {
	return s.grantAs(volumeID, node, use, nil)
}

// grantAs is GrantAs; pend, when set, takes the servers that must apply a
// grant of a volume another server holds (holders.go).
func (s *Store) grantAs(volumeID, node string, use GrantUse, pend *pendingApply) (uint64, error) {
	if err := use.Validate(); err != nil {
		return 0, err
	}
	if s.ctl != nil {
		return s.ctlChange(volumeID, node, pend, func(ctx context.Context) (uint64, error) { return s.ctl.Grant(ctx, volumeID, node, use) })
	}
	v, err := s.lockLive(volumeID, node)
	if err != nil {
		return 0, err
	}
	defer v.mu.Unlock()
	step, err := v.table().Grant(node, use)
	if err != nil || !step.Changed {
		return step.Row.Epoch, err
	}
	if err := s.record(v, step); err != nil {
		if step.WasLive {
			return 0, fmt.Errorf("grant volume %s to node %s as %s: %w", volumeID, node, use, err)
		}
		return 0, fmt.Errorf("grant volume %s to node %s: %w", volumeID, node, err)
	}
	return step.Row.Epoch, nil
}

// grantConflict says why node may not hold a live grant of use on a volume of
// access mode mode next to the other nodes' grants in attach, or "" when it
// may (AttachTable's rules).
func grantConflict(mode AccessMode, node string, use GrantUse, attach map[string]attachmentRecord) string {
	return (&volume{rec: volumeRecord{Access: mode}, attach: attach}).table().conflict(node, use)
}

// table is v's attachment table as the rules see it. The caller holds v.mu.
func (v *volume) table() AttachTable {
	rows := make(map[string]AttachRow, len(v.attach))
	for node, a := range v.attach {
		rows[node] = a.row()
	}
	return AttachTable{VolumeID: v.rec.ID, Access: v.rec.Access, Epoch: v.rec.Epoch, Rows: rows}
}

// Fence revokes node on the volume and returns the volume's new epoch. It holds
// the volume's write lock, so it waits for writes in flight and no later write
// passes the epoch check; the fence is committed to bbolt before it returns.
func (s *Store) Fence(volumeID, node string) (uint64, error) { return s.fence(volumeID, node, nil) }

// fence is Fence; pend as for grantAs.
func (s *Store) fence(volumeID, node string, pend *pendingApply) (uint64, error) {
	if s.ctl != nil {
		return s.ctlChange(volumeID, node, pend, func(ctx context.Context) (uint64, error) { return s.ctl.Fence(ctx, volumeID, node) })
	}
	v, err := s.lockLive(volumeID, node)
	if err != nil {
		return 0, err
	}
	defer v.mu.Unlock()
	step, err := v.table().Fence(node)
	if err != nil {
		return 0, err
	}
	if err := s.record(v, step); err != nil {
		return 0, fmt.Errorf("fence node %s on volume %s: %w", node, volumeID, err)
	}
	return step.Epoch, nil
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

// ctlChange makes a change of a volume through the control group
// (control.go). It holds no lock of the volume: the change takes its write
// lock when this server applies it, before change returns. A volume another
// server holds is changed only for a client that confirms (pend).
func (s *Store) ctlChange(volumeID, node string, pend *pendingApply, change func(context.Context) (uint64, error)) (uint64, error) {
	if err := validNode(node); err != nil {
		return 0, err
	}
	if _, err := s.GetVolume(volumeID); err != nil || s.othersApplyID(volumeID) {
		if pend != nil {
			return s.ctlChangeElsewhere(volumeID, pend, change)
		}
		if herr := s.ctlCheckHere(volumeID); herr != nil {
			return 0, herr
		}
		if err != nil {
			return 0, err
		}
	}
	ctx, cancel := s.ctlContext()
	defer cancel()
	return change(ctx)
}

// record commits a step the rules decided (the volume's epoch and the node's
// row, stamped with the store's clock) and then applies it to v and to the
// node index. The caller holds v.mu for writing.
func (s *Store) record(v *volume, step AttachStep) error {
	rec := v.rec
	rec.Epoch = step.Epoch
	a := attachmentRecord{Epoch: step.Row.Epoch, State: step.Row.State, Updated: s.now().UTC(), Use: step.Row.Use}
	if err := s.commits.update(func(tx *bolt.Tx) error { return putAttachment(tx, rec, step.Node, a) }); err != nil {
		return err
	}
	v.rec = rec
	v.attach[step.Node] = a
	s.index.set(step.Node, rec.ID, step.WasLive, step.IsLive())
	return nil
}

// Release ends node's live grant on the volume, under the volume's write lock
// like Fence. A node without a live grant is left as it is.
func (s *Store) Release(volumeID, node string) error { return s.release(volumeID, node, nil) }

// release is Release; pend as for grantAs.
func (s *Store) release(volumeID, node string, pend *pendingApply) error {
	if s.ctl != nil {
		_, err := s.ctlChange(volumeID, node, pend, func(ctx context.Context) (uint64, error) { return 0, s.ctl.Release(ctx, volumeID, node) })
		return err
	}
	v, err := s.lockLive(volumeID, node)
	if err != nil {
		return err
	}
	defer v.mu.Unlock()
	step, err := v.table().Release(node)
	if err != nil || !step.Changed {
		return err
	}
	if err := s.record(v, step); err != nil {
		return fmt.Errorf("release node %s on volume %s: %w", node, volumeID, err)
	}
	return nil
}

// Attachments returns the volume's attachment table sorted by node.
func (s *Store) Attachments(volumeID string) ([]Attachment, error) {
	v, err := s.lookupHeld(volumeID)
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
	case v.changed != nil && epoch > v.rec.Epoch:
		// The grant at epoch was committed, and confirmed by a majority
		// of the volume's replicas, but this one has not applied it yet.
		// Epochs only grow, so a fenced node's epoch is never above the
		// volume's: this is never a fenced writer, and "fenced" would be a
		// false, final answer.
		return fmt.Errorf("%w: %s volume %s: node %s carries epoch %d, and this server has applied the volume up to epoch %d only; nothing was done: send it again",
			ErrNotApplied, op, v.rec.ID, node, epoch, v.rec.Epoch)
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

// checkMember refuses I/O at another member epoch than the one this server
// applied for v: the writer decided from a replica set that a committed
// change has replaced (or this server has not applied its change yet). The
// caller holds v.mu.
func (v *volume) checkMember(op string, member uint64) error {
	if member != v.memberEpoch {
		return fmt.Errorf("%w: %s volume %s carries member epoch %d; this server applied member epoch %d: read the volume's replicas again",
			ErrStaleMemberEpoch, op, v.rec.ID, member, v.memberEpoch)
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
