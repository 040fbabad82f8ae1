package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// Keeping the dirty-region maps of a volume's out-of-sync replicas
// (dirtymap.go, dirtyfile.go) with the replica set this server applied.
//
// While this server's copy is in sync, it keeps one map per replica out of
// sync and marks each write's range in every one of them, durably, before
// it writes (writeOnce): a write it acknowledged is in the maps on its disk.
// Each time it applies a change of the volume (refreshLocked, under the
// volume's write lock, so no write is between the old set and the new) it
// decides what becomes of the maps (decideDirty, a pure function):
//
//   - a replica that was in sync at member epoch E-1, taken out at E while
//     this server stays in sync, starts an EMPTY map at E, if this server
//     has caught up since it started (caughtup.go: before, it may be
//     replaying the change from its log after a restart, and have
//     acknowledged writes after it in its earlier life). That is correct
//     because a write is acknowledged only once it is on every in-sync
//     replica: every write acknowledged before E, at E-1 or earlier, was on
//     every replica in sync then, the one now out among them; and a write
//     this server takes at E or later is marked. (A write at E-1 in flight
//     at the apply either ended before it, as the apply takes the volume's
//     write lock, or is refused at this server as stale.)
//     A write at E-1 that the leaving replica missed (that is why it
//     left) is not acknowledged at E-1 either; the writer acknowledges it
//     only after the change, and before that sends it again at E to the
//     replicas still in sync (the client's ack rule, replicatedWrite), so
//     this server marks it in the map it started at E, although it had
//     already taken it at E-1, before the map existed.
//   - any other out-of-sync replica without a map starts an ALL-DIRTY one:
//     a replacement, which has nothing; one already out when this server
//     came back in sync, or when it started, or after a change this server
//     did not see step by step, whose missed writes this server cannot name.
//   - a map is carried to the next member epoch (its header's through
//     moved on, durably) only when the epoch moves by one while this server
//     stays in sync and the replica stays out; on any other jump it is
//     replaced by an all-dirty one.
//   - a replica back in sync, or no longer a replica (replaced), loses its
//     map; so do all of them when this server's own copy is out of sync or
//     moved away, or the volume deleted: an out-of-sync copy does not know
//     what it missed, so its maps are not kept to be trusted later.
//
// At start a map file is trusted only when its header says it was kept
// through the member epoch the server finds applied; any other (a crash
// between a change's apply and the map's update, a torn file) makes the map
// all dirty. A stale file left by a crash is therefore never taken for a
// current one: member epochs only grow.

// dirtyDo is what decideDirty says to do with one replica's map.
type dirtyDo int

const (
	dirtyCarry      dirtyDo = iota + 1 // keep it; record it kept through the new member epoch
	dirtyStartClean                    // a new, empty map at the new member epoch
	dirtyStartAll                      // a new, all-dirty map at the new member epoch (replacing any)
	dirtyDrop                          // remove the map
)

type dirtyAction struct {
	Replica string
	Do      dirtyDo
}

// dirtyHave is what decideDirty needs of a map this server has.
type dirtyHave struct {
	Through uint64
	Broken  bool // its file failed: start anew
}

// decideDirty decides the maps of cur's out-of-sync replicas on server
// self, which had the maps in have and had applied old before cur (old is
// the zero set when this server knows no earlier one: at start). live says
// that this server has caught up with the group since it started, so that
// the change is new to it: before, it may be replaying a change it applied
// in an earlier life, and may have acknowledged writes after it then, whose
// marks an empty map would not hold.
func decideDirty(self string, old, cur ReplicaSet, have map[string]dirtyHave, live bool) []dirtyAction {
	var out []dirtyAction
	selfIn := slices.Contains(cur.Replicas, self) && slices.Contains(cur.InSync, self)
	behind := map[string]bool{}
	if selfIn {
		for _, r := range cur.Replicas {
			if !slices.Contains(cur.InSync, r) {
				behind[r] = true
			}
		}
	}
	for r := range have {
		if !behind[r] {
			out = append(out, dirtyAction{r, dirtyDrop})
		}
	}
	known := old.VolumeID != ""
	oneStep := known && cur.MemberEpoch == old.MemberEpoch+1 && slices.Contains(old.InSync, self)
	for r := range behind {
		h, ok := have[r]
		switch {
		case ok && !h.Broken && h.Through == cur.MemberEpoch:
			// nothing moved (a grant, a fence): the map goes on
		case ok && !h.Broken && oneStep && h.Through == old.MemberEpoch && !slices.Contains(old.InSync, r):
			out = append(out, dirtyAction{r, dirtyCarry})
		case !ok && live && oneStep && slices.Contains(old.InSync, r):
			out = append(out, dirtyAction{r, dirtyStartClean})
		default:
			out = append(out, dirtyAction{r, dirtyStartAll})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Replica < out[j].Replica })
	return out
}

// refreshDirtyLocked applies decideDirty to v after this server applied
// old → v.set; at start (old the zero set) it first reads v's map files.
// A map that cannot be made is kept broken: every write is then refused
// (markDirtyLocked), never acknowledged unmarked. The caller holds v.mu for
// writing.
func (s *Store) refreshDirtyLocked(v *volume, old ReplicaSet) {
	if s.ctl == nil {
		return
	}
	if v.dirty == nil {
		v.dirty = s.loadDirty(v.rec.ID)
	}
	have := make(map[string]dirtyHave, len(v.dirty))
	for r, d := range v.dirty {
		have[r] = dirtyHave{Through: d.header().Through, Broken: d.brokenErr() != nil}
	}
	cur := v.set
	for _, a := range decideDirty(s.ctl.Self(), old, cur, have, s.caughtUp.Load()) {
		d := v.dirty[a.Replica]
		switch a.Do {
		case dirtyDrop:
			s.dropDirty(d)
			delete(v.dirty, a.Replica)
		case dirtyCarry:
			if err := d.setThrough(cur.MemberEpoch); err != nil {
				s.log.Error("datapath: a dirty-region map could not be carried to the new member epoch; the volume's writes are refused here", "volume", v.rec.ID, "replica", a.Replica, "err", err)
			}
		case dirtyStartClean, dirtyStartAll:
			s.dropDirty(d)
			h := dirtyHeader{VolumeID: v.rec.ID, Replica: a.Replica, Size: v.rec.Size, Start: cur.MemberEpoch, Through: cur.MemberEpoch, All: a.Do == dirtyStartAll}
			nd, err := createDirtyFile(dirtyPath(filepath.Join(s.dir, volumesDir), v.rec.ID, a.Replica, cur.MemberEpoch), h)
			if err != nil {
				s.log.Error("datapath: a dirty-region map could not be made; the volume's writes are refused here", "volume", v.rec.ID, "replica", a.Replica, "err", err)
				nd = brokenDirty(h, err)
			}
			v.dirty[a.Replica] = nd
		}
	}
}

// dropDirtyLocked removes every map of v (deleted, or its copy moved away).
// The caller holds v.mu for writing.
func (s *Store) dropDirtyLocked(v *volume) {
	for r, d := range v.dirty {
		s.dropDirty(d)
		delete(v.dirty, r)
	}
}

func (s *Store) dropDirty(d *dirtyFile) {
	if d == nil {
		return
	}
	if err := d.remove(); err != nil {
		s.log.Warn("datapath: a dirty-region map file not removed; it is never trusted again", "file", d.path, "err", err)
	}
}

// loadDirty reads the map files of volume id, the newest (largest start)
// per replica; older ones are removed. A file that cannot be read is
// logged and left out: decideDirty then starts that replica all dirty.
func (s *Store) loadDirty(id string) map[string]*dirtyFile {
	out := map[string]*dirtyFile{}
	dir := filepath.Join(s.dir, volumesDir)
	names, _ := filepath.Glob(filepath.Join(dir, id+dirtyFileInfix+"*"))
	sort.Slice(names, func(i, j int) bool { // newest last per replica
		_, ri, si, _ := parseDirtyName(filepath.Base(names[i]))
		_, rj, sj, _ := parseDirtyName(filepath.Base(names[j]))
		return ri < rj || ri == rj && si < sj
	})
	for i, p := range names {
		_, r, _, ok := parseDirtyName(filepath.Base(p))
		if !ok || strings.HasSuffix(p, ".tmp") {
			_ = os.Remove(p)
			continue
		}
		if i+1 < len(names) {
			if _, next, _, _ := parseDirtyName(filepath.Base(names[i+1])); next == r {
				_ = os.Remove(p) // an older map of the same replica
				continue
			}
		}
		d, err := openDirtyFile(p)
		if err == nil && (d.hdr.VolumeID != id || d.hdr.Replica != r) {
			d.close()
			err = errors.New("its header names another volume or replica than its name")
		}
		if err != nil {
			s.log.Error("datapath: a dirty-region map cannot be read; that replica's map starts all dirty (a full copy)", "file", p, "err", err)
			_ = os.Remove(p)
			continue
		}
		out[r] = d
	}
	return out
}

// markDirtyLocked marks the byte range in every map of v, durably, before
// the write it stands for. The caller holds v.mu (for reading suffices).
func (v *volume) markDirtyLocked(off, n int64) error {
	for _, d := range v.dirty {
		if err := d.mark(off, n); err != nil {
			return err
		}
	}
	return nil
}

// closeDirtyLocked closes v's map files and keeps them (the store closes).
func (v *volume) closeDirtyLocked() {
	for _, d := range v.dirty {
		d.close()
	}
}

// brokenDirty is a map whose file could not be made: every mark fails.
func brokenDirty(h dirtyHeader, err error) *dirtyFile {
	m, _ := NewDirtyMap(max(h.Size, 1))
	return &dirtyFile{hdr: h, m: m, broken: err}
}

// brokenErr is the map file's latched failure, nil while it works.
func (d *dirtyFile) brokenErr() error {
	d.persist.Lock()
	defer d.persist.Unlock()
	return d.broken
}

// DirtyRegions is one in-sync replica's dirty-region map of another
// replica, out of sync, as DirtyRegions reads it.
type DirtyRegions struct {
	VolumeID, Replica string
	// Since is the member epoch at which this server started the map; it
	// holds every write this server took from then on.
	Since uint64
	// MemberEpoch is the volume's member epoch this server applied.
	MemberEpoch uint64
	// All: every region is dirty (a full copy): the map was started
	// without knowing what the replica missed, or its file was lost.
	All bool
	// Ranges are the dirty byte ranges, in order, adjacent regions joined;
	// Bytes is their sum.
	Ranges []DirtyRange
	Bytes  int64
}

// DirtyRegions reads this server's map of replica's copy of volumeID, for
// the controller (node "" and epoch 0) or for the writer node at its attach
// epoch, which must hold a live grant at exactly that epoch (ErrFenced
// otherwise). Refused too, reading nothing: a volume this server holds no
// copy of (as every I/O call, ErrNotFound or ErrNotHolder), a replica that
// is not out of sync or not a replica (ErrInvalidArgument, naming the
// in-sync replicas), and this server's own copy out of sync
// (ErrReplicaNotInSync naming the in-sync replicas: their maps are the ones
// to read).
func (s *Store) DirtyRegions(volumeID, replica, node string, epoch uint64) (DirtyRegions, error) {
	if node != "" {
		if err := validNode(node); err != nil {
			return DirtyRegions{}, err
		}
	} else if epoch != 0 {
		return DirtyRegions{}, fmt.Errorf("%w: dirty regions of volume %s: epoch %d without a node; the controller asks with neither, a writer with both", ErrInvalidArgument, volumeID, epoch)
	}
	v, err := s.lookupHeld(volumeID)
	if err != nil {
		return DirtyRegions{}, err
	}
	if s.ctl == nil {
		return DirtyRegions{}, fmt.Errorf("%w: dirty regions of volume %s: this server runs without a control group, so its volumes have one copy and no replica out of sync", ErrInvalidArgument, volumeID)
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	if node != "" {
		if err := v.checkIO("read dirty regions of", node, epoch); err != nil {
			return DirtyRegions{}, err
		}
	}
	set := v.set
	if in := s.notInSyncLocked(v); in != nil {
		return DirtyRegions{}, s.errNotInSync("read dirty regions of", volumeID, set.MemberEpoch, in)
	}
	if !slices.Contains(set.Replicas, replica) || slices.Contains(set.InSync, replica) {
		return DirtyRegions{}, fmt.Errorf("%w: dirty regions of volume %s for server %q: it is not a replica out of sync at member epoch %d (replicas %s, in sync %s); only an out-of-sync replica has a map",
			ErrInvalidArgument, volumeID, replica, set.MemberEpoch, strings.Join(set.Replicas, ", "), strings.Join(set.InSync, ", "))
	}
	d := v.dirty[replica]
	if d == nil {
		return DirtyRegions{}, fmt.Errorf("dirty regions of volume %s for server %s: no map is kept (this server's copy is not in sync): %w", volumeID, replica, ErrNotApplied)
	}
	if err := d.brokenErr(); err != nil {
		return DirtyRegions{}, err
	}
	m, h := d.snapshot(), d.header()
	return DirtyRegions{VolumeID: volumeID, Replica: replica, Since: h.Start, MemberEpoch: set.MemberEpoch, All: m.All(), Ranges: m.Ranges(), Bytes: m.Bytes()}, nil
}

// dirtyPage is the part of ranges from byte from on (a range that holds
// from cut there), at most max of them, and the from of the next page (0:
// none).
func dirtyPage(ranges []DirtyRange, from int64, max int) (page []wire.DirtyRange, next int64) {
	i := sort.Search(len(ranges), func(i int) bool { return ranges[i].Off+ranges[i].Len > from })
	for ; i < len(ranges); i++ {
		if len(page) == max {
			return page, ranges[i].Off
		}
		r := ranges[i]
		if r.Off < from {
			r.Len -= from - r.Off
			r.Off = from
		}
		page = append(page, wire.DirtyRange{Off: r.Off, Len: r.Len})
	}
	return page, 0
}
