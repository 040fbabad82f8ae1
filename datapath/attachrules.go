package datapath

import (
	"fmt"
	"maps"
	"sort"
)

// The rules of the attachment table, as pure functions: what a grant, a
// fence or a release does to one volume's table, decided from the table
// alone, with no clock, no lock and no disk. Store applies each step to its
// bbolt file (attach.go); the replicated control state (datapath/raftstate)
// applies the same steps in its state machine, so both follow one set of
// rules. TestAttachTable is their specification.

// AttachRow is one node's row of a volume's attachment table, as the rules
// see it (the time of the change is the caller's to record).
type AttachRow struct {
	// Epoch is the epoch of the node's grant, or for a fenced node the epoch
	// the volume moved to when the node was fenced.
	Epoch uint64
	State AttachmentState
	// Use is the grant's use as recorded: empty for a row recorded before
	// uses existed (read-write, see GrantedUse) and for a fence.
	Use GrantUse
}

// Live reports whether the row is a grant neither fenced nor released.
func (r AttachRow) Live() bool { return r.State == StateGranted }

// GrantedUse is the row's use; a row recorded before uses existed is
// read-write.
func (r AttachRow) GrantedUse() GrantUse {
	if r.Use == "" {
		return UseReadWrite
	}
	return r.Use
}

// AttachTable is one volume's attachment table: its access mode, the highest
// epoch ever issued for it, and one row per node it has seen.
type AttachTable struct {
	VolumeID string
	Access   AccessMode
	Epoch    uint64
	Rows     map[string]AttachRow
}

// AttachStep is one decided change of a table: the node's row after it and
// the volume's epoch after it. A step that changes nothing (Changed false)
// is not to be recorded.
type AttachStep struct {
	Node    string
	Epoch   uint64
	Row     AttachRow
	Changed bool
	// WasLive says whether the node held a live grant before the step.
	WasLive bool
}

// IsLive says whether the node holds a live grant after the step.
func (s AttachStep) IsLive() bool { return s.Row.Live() }

// Grant decides a grant of use to node: a node that already holds a live
// grant of that use keeps it and its epoch (nothing changes); one holding a
// live grant of another use has the use changed in place, epoch kept, after
// the same check as a new grant; any other node gets the volume's next epoch.
// A grant that conflicts with another node's live grant (conflict) is refused
// with ErrAttachedElsewhere.
func (t AttachTable) Grant(node string, use GrantUse) (AttachStep, error) {
	if err := use.Validate(); err != nil {
		return AttachStep{}, err
	}
	if err := validNode(node); err != nil {
		return AttachStep{}, err
	}
	old, had := t.Rows[node]
	live := had && old.Live()
	if live && old.GrantedUse() == use {
		return AttachStep{Node: node, Epoch: t.Epoch, Row: old, WasLive: true}, nil
	}
	if why := t.conflict(node, use); why != "" {
		return AttachStep{}, fmt.Errorf("%w: grant volume %s to node %s as %s: %s", ErrAttachedElsewhere, t.VolumeID, node, use, why)
	}
	if live {
		row := old
		row.Use = use
		return AttachStep{Node: node, Epoch: t.Epoch, Row: row, Changed: true, WasLive: true}, nil
	}
	return t.next(node, StateGranted, use), nil
}

// Fence decides the fence of node: the volume moves to its next epoch with
// the node recorded as fenced, whatever the node's row was (none, live,
// released or fenced before), so no I/O carrying an older epoch passes.
func (t AttachTable) Fence(node string) (AttachStep, error) {
	if err := validNode(node); err != nil {
		return AttachStep{}, err
	}
	return t.next(node, StateFenced, ""), nil
}

// FenceIfLive is Fence for a node that holds a live grant, and no change for
// any other (fencing a dead node on every volume, FenceNode).
func (t AttachTable) FenceIfLive(node string) (AttachStep, error) {
	if err := validNode(node); err != nil {
		return AttachStep{}, err
	}
	if old, ok := t.Rows[node]; !ok || !old.Live() {
		return AttachStep{Node: node, Epoch: t.Epoch, Row: old}, nil
	}
	return t.next(node, StateFenced, ""), nil
}

// Release decides the end of node's live grant: the row is marked released,
// epoch and use kept. A node without a live grant is left as it is.
func (t AttachTable) Release(node string) (AttachStep, error) {
	if err := validNode(node); err != nil {
		return AttachStep{}, err
	}
	old, ok := t.Rows[node]
	if !ok || !old.Live() {
		return AttachStep{Node: node, Epoch: t.Epoch, Row: old}, nil
	}
	row := old
	row.State = StateReleased
	return AttachStep{Node: node, Epoch: t.Epoch, Row: row, Changed: true, WasLive: true}, nil
}

// CheckDelete refuses, with ErrInUse, the delete of a volume on which a node
// holds a live grant.
func (t AttachTable) CheckDelete() error {
	for _, node := range sortedNodes(t.Rows) {
		if a := t.Rows[node]; a.Live() {
			return fmt.Errorf("%w: delete volume %s: node %s holds a live grant (epoch %d); fence or release it first", ErrInUse, t.VolumeID, node, a.Epoch)
		}
	}
	return nil
}

// With returns the table after step, leaving t as it was (its rows are
// copied). A step that changed nothing returns t itself.
func (t AttachTable) With(step AttachStep) AttachTable {
	if !step.Changed {
		return t
	}
	rows := maps.Clone(t.Rows)
	if rows == nil {
		rows = map[string]AttachRow{}
	}
	rows[step.Node] = step.Row
	t.Rows, t.Epoch = rows, step.Epoch
	return t
}

// next issues the volume's next epoch to node in state with use.
func (t AttachTable) next(node string, state AttachmentState, use GrantUse) AttachStep {
	old, had := t.Rows[node]
	return AttachStep{Node: node, Epoch: t.Epoch + 1, Row: AttachRow{Epoch: t.Epoch + 1, State: state, Use: use},
		Changed: true, WasLive: had && old.Live()}
}

// conflict says why node may not hold a live grant of use next to the other
// nodes' live grants, or "" when it may. An RWO volume has at most one live
// grant. On any volume a filesystem writer is the only writer: a filesystem
// mounted read-write on two nodes, or written underneath by another node, is
// corrupted. Readers never conflict on an RWX volume, nor do raw block
// writers among themselves.
func (t AttachTable) conflict(node string, use GrantUse) string {
	for _, other := range sortedNodes(t.Rows) {
		a := t.Rows[other]
		if other == node || !a.Live() {
			continue
		}
		switch {
		case t.Access == AccessRWO:
			return fmt.Sprintf("it is RWO and node %s holds a live grant (epoch %d); fence or release that node first", other, a.Epoch)
		case use == UseFilesystemWriter && a.GrantedUse().Writes():
			return fmt.Sprintf("a filesystem is mounted read-write on one node only, and node %s holds a live %s grant (epoch %d); "+
				"several nodes may write the volume only as raw block devices (volumeMode: Block)", other, a.GrantedUse(), a.Epoch)
		case use.Writes() && a.GrantedUse() == UseFilesystemWriter:
			return fmt.Sprintf("node %s has its filesystem mounted read-write (epoch %d), and no other node may write under it; fence or release that node first",
				other, a.Epoch)
		}
	}
	return ""
}

func sortedNodes(rows map[string]AttachRow) []string {
	out := make([]string, 0, len(rows))
	for n := range rows {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
