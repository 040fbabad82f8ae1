package datapath

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// A change of a volume whose data another server holds. The leader commits
// it and answers with the log entry (index, term) and, per server that holds
// a touched volume's data, that server's id, datapath address and volumes;
// the client then asks each of those servers to confirm that it applied the
// entry (WaitApplied) and reports the change done only once, for every
// touched volume, a majority (WriteQuorum) of the servers listed with it
// did: the one server of a volume of one copy, a majority of the R replicas
// of a replicated one, all of which are listed, this server too when it is
// one (see control.go for why). A request that does not say it will confirm
// (wire.ConfirmMetadataKey) gets ErrHeldElsewhere, as before, so a client
// that cannot confirm never reports such a change done.

// pendingApply collects, for one change, the servers other than this one
// that must apply it; nil is a caller that does not confirm.
type pendingApply struct {
	index, term uint64
	holders     map[string][]string // server id -> volume ids
	addresses   map[string]string   // server id -> datapath address
}

func newPendingApply() *pendingApply { return &pendingApply{holders: map[string][]string{}} }

// add records that server holds volumeID's data; this server needs no
// confirmation (it applied the change before it answers).
func (p *pendingApply) add(s *Store, volumeID, server string) {
	if server == "" || server == s.ctl.Self() {
		return
	}
	p.holders[server] = append(p.holders[server], volumeID)
}

// finish records the entry the holders must reach, the last this server
// applied (the change's or a later one), and their addresses.
func (p *pendingApply) finish(s *Store) {
	if len(p.holders) == 0 {
		return
	}
	p.index, p.term = s.ctl.LastApplied()
	s.ctl.PushCommit()
	p.addresses = map[string]string{}
	for _, m := range s.ctl.GroupStatus() {
		p.addresses[m.ID] = m.Address
	}
}

// servers is the holders sorted by id, each volume list sorted.
func (p *pendingApply) servers() []string {
	out := make([]string, 0, len(p.holders))
	for id, vols := range p.holders {
		sort.Strings(vols)
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// replicasOf is the servers the control state places the volume's data on
// (its replica set), as this server applied it (none for a volume it does
// not know).
func (s *Store) replicasOf(volumeID string) []string {
	cv, _, ok := s.ctl.AppliedVolume(volumeID)
	if !ok {
		return nil
	}
	return cv.ReplicaSet().Replicas
}

// othersApply says whether a change of cv is done only once another
// server applied it: one of its replicas is not this server.
func (s *Store) othersApply(cv ControlVolume) bool {
	for _, r := range cv.ReplicaSet().Replicas {
		if r != s.ctl.Self() {
			return true
		}
	}
	return false
}

// othersApplyID is othersApply for the volume of id as applied here (false
// for one this server does not know).
func (s *Store) othersApplyID(volumeID string) bool {
	cv, _, ok := s.ctl.AppliedVolume(volumeID)
	return ok && s.othersApply(cv)
}

// addVolume records that each server of replicas holds volumeID's data.
// Of a volume of one copy, this server is left out, as add leaves it out;
// of a replicated volume, every replica is listed, this one too (it applied
// the change before it answers, and confirms at once), so the client counts
// a majority of all R (WriteQuorum) from the answer alone.
func (p *pendingApply) addVolume(s *Store, volumeID string, replicas []string) {
	if len(replicas) == 1 {
		p.add(s, volumeID, replicas[0])
		return
	}
	for _, r := range replicas {
		p.holders[r] = append(p.holders[r], volumeID)
	}
}

// ctlChangeElsewhere commits a change of a volume this server does not
// hold, for a client that confirms (pend): this server must lead, and the
// volume's server is recorded in pend.
func (s *Store) ctlChangeElsewhere(volumeID string, pend *pendingApply, change func(context.Context) (uint64, error)) (uint64, error) {
	if err := s.ctl.CheckLeader(); err != nil {
		return 0, err
	}
	ctx, cancel := s.ctlContext()
	defer cancel()
	replicas := s.replicasOf(volumeID)
	if len(replicas) == 0 {
		// Unknown here: a leader new to the role may not have applied its
		// create yet, and the change must not go unconfirmed for that.
		if err := s.ctl.Current(ctx); err != nil {
			return 0, err
		}
		replicas = s.replicasOf(volumeID)
	}
	e, err := change(ctx)
	if err != nil {
		return 0, err
	}
	if after := s.replicasOf(volumeID); len(after) > 0 {
		replicas = after // the set at the change's entry (a delete leaves none)
	}
	pend.addVolume(s, volumeID, replicas)
	pend.finish(s)
	return e, nil
}

// MaxWaitApplied bounds one WaitApplied call.
const MaxWaitApplied = 30 * time.Second

// WaitApplied returns once this server applied the control group's entry
// at index of term (or a later one), so that every volume of this server a
// change up to it touched has its new table, taken under the volume's
// write lock. It waits at most timeout (0 < timeout <= MaxWaitApplied);
// then, or when this server's state is not the group's, it returns
// ErrNotApplied saying how far it got. A store without a Control has no
// group and refuses.
func (s *Store) WaitApplied(ctx context.Context, index, term uint64, timeout time.Duration) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if timeout <= 0 || timeout > MaxWaitApplied {
		return fmt.Errorf("%w: wait for the apply of index %d: timeout %s; allowed are more than 0 and at most %s", ErrInvalidArgument, index, timeout, MaxWaitApplied)
	}
	if index == 0 || term == 0 {
		return fmt.Errorf("%w: wait for the apply of index %d of term %d: both must be positive (a change's answer names them)", ErrInvalidArgument, index, term)
	}
	if s.ctl == nil {
		return fmt.Errorf("%w: wait for the apply of index %d: this server keeps its control state in datapath.db, not in a control group", ErrInvalidArgument, index)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := s.ctl.WaitApplied(ctx, index, term); err != nil {
		return fmt.Errorf("%w: server %s: %w", ErrNotApplied, s.ctl.Self(), err)
	}
	return nil
}

// ctlFenceNode fences node through the control group. Without pend, a live
// grant on a volume another server holds refuses it whole (ctlCheckHeldHere);
// with it, every live grant is fenced in one entry and the servers that hold
// the others' data are recorded in pend.
func (s *Store) ctlFenceNode(node string, pend *pendingApply) ([]FencedVolume, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if pend == nil {
		if err := s.ctlCheckHeldHere(node); err != nil {
			return nil, err
		}
	} else if err := s.ctl.CheckLeader(); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctlContext()
	defer cancel()
	fs, err := s.ctl.FenceNode(ctx, node) // one entry; each volume's write lock is taken as its server applies it
	if err != nil {
		return fs, err
	}
	if pend == nil {
		return fs, s.heldElsewhereAfter(node, fs)
	}
	for _, f := range fs {
		pend.addVolume(s, f.VolumeID, s.replicasOf(f.VolumeID))
	}
	pend.finish(s)
	return fs, nil
}

// toWire is the answer's Pending: nil when no other server must apply the
// change (or the caller does not confirm).
func (p *pendingApply) toWire() *wire.Pending {
	if p == nil || len(p.holders) == 0 {
		return nil
	}
	out := &wire.Pending{Index: p.index, Term: p.term}
	for _, id := range p.servers() {
		out.Holders = append(out.Holders, wire.PendingHolder{ID: id, Address: p.addresses[id], Volumes: p.holders[id]})
	}
	return out
}

// heldElsewhereAfter is the error of a FenceNode, for a client that does not
// confirm, that fenced volumes other servers hold: the check before it read
// this server's applied state, which a leader new to the role may not have
// brought up to date, and the group's entry fenced them all. They are fenced
// in the group but not reported so, since their servers may not have
// applied it.
func (s *Store) heldElsewhereAfter(node string, fs []FencedVolume) error {
	var elsewhere []string
	for _, f := range fs {
		if cv, _, ok := s.ctl.AppliedVolume(f.VolumeID); ok && s.othersApply(cv) {
			elsewhere = append(elsewhere, f.VolumeID+" on "+cv.Server)
		}
	}
	if len(elsewhere) == 0 {
		return nil
	}
	return fmt.Errorf("%w: fence node %s: the group fenced it on volumes whose data other servers hold (%s), which this client does not confirm with; "+
		"not reported done (a client of this release confirms)", ErrNotApplied, node, strings.Join(elsewhere[:min(len(elsewhere), 5)], ", "))
}
