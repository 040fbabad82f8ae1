package datapath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A Store with a Control keeps its control state - the volumes and the
// server that holds each one's data, the attachment tables with their
// epochs, the graceful stops nodes announced - in a replicated group
// (datapath/raftstate.Group) instead of in datapath.db. The data files, the
// failed volumes and the soft state (heartbeats, I/O activity, write
// sessions) stay with the Store.
//
// Every change goes through the group, and the rules are AttachTable's
// (attachrules.go), which the group's state machine applies. The Store keeps
// a copy of each of its volumes' applied tables next to the volume, which
// the data path checks under the volume's lock as before; the copy is
// refreshed from the state machine, under the volume's write lock, each time
// this server applies a change of the volume (applied). That refresh runs
// inside the state machine's apply, before the entry counts as applied
// here (LastApplied, WaitApplied). A change is reported done only once
// the server that holds the volume's data applied it, so when a fence
// returns:
//
//   - the fence is committed by a majority (it survives any single loss);
//   - the server that holds the volume's data applied it, and in doing so
//     took the volume's write lock: every write that passed the epoch check
//     before it has ended, and every later write sees the fence.
//
// With one copy of the data, returning on commit alone would not do: a
// zombie write reaching the data server after the fence returned, but
// before that server applied it, would pass the old table and be accepted
// (TestStoreControl_FenceReturnsOnlyOnceApplied and
// TestClient_Group_FenceOfAFollowersVolume_NoWriteLandsAfter break it that
// way and fail).
//
// When the leader holds the volume, its own apply is that confirmation: the
// call returns after it. When another server holds it (a follower: the
// volume was created under an earlier leader), the leader commits the
// change and answers with the log entry it reached (its LastApplied, at or
// after the change) and, per touched volume, its server's id and datapath
// address (holders.go); the client then asks each of those servers
// WaitApplied(index, term), which answers once that server applied the
// entry, and reports the change done only after every one did. The servers
// need no credentials for each other: the client, which holds the
// controller's, makes both calls. A request that does not say its client
// will confirm (a client from before WaitApplied) is refused with
// ErrHeldElsewhere before anything is proposed, as it was before (ctlCheckHere,
// ctlCheckHeldHere), so no client reports such a change done on commit
// alone; a FenceNode whose check read a state the new leader had not brought
// up to date, and whose entry then fenced such volumes after all, gets
// ErrNotApplied instead of success
// (TestClient_Group_NewLeaderBehindDoesNotReportAFenceNodeDone). A leader
// that does not know a volume it is asked to change brings its state up to
// date first (Current), so the volume's server is confirmed with even then
// (TestClient_Group_NewLeaderBehindStillConfirmsWithTheHolder). A server that does not confirm within the client's bound (it is
// down, cut off from the group, or behind) makes the call fail with
// ErrNotApplied naming it: the change is committed, and takes effect when
// that server applies it, but it is not reported done
// (TestClient_Group_HolderThatDoesNotApply_NothingReportedDone); FenceNode
// reports the volumes of the servers that confirmed, and the error names the
// others (TestClient_Group_FenceNode_OneHolderDown).
//
// Each server serves its volumes' I/O from its own applied state, never the
// leader's. That stays right because no change of its volumes is reported
// done before it applied it, and because it applies the group's entries in
// log order: a grant to a new node committed after a fence reaches the data
// server after the fence, so the new node's first I/O there comes after the
// fence took the volume's write lock, even when nobody waited for the fence
// (a caller that took the committed fence as its proof). A fenced node can still write to a server that has not applied the
// fence, but only before the node that replaces it can.

// ControlVolume is a volume as the control state holds it.
type ControlVolume struct {
	Volume
	// Server is the id of the group member that holds the volume's data.
	Server string
	// Epoch is the highest epoch ever issued for the volume.
	Epoch uint64
	// Replicas, InSync and MemberEpoch are the volume's replica set
	// (ReplicaSet: the servers that hold a copy, those whose copy is
	// current, and the count of committed changes of either). All three
	// are empty for a volume whose one copy Server holds (SingleCopy),
	// as every volume created before replica sets existed is.
	Replicas    []string
	InSync      []string
	MemberEpoch uint64
}

// ReplicaSet is the volume's replica set; SingleCopy on Server when none
// is recorded.
func (v ControlVolume) ReplicaSet() ReplicaSet {
	if len(v.Replicas) == 0 {
		return SingleCopy(v.ID, v.Server)
	}
	return ReplicaSet{VolumeID: v.ID, Holder: v.Server, Replicas: v.Replicas, InSync: v.InSync, MemberEpoch: v.MemberEpoch}
}

// SetReplicaSet records s as the volume's replica set, in its shortest
// form: nothing for SingleCopy.
func (v *ControlVolume) SetReplicaSet(s ReplicaSet) {
	if s.IsSingleCopy() {
		v.Replicas, v.InSync, v.MemberEpoch = nil, nil, 0
		return
	}
	v.Replicas, v.InSync, v.MemberEpoch = s.Replicas, s.InSync, s.MemberEpoch
}

// NodeLeave is a graceful stop a node announced (Leave).
type NodeLeave struct {
	Node      string
	Until     time.Time
	Announced time.Time
}

// Control is the replicated control state a Store keeps its control state
// in (datapath/raftstate.Group). Changes return once committed by a majority
// and applied by this server; the Applied reads return this server's applied
// state without asking the leader.
type Control interface {
	// Self is this server's id in the group.
	Self() string
	// CheckLeader is nil while this server leads, and ErrNotLeader naming
	// the leader (NotLeaderError) otherwise.
	CheckLeader() error
	CreateVolumeWithID(ctx context.Context, id, name string, size int64, mode AccessMode, server string) (ControlVolume, error)
	// CreateReplicatedVolume is CreateVolumeWithID with the volume's data
	// on every server of replicas, the first its holder, all in sync.
	CreateReplicatedVolume(ctx context.Context, id, name string, size int64, mode AccessMode, replicas []string) (ControlVolume, error)
	DeleteVolume(ctx context.Context, id string) error
	Grant(ctx context.Context, id, node string, use GrantUse) (uint64, error)
	Fence(ctx context.Context, id, node string) (uint64, error)
	FenceNode(ctx context.Context, node string) ([]FencedVolume, error)
	Release(ctx context.Context, id, node string) error
	Leave(ctx context.Context, node string, d time.Duration) (time.Time, error)
	ClearLeave(ctx context.Context, node string) error
	// ImportVolume and ImportLeave record the state of a data directory
	// written by the release that kept it in datapath.db, epochs unchanged;
	// a volume already recorded is left as it is.
	ImportVolume(ctx context.Context, v ControlVolume, rows []Attachment) error
	ImportLeave(ctx context.Context, l NodeLeave) error
	AppliedVolume(id string) (ControlVolume, []Attachment, bool)
	AppliedVolumes() []ControlVolume
	// Volumes is every volume of the group, current: a barrier committed by
	// a majority through this server as leader and applied here first, so
	// nothing committed before the call is missing; ErrNotLeader elsewhere.
	Volumes(ctx context.Context) ([]ControlVolume, error)
	AppliedLeaves() []NodeLeave
	// GroupStatus is every member of the group as this server sees it,
	// sorted by id, this server's own row complete (Self).
	GroupStatus() []ServerStatus
	// OnApplied sets the function called with the ids of the volumes each
	// applied change touched, after the change and before the call that
	// proposed it returns.
	OnApplied(fn func(volumeIDs []string))
	// LastApplied is the log entry (index, term) of the last change this
	// server applied, OnApplied's function included.
	LastApplied() (index, term uint64)
	// WaitApplied returns once this server applied the entry at index of
	// term or a later one (as LastApplied counts), or ctx ends; it refuses
	// when its state is not the group's.
	WaitApplied(ctx context.Context, index, term uint64) error
	// Current returns once this server's applied state holds every change
	// committed before the call (a barrier through it as leader); a
	// follower gets ErrNotLeader.
	Current(ctx context.Context) error
	// Settled returns once this server's applied state holds every change
	// proposed before the call that will ever be committed (the leader:
	// Current; a follower: in touch with a leader that committed an entry
	// of its term, and every command up to it applied here), so a volume it
	// does not hold by then was never created; an error otherwise.
	Settled(ctx context.Context) error
	// AbandonFile commits, the leader only, that the data file prepared
	// under id on server is abandoned: refused (ErrAlreadyExists) when a
	// volume has that id; once committed, a create of that id is refused.
	AbandonFile(ctx context.Context, id, server string) error
	// AddMember adds a server to the group, the leader only: recorded with
	// its Raft and datapath addresses, then a voter. It refuses a server
	// whose Raft address does not answer (adding it would leave the group
	// waiting for it).
	AddMember(ctx context.Context, id, raftAddress, datapathAddress string) error
	// AddNonvoter adds a running server as a non-voter, the leader only: it
	// receives and applies the log, the majority does not count it, and it
	// is not a member of the control state until AddMember.
	AddNonvoter(ctx context.Context, id, raftAddress string) error
	// PushCommit has the leader tell the followers its commit index now,
	// so that one that holds a changed volume's data applies the change
	// without waiting for the next append; it does not wait.
	PushCommit()
}

// controlTimeout bounds a change through the control group when the group
// sets no tighter bound.
const controlTimeout = 10 * time.Second

func (s *Store) ctlContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), controlTimeout)
}

// loadFromControl opens this server's volumes as the control state holds
// them (their tables, epochs) with the failures datapath.db recorded.
func (s *Store) loadFromControl(failed map[string]*failureRecord) error {
	for _, cv := range s.ctl.AppliedVolumes() {
		if !s.isReplicaHere(cv) {
			continue
		}
		err := s.openControlled(cv, failed[cv.ID])
		if err != nil && cv.Server == s.ctl.Self() {
			return err
		}
		if err != nil { // a copy not made yet (a replacement to rebuild): the others serve
			s.log.Warn("datapath: this server is a replica of a volume whose data file it cannot open; it serves none of its I/O", "volume", cv.ID, "err", err)
		}
	}
	for id := range failed {
		if s.vols[id] == nil {
			s.log.Warn("datapath: datapath.db records a failure of a volume this server does not hold; ignored", "volume", id)
		}
	}
	return s.reportOrphans()
}

// openControlled opens the data file of a volume of the control state and
// publishes it. The caller holds s.mu or is Open.
func (s *Store) openControlled(cv ControlVolume, failed *failureRecord) error {
	path := s.imgPath(cv.ID)
	f, err := s.open(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("volume %s (%s): data file: %w", cv.ID, cv.Name, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Size() != cv.Size {
		_ = f.Close()
		return fmt.Errorf("volume %s (%s): data file %s is %d bytes, the control state says %d", cv.ID, cv.Name, path, fi.Size(), cv.Size)
	}
	v := &volume{rec: volumeRecord{ID: cv.ID, Name: cv.Name, Size: cv.Size, Access: cv.Access, Created: cv.Created}, attach: map[string]attachmentRecord{}, file: f, failed: failed}
	s.refreshLocked(v)
	s.vols[cv.ID] = v
	s.names[cv.Name] = cv.ID
	return nil
}

// reportOrphans logs the data files no volume of the control state names,
// and those of volumes whose replica set does not name this server. They
// are not removed here: a server whose state is behind the group's might not
// know a volume yet, or not know that it names this server again;
// RemoveAbandoned removes the first once they are old and this server's
// state is settled, removeMovedAwayFiles the others once it has caught up.
func (s *Store) reportOrphans() error {
	entries, err := os.ReadDir(filepath.Join(s.dir, volumesDir))
	if err != nil {
		return fmt.Errorf("list volumes directory: %w", err)
	}
	for _, e := range entries {
		if id, _, _, ok := parseDirtyName(e.Name()); ok && s.vols[id] == nil {
			// a dirty-region map of a volume not open here: no use (a
			// copy opened later starts its maps anew, all dirty)
			_ = os.Remove(filepath.Join(s.dir, volumesDir, e.Name()))
			continue
		}
		id, ok := strings.CutSuffix(e.Name(), imgSuffix)
		if !ok || s.vols[id] != nil {
			continue
		}
		if _, _, known := s.ctl.AppliedVolume(id); known {
			s.log.Warn("datapath: a data file of a volume whose replica set does not name this server (the group moved its replica away); kept until this server has caught up", "file", e.Name())
			continue
		}
		s.log.Warn("datapath: a data file no volume of the control state names (a create that did not commit); kept", "file", e.Name())
	}
	return nil
}

// applied refreshes this server's copy of each volume a change touched:
// its table and epoch under its write lock (so the change waits for the
// I/O that passed the old table), a volume deleted by the group is closed
// and its file removed, a volume of this server the group created that is
// not open yet is opened.
func (s *Store) applied(ids []string) {
	for _, id := range ids {
		s.mu.RLock()
		v, closed := s.vols[id], s.closed
		s.mu.RUnlock()
		switch {
		case closed:
			return
		case v == nil:
			s.adopt(id)
		default:
			v.mu.Lock()
			gone := s.refreshLocked(v)
			left := !gone && !v.deleted && s.ctl.Self() != "" && !slices.Contains(v.set.Replicas, s.ctl.Self())
			if left {
				v.deleted = true // its replica moved elsewhere: no more I/O here
				s.dropDirtyLocked(v)
			}
			v.mu.Unlock()
			switch {
			case gone:
				s.forget(v)
			case left:
				s.unpublish(v)
				s.dropMovedAway(id)
			}
		}
	}
}

// refreshLocked copies the applied table and epoch of v from the control
// state and keeps the node index with it; it reports whether the group
// deleted the volume (v is then marked deleted). The caller holds v.mu for
// writing.
func (s *Store) refreshLocked(v *volume) (deleted bool) {
	if v.deleted {
		return false
	}
	cv, rows, ok := s.ctl.AppliedVolume(v.rec.ID)
	if !ok {
		v.deleted = true
		s.index.drop(v.rec.ID, v.attach)
		s.dropDirtyLocked(v)
		return true
	}
	v.rec.Epoch = cv.Epoch
	old := v.set
	v.setMemberLocked(cv)
	s.refreshDirtyLocked(v, old)
	for _, a := range rows {
		old, had := v.attach[a.Node]
		v.attach[a.Node] = attachmentRecord{Epoch: a.Epoch, State: a.State, Updated: a.Updated, Use: a.Use}
		s.index.set(a.Node, v.rec.ID, had && old.State == StateGranted, a.State == StateGranted)
	}
	return false
}

// forget closes and removes the data file of a volume the group deleted,
// unless this server's own DeleteVolume is doing it.
func (s *Store) forget(v *volume) {
	s.mu.Lock()
	if _, busy := s.prov.deleting[v.rec.ID]; busy || s.vols[v.rec.ID] != v {
		s.mu.Unlock()
		return
	}
	delete(s.vols, v.rec.ID)
	delete(s.names, v.rec.Name)
	s.mu.Unlock()
	_ = v.file.Close()
	if err := os.Remove(s.imgPath(v.rec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("datapath: data file of a deleted volume not removed", "volume", v.rec.ID, "err", err)
	}
}

// unpublish closes a volume whose replica the group moved to another
// server; dropMovedAway then removes its file (abandoned.go).
func (s *Store) unpublish(v *volume) {
	s.mu.Lock()
	if s.vols[v.rec.ID] != v {
		s.mu.Unlock()
		return
	}
	delete(s.vols, v.rec.ID)
	delete(s.names, v.rec.Name)
	s.index.drop(v.rec.ID, v.attach)
	s.mu.Unlock()
	_ = v.file.Close()
	s.log.Warn("datapath: the group moved this server's replica of a volume elsewhere; it serves it no more", "volume", v.rec.ID)
}

// adopt opens a volume of which this server holds a replica (the holder's
// or another) when the group created it while no create of this server was
// waiting for it: its outcome was unknown here, or another server placed
// it (a prepared file).
func (s *Store) adopt(id string) {
	cv, _, ok := s.ctl.AppliedVolume(id)
	if !ok {
		return
	}
	if !s.isReplicaHere(cv) {
		s.forgetPrepared(cv)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vols[id] == nil && !s.closed {
		s.unprepareLocked(cv.Name, id)
	}
	if _, busy := s.prov.fileOps[id]; busy || s.vols[id] != nil || s.closed {
		return // its create publishes it
	}
	if err := s.openControlled(cv, nil); err != nil {
		s.log.Error("datapath: the group created a volume on this server whose data file cannot be opened", "volume", id, "err", err)
	}
}

// ctlCreate commits a new volume, whose data file is durable, to the
// control group. On a refusal the file is removed; when the outcome is
// unknown it is kept (the group may still commit the volume, which adopt
// then opens).
func (s *Store) ctlCreate(p *pendingCreate, f File) (File, error) {
	ctx, cancel := s.ctlContext()
	defer cancel()
	cv, err := s.ctl.CreateVolumeWithID(ctx, p.rec.ID, p.rec.Name, p.rec.Size, p.rec.Access, s.ctl.Self())
	if err == nil && cv.ID == p.rec.ID {
		p.rec.Created, p.rec.Epoch = cv.Created, cv.Epoch
		return f, nil
	}
	_ = f.Close()
	if errors.Is(err, ErrNotCommitted) {
		return nil, fmt.Errorf("create volume %q: %w", p.rec.Name, err)
	}
	_ = os.Remove(s.imgPath(p.rec.ID))
	if err != nil {
		return nil, fmt.Errorf("create volume %q: %w", p.rec.Name, err)
	}
	return nil, fmt.Errorf("%w: volume %q is %s on server %s", errCreatedElsewhere, cv.Name, cv.ID, cv.Server)
}

// errCreatedElsewhere: the name was taken, on the group, by a volume whose
// data another server holds.
var errCreatedElsewhere = errors.New("datapath: a volume of that name exists on another server")

// ctlLeaves returns the announced stops of the control state by node.
func (s *Store) ctlLeaves() map[string]NodeLeave {
	out := map[string]NodeLeave{}
	for _, l := range s.ctl.AppliedLeaves() {
		out[l.Node] = l
	}
	return out
}

// ctlClearLeave is clearLeave with the announcements in the control state.
func (s *Store) ctlClearLeave(node string, now time.Time) {
	l, ok := s.ctlLeaves()[node]
	if !ok || now.Before(l.Announced.Add(LeaveSettle)) {
		return
	}
	ctx, cancel := s.ctlContext()
	defer cancel()
	if err := s.ctl.ClearLeave(ctx, node); err != nil {
		s.log.Warn("datapath: node heartbeats again but its announced stop could not be cleared; it runs out by itself", "node", node, "err", err)
		return
	}
	s.log.Info("datapath: node heartbeats again; its announced stop is over", "node", node)
}

// importToControl records, once, the control state of a datapath.db the
// release before the control group wrote: every volume with its table and
// epochs, and the announced stops not yet run out. It is idempotent, so an
// import cut short is done again at the next start.
func (s *Store) importToControl(loaded []loadedVolume, leaves map[string]leaveRecord) error {
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout+time.Duration(len(loaded))*time.Second)
	defer cancel()
	sort.Slice(loaded, func(i, j int) bool { return loaded[i].rec.ID < loaded[j].rec.ID })
	for _, lv := range loaded {
		r := lv.rec
		cv := ControlVolume{Volume: r.volume(), Server: s.ctl.Self(), Epoch: r.Epoch}
		rows := make([]Attachment, 0, len(lv.attach))
		for node, a := range lv.attach {
			rows = append(rows, Attachment{VolumeID: r.ID, Node: node, Epoch: a.Epoch, State: a.State, Use: a.Use, Updated: a.Updated})
		}
		sort.Slice(rows, func(i, j int) bool { return rows[i].Node < rows[j].Node })
		if err := s.ctl.ImportVolume(ctx, cv, rows); err != nil {
			return fmt.Errorf("import volume %s (%s) from datapath.db into the control group: %w", r.ID, r.Name, err)
		}
	}
	now := s.now()
	for _, node := range sortedLeaveNodes(leaves) {
		l := leaves[node]
		if !l.Until.After(now) {
			continue
		}
		if err := s.ctl.ImportLeave(ctx, NodeLeave{Node: node, Until: l.Until, Announced: l.Announced}); err != nil {
			return fmt.Errorf("import the announced stop of node %s from datapath.db into the control group: %w", node, err)
		}
	}
	if len(loaded) > 0 || len(leaves) > 0 {
		s.log.Info("datapath: imported the control state of datapath.db into the control group", "volumes", len(loaded), "leaves", len(leaves))
	}
	return nil
}

func sortedLeaveNodes(m map[string]leaveRecord) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// loadControlled opens the store under its Control: a version 1
// datapath.db is imported into the control group first and then migrated
// (its control buckets dropped), so it is imported once; then this
// server's volumes are opened as the control state holds them. The store
// follows every change applied from then on (applied).
func (s *Store) loadControlled() error {
	loaded, leaves, err := readV1(s.db)
	if err != nil {
		return err
	}
	if err := s.importToControl(loaded, leaves); err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		if _, err := controlledFormat(s.db.Path()).Check(tx); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketFailed)
		return err
	})
	if err != nil {
		return err
	}
	failed, err := readFailures(s.db)
	if err != nil {
		return fmt.Errorf("%s is damaged: %w", s.db.Path(), err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctl.OnApplied(s.applied) // waits for s.mu: no change is missed between the load and it
	if err := s.loadFromControl(failed); err != nil {
		s.ctl.OnApplied(nil)
		return err
	}
	return nil
}

// Servers reports the control group's servers as this server sees them; a
// Store without a Control has no group and reports none.
func (s *Store) Servers() (ServersReport, error) {
	if err := s.checkOpen(); err != nil {
		return ServersReport{}, err
	}
	r := ServersReport{Now: s.now().UTC(), Servers: []ServerStatus{}}
	if s.ctl != nil {
		r.Servers = s.ctl.GroupStatus()
	}
	return r, nil
}

// ctlCheckHere refuses a change of a volume the group places on another
// server, for a client that does not confirm with that server (see above).
// A volume the group does not know is not refused here.
func (s *Store) ctlCheckHere(id string) error {
	if err := s.ctl.CheckLeader(); err != nil {
		return err // the leader may know the volume
	}
	cv, _, ok := s.ctl.AppliedVolume(id)
	switch {
	case !ok || !s.othersApply(cv):
		return nil
	case len(cv.ReplicaSet().Replicas) > 1:
		return fmt.Errorf("%w: volume %s: its data is on the datapath servers %s (its replicas), and a majority of them must apply the change before it returns; "+
			"nothing was changed (this client does not confirm with them; a client of this release does)", ErrHeldElsewhere, id, strings.Join(cv.Replicas, ", "))
	}
	return fmt.Errorf("%w: volume %s: its data is on datapath server %s, not this one (%s), and that server must apply the change before it returns; "+
		"nothing was changed (this client does not confirm with that server; a client of this release does)", ErrHeldElsewhere, id, cv.Server, s.ctl.Self())
}

// ctlCheckHeldHere refuses FenceNode, for a client that does not confirm,
// when the node holds a live grant on a volume another server holds: that
// server would not have applied the fence when FenceNode returned. Nothing
// is fenced then; the caller learns which servers hold the node's other
// volumes.
func (s *Store) ctlCheckHeldHere(node string) error {
	var elsewhere []string
	for _, cv := range s.ctl.AppliedVolumes() {
		if !s.othersApply(cv) {
			continue
		}
		_, rows, _ := s.ctl.AppliedVolume(cv.ID)
		for _, a := range rows {
			if a.Node == node && a.State == StateGranted {
				elsewhere = append(elsewhere, cv.ID+" on "+cv.Server)
			}
		}
	}
	if len(elsewhere) == 0 {
		return nil
	}
	return fmt.Errorf("%w: fence node %s: it holds live grants on volumes whose data other servers hold (%s), which would not have applied the fence "+
		"when it returned; nothing was fenced (this client does not confirm with those servers; a client of this release does)", ErrHeldElsewhere, node, strings.Join(elsewhere[:min(len(elsewhere), 5)], ", "))
}
