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

// sweepAbandoned runs RemoveAbandoned now and every abandonedSweep until
// stop is closed.
func (s *Store) sweepAbandoned(stop <-chan struct{}) {
	tick := time.NewTicker(abandonedSweep)
	defer tick.Stop()
	for {
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
