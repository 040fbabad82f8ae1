package raftstate

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// Volume is a volume of the control state: its record, the member that
// holds its data (Server) and the highest epoch ever issued for it.
type Volume = datapath.ControlVolume

// Leave is a graceful stop a node announced.
type Leave = datapath.NodeLeave

// FSM is the replicated state machine of the control state: volumes and
// their placement, attachment tables with epochs, announced stops, and the
// members' addresses. Apply is deterministic: it reads no clock and draws no
// random number; what it records comes from the command. Raft calls Apply,
// Snapshot and Restore from one goroutine; reads may come from any.
type FSM struct {
	mu sync.RWMutex
	st state
	// logs, when set, is the server's log store, against which last is
	// checked (guard.go).
	logs raft.LogStore
	// last is the last command applied (or restored with a snapshot).
	last appliedEntry
	// diverged, once set, refuses every apply, snapshot and read.
	diverged error

	// observer, when set, is called with the volumes each apply touched,
	// after the change and before Apply returns (OnApplied).
	obsMu    sync.Mutex
	observer func(volumeIDs []string)

	// done is the last command applied and observed (applied.go).
	doneMu sync.Mutex
	done   doneMark
}

// OnApplied sets the function called with the ids of the volumes each
// applied entry (or restored snapshot) touched, after the change and before
// Apply returns, on Raft's apply goroutine; nil removes it. It runs with no
// lock of the FSM held, so it may read the FSM.
func (f *FSM) OnApplied(fn func(volumeIDs []string)) {
	f.obsMu.Lock()
	f.observer = fn
	f.obsMu.Unlock()
}

// notify calls the observer with ids.
func (f *FSM) notify(ids []string) {
	f.obsMu.Lock()
	fn := f.observer
	f.obsMu.Unlock()
	if fn != nil && len(ids) > 0 {
		fn(ids)
	}
}

type state struct {
	vols    map[string]*volState
	names   map[string]string // name -> id
	leaves  map[string]Leave
	servers map[string]Server
	// abandoned: the ids of data files committed as abandoned (removed or
	// about to be), with the server that held each; no create may use them.
	abandoned map[string]string
}

type volState struct {
	vol  Volume
	rows map[string]rowState
	// forced: the last force of its replica set (force.go), if any.
	forced *ForceAudit
}

type rowState struct {
	row     datapath.AttachRow
	updated time.Time
}

// result is what Apply returns for a command.
type result struct {
	epoch  uint64
	volume Volume
	fenced []datapath.FencedVolume
	err    error
	// touched: the volumes the command changed (for the observer).
	touched []string
}

// NewFSM returns an empty state machine.
func NewFSM() *FSM { return &FSM{st: newState()} }

func newState() state {
	return state{vols: map[string]*volState{}, names: map[string]string{}, leaves: map[string]Leave{}, servers: map[string]Server{}, abandoned: map[string]string{}}
}

// Apply applies one committed log entry. A malformed entry, an unknown op or
// a command the rules refuse changes nothing and returns the error as its
// result, alike on every server.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	res := f.applyEntry(l)
	f.notify(res.touched)
	if !errors.Is(res.err, ErrDiverged) {
		f.markDone(appliedEntry{Index: l.Index, Term: l.Term})
	}
	return res
}

func (f *FSM) applyEntry(l *raft.Log) result {
	c, err := decodeCommand(l.Data)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkLocked(); err != nil {
		return result{err: err}
	}
	f.last = appliedEntry{Index: l.Index, Term: l.Term}
	if err != nil {
		return result{err: err}
	}
	res := f.st.apply(c)
	switch {
	case res.err != nil:
	case c.Op == OpFenceNode:
		for _, fv := range res.fenced {
			res.touched = append(res.touched, fv.VolumeID)
		}
	case c.VolumeID != "" && c.Op != OpAbandonFile: // no volume changed
		res.touched = []string{c.VolumeID}
	}
	return res
}

func (s *state) apply(c Command) result {
	switch c.Op {
	case OpCreateVolume:
		return s.create(c)
	case OpImportVolume:
		return s.importVolume(c)
	case OpDeleteVolume:
		return result{err: s.delete(c.VolumeID)}
	case OpGrant, OpFence, OpRelease:
		return s.attach(c)
	case OpFenceNode:
		return result{fenced: s.fenceNode(c.Node, c.At)}
	case OpLeave:
		s.pruneLeaves(c.At)
		s.leaves[c.Node] = Leave{Node: c.Node, Until: c.Until, Announced: c.At}
		return result{}
	case OpClearLeave:
		s.pruneLeaves(c.At)
		if l, ok := s.leaves[c.Node]; ok && !c.At.Before(l.Announced.Add(datapath.LeaveSettle)) {
			delete(s.leaves, c.Node)
		}
		return result{}
	case OpReplicaOutOfSync, OpReplicaInSync, OpReplaceReplica:
		return s.changeReplicas(c)
	case OpForceReplicas:
		return s.forceReplicas(c)
	case OpAbandonFile:
		return result{err: s.abandon(c.VolumeID, c.Server)}
	case OpAddServer:
		return result{err: s.addServer(*c.Member)}
	case OpRemoveServer:
		return result{err: s.removeServer(c.Member.ID)}
	}
	return result{err: fmt.Errorf("%w: unknown op %q", ErrBadCommand, c.Op)} // decodeCommand let it pass: a bug
}

// create makes a volume, idempotently by name.
func (s *state) create(c Command) result {
	if id, ok := s.names[c.Name]; ok {
		v := s.vols[id].vol
		if v.Size != c.Size || v.Access != c.Access {
			return result{err: fmt.Errorf("%w: volume %q is %s with %d bytes and mode %s; asked for %d bytes and mode %s",
				datapath.ErrAlreadyExists, c.Name, v.ID, v.Size, v.Access, c.Size, c.Access)}
		}
		if r := len(v.ReplicaSet().Replicas); r != max(len(c.Replicas), 1) {
			return result{err: fmt.Errorf("%w: volume %q is %s with %d replicas; asked for %d",
				datapath.ErrAlreadyExists, c.Name, v.ID, r, max(len(c.Replicas), 1))}
		}
		return result{volume: v}
	}
	if old, ok := s.vols[c.VolumeID]; ok {
		return result{err: fmt.Errorf("%w: volume id %s is taken by volume %q; propose another id", datapath.ErrInvalidArgument, c.VolumeID, old.vol.Name)}
	}
	if server, ok := s.abandoned[c.VolumeID]; ok {
		return result{err: fmt.Errorf("%w: the data file prepared under volume id %s was removed by server %s as abandoned (no volume named it for %s); create the volume again, which prepares a new file",
			datapath.ErrNotFound, c.VolumeID, server, datapath.AbandonedAfter)}
	}
	if _, ok := s.servers[c.Server]; !ok {
		return result{err: fmt.Errorf("%w: volume %q placed on server %q, which is not a member; members are %s",
			datapath.ErrInvalidArgument, c.Name, c.Server, s.memberList())}
	}
	if err := s.checkMembers(c.VolumeID, c.Replicas...); err != nil {
		return result{err: err}
	}
	v := Volume{Volume: datapath.Volume{ID: c.VolumeID, Name: c.Name, Size: c.Size, Access: c.Access, Created: c.At.UTC().Truncate(time.Microsecond)}, Server: c.Server}
	if len(c.Replicas) > 0 {
		r := slices.Clone(c.Replicas)
		v.SetReplicaSet(datapath.ReplicaSet{VolumeID: v.ID, Holder: c.Server, Replicas: r, InSync: slices.Clone(r), MemberEpoch: firstMemberEpoch(len(r))})
	}
	s.vols[v.ID] = &volState{vol: v, rows: map[string]rowState{}}
	s.names[v.Name] = v.ID
	return result{volume: v}
}

// abandon records the data file of id on server as abandoned, unless a
// volume has that id (its create was committed: the file is not abandoned).
// Recording it again changes nothing.
func (s *state) abandon(id, server string) error {
	if vs, ok := s.vols[id]; ok {
		return fmt.Errorf("%w: volume id %s is volume %q's, held by server %s; its data file is not abandoned", datapath.ErrAlreadyExists, id, vs.vol.Name, vs.vol.Server)
	}
	if _, ok := s.abandoned[id]; !ok {
		s.abandoned[id] = server
	}
	return nil
}

// importVolume records a volume of the release before with its epoch and
// table, unless a volume of that id is already recorded (an import done
// again after a restart). A name taken by another id is refused.
func (s *state) importVolume(c Command) result {
	if vs, ok := s.vols[c.VolumeID]; ok {
		return result{volume: vs.vol}
	}
	if id, ok := s.names[c.Name]; ok {
		return result{err: fmt.Errorf("%w: import volume %s: its name %q is volume %s's", datapath.ErrAlreadyExists, c.VolumeID, c.Name, id)}
	}
	if _, ok := s.servers[c.Server]; !ok {
		return result{err: fmt.Errorf("%w: import volume %s onto server %q, which is not a member; members are %s",
			datapath.ErrInvalidArgument, c.VolumeID, c.Server, s.memberList())}
	}
	v := Volume{Volume: datapath.Volume{ID: c.VolumeID, Name: c.Name, Size: c.Size, Access: c.Access, Created: c.Created.UTC()}, Server: c.Server, Epoch: c.Epoch}
	vs := &volState{vol: v, rows: map[string]rowState{}}
	for _, r := range c.Rows {
		vs.rows[r.Node] = r.rowState()
	}
	s.vols[v.ID] = vs
	s.names[v.Name] = v.ID
	return result{volume: v}
}

// delete forgets a volume; an unknown id is not an error, a live grant is
// (the rules' CheckDelete).
func (s *state) delete(id string) error {
	vs, ok := s.vols[id]
	if !ok {
		return nil
	}
	if err := vs.table().CheckDelete(); err != nil {
		return err
	}
	delete(s.vols, id)
	delete(s.names, vs.vol.Name)
	return nil
}

// attach applies a grant, a fence or a release to one volume by the rules.
func (s *state) attach(c Command) result {
	vs, ok := s.vols[c.VolumeID]
	if !ok {
		return result{err: fmt.Errorf("%w: volume %s", datapath.ErrNotFound, c.VolumeID)}
	}
	t := vs.table()
	var (
		step datapath.AttachStep
		err  error
	)
	switch c.Op {
	case OpGrant:
		step, err = t.Grant(c.Node, c.Use)
	case OpFence:
		step, err = t.Fence(c.Node)
	default:
		step, err = t.Release(c.Node)
	}
	if err != nil {
		return result{err: err}
	}
	vs.record(step, c.At)
	if c.Op == OpFence {
		return result{epoch: step.Epoch}
	}
	return result{epoch: step.Row.Epoch}
}

// fenceNode fences node on every volume where its grant is live, in one
// entry: either every such volume is fenced or, before the entry is
// applied, none.
func (s *state) fenceNode(node string, at time.Time) []datapath.FencedVolume {
	ids := make([]string, 0, len(s.vols))
	for id, vs := range s.vols {
		if r, ok := vs.rows[node]; ok && r.row.Live() { // the rules decide below; this only skips the rest
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var out []datapath.FencedVolume
	for _, id := range ids {
		vs := s.vols[id]
		step, err := vs.table().FenceIfLive(node)
		if err != nil || !step.Changed {
			continue // the node was checked before the entry was proposed
		}
		vs.record(step, at)
		out = append(out, datapath.FencedVolume{VolumeID: id, Epoch: step.Epoch})
	}
	return out
}

// pruneLeaves drops the announcements that ran out by at.
func (s *state) pruneLeaves(at time.Time) {
	for n, l := range s.leaves {
		if !l.Until.After(at) {
			delete(s.leaves, n)
		}
	}
}

func (s *state) addServer(m Server) error {
	for _, o := range s.servers {
		if o.ID != m.ID && o.RaftAddress == m.RaftAddress {
			return fmt.Errorf("%w: server %s: raft address %s is already server %s's", datapath.ErrInvalidArgument, m.ID, m.RaftAddress, o.ID)
		}
	}
	s.servers[m.ID] = m
	return nil
}

// removeServer forgets a member, unless it holds a copy of volumes' data:
// those volumes would lose it without a committed change of their replicas.
func (s *state) removeServer(id string) error {
	if held := s.heldBy(id); len(held) > 0 {
		return fmt.Errorf("%w: server %s holds the data of %d volumes (%s); delete them, or replace their replicas on it, first",
			datapath.ErrInUse, id, len(held), strings.Join(held[:min(len(held), 5)], ", "))
	}
	delete(s.servers, id)
	return nil
}

func (s *state) memberList() string {
	ids := make([]string, 0, len(s.servers))
	for id := range s.servers {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return "none (add the servers first)"
	}
	sort.Strings(ids)
	return strings.Join(ids, ", ")
}

// table is the volume's attachment table as the rules see it.
func (vs *volState) table() datapath.AttachTable {
	rows := make(map[string]datapath.AttachRow, len(vs.rows))
	for n, r := range vs.rows {
		rows[n] = r.row
	}
	return datapath.AttachTable{VolumeID: vs.vol.ID, Access: vs.vol.Access, Epoch: vs.vol.Epoch, Rows: rows}
}

// record applies a step the rules decided, stamped with the command's time.
func (vs *volState) record(step datapath.AttachStep, at time.Time) {
	if !step.Changed {
		return
	}
	vs.vol.Epoch = step.Epoch
	vs.rows[step.Node] = rowState{row: step.Row, updated: at.UTC()}
}

// Snapshot captures the state for Raft's snapshots; it encodes it at once,
// so Apply may go on while the snapshot is written.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkLocked(); err != nil {
		return nil, err
	}
	data, err := encodeSnapshot(&f.st, f.last)
	if err != nil {
		return nil, err
	}
	return snapshot(data), nil
}

// Restore replaces the state with a snapshot's, after checking all of it.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, last, err := decodeSnapshot(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	ids := make([]string, 0, len(f.st.vols)+len(st.vols))
	for id := range f.st.vols {
		ids = append(ids, id)
	}
	for id := range st.vols {
		if _, ok := f.st.vols[id]; !ok {
			ids = append(ids, id)
		}
	}
	f.st, f.last, f.diverged = st, last, nil
	f.mu.Unlock()
	sort.Strings(ids)
	f.notify(ids)
	f.markDone(last)
	return nil
}
