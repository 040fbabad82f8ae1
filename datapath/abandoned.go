package datapath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Abandoned data files. Under a control group a data file can exist that no
// volume names: PrepareVolume made it for a placed create that was never
// committed (the client died, or the name went to a volume elsewhere), or
// this server's own create had an unknown outcome (its file is kept in case
// the group commits it late). Such a file is removed once it is
// AbandonedAfter old and no volume of the group names it, by a sweep at
// start and every abandonedSweep, never while its create is in flight.
//
// A file of a committed volume is never removed, even when a create naming
// it commits while the sweep runs: before removing a file, the server
// commits it as abandoned through the group (Control.AbandonFile), which the
// state machine refuses when a volume has its id and which makes it refuse
// every later create of that id. The log orders the two: either the create
// came first and the file is kept, or the abandon did and the create fails
// with an error that says to create the volume again (a new prepare, a new
// file). A check of the applied state alone cannot close this: a create the
// leader commits between the check and the removal would name a removed
// file (TestStore_RemoveAbandoned_CreateCommitsDuringTheSweep). Only the
// leader can commit, so a follower keeps its abandoned files, and says so,
// until it leads; the leader also waits for its applied state to settle
// first and checks again, under the store's lock that the apply of a create
// takes too, that no volume names the file (TestStore_RemoveAbandoned_*).

// AbandonedAfter is how old a data file no volume names must be before it
// is removed: well past PrepareHold, and past any create's retries.
const AbandonedAfter = 10 * time.Minute

// abandonedSweep is the interval between two sweeps.
const abandonedSweep = time.Minute

// settleWait bounds a sweep's wait for this server's state to settle.
const settleWait = 10 * time.Second

// sweepAbandoned runs removeMovedAwayFiles and RemoveAbandoned now and
// every abandonedSweep until stop is closed.
func (s *Store) sweepAbandoned(stop <-chan struct{}) {
	tick := time.NewTicker(abandonedSweep)
	defer tick.Stop()
	for {
		s.removeMovedAwayFiles()
		ctx, cancel := context.WithTimeout(context.Background(), settleWait)
		_, err := s.RemoveAbandoned(ctx)
		switch {
		case errors.Is(err, ErrNotLeader):
			s.log.Debug("datapath: data files no volume names are kept until this server leads", "err", err)
		case err != nil && !errors.Is(err, errClosed):
			s.log.Warn("datapath: data files no volume names are kept for now", "err", err)
		}
		cancel()
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// RemoveAbandoned removes the data files no volume of the group names that
// are at least AbandonedAfter old (by their modification time), and
// returns their volume ids, each committed as abandoned first. Only the
// leader removes them (a follower removes nothing and returns
// ErrNotLeader); it first waits, within ctx, for its applied state to
// settle; when it cannot, it removes nothing and says why. A store without
// a control group has none (Open removes its orphans).
func (s *Store) RemoveAbandoned(ctx context.Context) ([]string, error) {
	if s.ctl == nil {
		return nil, nil
	}
	ids, err := s.oldUnnamedFiles()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	kept := func(err error) error {
		return fmt.Errorf("%d data files no volume names, at least %s old (%s), kept: %w", len(ids), AbandonedAfter, strings.Join(ids, ", "), err)
	}
	if err := s.ctl.CheckLeader(); err != nil {
		return nil, kept(fmt.Errorf("only the group's leader commits a file as abandoned before removing it: %w", err))
	}
	if err := s.ctl.Settled(ctx); err != nil {
		return nil, kept(err)
	}
	var removed []string
	var errs []error
	for _, id := range ids {
		ok, err := s.removeIfAbandoned(ctx, id)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, id)
		}
	}
	return removed, errors.Join(errs...)
}

// oldUnnamedFiles lists the ids of the data files at least AbandonedAfter
// old that no open volume and no create in flight holds.
func (s *Store) oldUnnamedFiles() ([]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, volumesDir))
	if err != nil {
		return nil, fmt.Errorf("list volumes directory: %w", err)
	}
	now := s.now()
	var out []string
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), imgSuffix)
		if !ok || s.namedLocally(id) {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) >= AbandonedAfter {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// removeIfAbandoned removes the data file of id when no open volume, create
// in flight or volume of the applied state names it, and the group
// committed it as abandoned (which it refuses if a volume has the id).
// The commit comes first, so a create of the id committed at any moment
// either comes before it (the file is kept) or is refused; the checks under
// s.mu (which the apply of a create takes to open it) see a create this
// server proposed itself. A promise left for it as prepared is dropped
// with it.
func (s *Store) removeIfAbandoned(ctx context.Context, id string) (bool, error) {
	if s.namedLocally(id) {
		return false, nil
	}
	abandonCheckedHook(id)
	if err := s.ctl.AbandonFile(ctx, id, s.ctl.Self()); err != nil {
		if errors.Is(err, ErrAlreadyExists) {
			return false, nil // a create of it was committed meanwhile
		}
		return false, fmt.Errorf("commit the data file of %s as abandoned: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.namedLocked(id) {
		return false, nil
	}
	for name, pv := range s.prov.prepared {
		if pv.rec.ID == id {
			s.unprepareLocked(name, id)
		}
	}
	if err := os.Remove(s.imgPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("remove abandoned data file of %s: %w", id, err)
	}
	s.log.Warn("datapath: removed a data file no volume of the group names (a create that was never committed)", "volume", id, "after", AbandonedAfter)
	return true, nil
}

// abandonCheckedHook runs between the local checks of a file and its commit
// as abandoned (tests commit a create there).
var abandonCheckedHook = func(string) {}

// namedLocally is whether something of this server names the file of id,
// which is then kept: an open volume, a create or
// delete in flight, a volume of the applied state; or the store closed.
func (s *Store) namedLocally(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.namedLocked(id)
}

// namedLocked is namedLocally with s.mu held.
func (s *Store) namedLocked(id string) bool {
	if _, busy := s.prov.fileOps[id]; busy || s.vols[id] != nil || s.closed {
		return true
	}
	_, _, named := s.ctl.AppliedVolume(id)
	return named
}

// Data files of replicas the group moved away. When the group replaces this
// server's replica of a volume by another server's (a committed
// ReplaceReplica), this server stops serving the volume as it applies the
// change (applied: the volume's write lock waits for the I/O that passed
// the old set, then its file is closed) and removes the file at once,
// without committing anything: the applied state is the group's committed
// word that the copy is no longer one of the volume's. It removes it only
// when:
//
//   - the replica set it applied no longer names this server;
//   - the volume is not open here for I/O (closed first), and no create,
//     delete or prepare of the id is in flight here;
//   - this server has caught up with the group since it started
//     (caughtup.go). A server started again replays the log from its last
//     snapshot: an entry it replays that moves its replica away may be
//     followed by entries it has not replayed yet that name it again and
//     mark its copy in sync, the copy in this very file. Once caught up,
//     every change it applies is newer than any copy it holds.
//
// A file kept for one of those reasons is removed later by the pass that
// runs once the server has caught up and with every abandoned-file sweep
// (removeMovedAwayFiles), on followers too. The file is not kept for
// AbandonedAfter as a prepared file is: a change that names this server
// again later (ReplaceReplica back to it) makes its replica out of sync, to
// be rebuilt, so the old copy is never needed again; a removal that meets
// such a change leaves a replica without a file, which serves nothing
// until it is rebuilt, as any new replacement does.

// replicaFile is what this server knows of a data file whose id may be a
// volume's: the facts movedAwayKeep decides on.
type replicaFile struct {
	Known    bool // a volume of the applied state has the id
	Named    bool // its applied replica set names this server
	Open     bool // the volume is open here for I/O
	Busy     bool // a create, delete or prepare of the id is in flight here, or the store is closed
	CaughtUp bool // this server has caught up with the group since it started
}

// movedAwayKeep says why the data file f is kept, "" when it is the file of
// a replica the group moved away, to be removed now.
func movedAwayKeep(f replicaFile) string {
	switch {
	case !f.Known:
		return "no volume of the group has its id (the abandoned-file sweep's to remove)"
	case f.Named:
		return "the volume's replica set names this server"
	case f.Open:
		return "the volume is open here for I/O"
	case f.Busy:
		return "a create, delete or prepare of its id is in flight here"
	case !f.CaughtUp:
		return "this server has not caught up with the group's log since it started, and a later change may name it again"
	}
	return ""
}

// removeMovedAway removes the data file of volume id when movedAwayKeep
// says so, under s.mu (which the opening of a volume the group names here
// takes too). It reports whether it removed a file, or why it kept it.
func (s *Store) removeMovedAway(id string) (removed bool, kept string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cv, _, known := s.ctl.AppliedVolume(id)
	_, busy := s.prov.fileOps[id]
	f := replicaFile{Known: known, Named: known && s.isReplicaHere(cv), Open: s.vols[id] != nil, Busy: busy || s.closed, CaughtUp: s.caughtUp.Load()}
	if kept := movedAwayKeep(f); kept != "" {
		return false, kept, nil
	}
	if err := os.Remove(s.imgPath(id)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, "", nil
		}
		return false, "", fmt.Errorf("remove the data file of volume %s, whose replica the group moved to another server: %w", id, err)
	}
	s.log.Warn("datapath: removed the data file of a replica the group moved to another server", "volume", id, "replicas", strings.Join(cv.Replicas, ", "))
	return true, "", nil
}

// dropMovedAway removes, as this server applies the change, the data file
// of a volume whose replica the group moved away, or says why it is kept.
func (s *Store) dropMovedAway(id string) {
	switch removed, kept, err := s.removeMovedAway(id); {
	case err != nil:
		s.log.Warn("datapath: the data file of a replica the group moved away is kept for now", "volume", id, "err", err)
	case !removed && kept != "":
		s.log.Info("datapath: the data file of a replica the group moved away is kept for now", "volume", id, "why", kept)
	}
}

// removeMovedAwayFiles removes the data files of replicas the group moved
// away that were kept when this server applied the move (it had not caught
// up, or the removal failed); nothing before this server has caught up.
func (s *Store) removeMovedAwayFiles() {
	if s.ctl == nil || !s.caughtUp.Load() {
		return
	}
	entries, err := os.ReadDir(filepath.Join(s.dir, volumesDir))
	if err != nil {
		s.log.Warn("datapath: list volumes directory", "err", err)
		return
	}
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), imgSuffix); ok {
			if _, _, err := s.removeMovedAway(id); err != nil {
				s.log.Warn("datapath: the data file of a replica the group moved away is kept for now", "volume", id, "err", err)
			}
		}
	}
}
