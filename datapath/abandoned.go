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
// A file of a committed volume is never removed, even on a server behind the
// group: the sweep first waits for this server's applied state to settle
// (Control.Settled: every create proposed before, if committed at all, is
// applied here), and checks again, under the store's lock that the apply
// of a create takes too, that no volume names the file
// (TestStore_RemoveAbandoned_*). A create is proposed within seconds of its
// prepare, so one that is not applied after AbandonedAfter will not be.

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
		if _, err := s.RemoveAbandoned(ctx); err != nil && !errors.Is(err, errClosed) {
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
// returns their volume ids. It first waits, within ctx, for this server's
// applied state to settle; when it cannot, it removes nothing and says
// why. A store without a control group has none (Open removes its
// orphans).
func (s *Store) RemoveAbandoned(ctx context.Context) ([]string, error) {
	if s.ctl == nil {
		return nil, nil
	}
	ids, err := s.oldUnnamedFiles()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if err := s.ctl.Settled(ctx); err != nil {
		return nil, fmt.Errorf("%d data files no volume names, at least %s old (%s), kept: %w", len(ids), AbandonedAfter, strings.Join(ids, ", "), err)
	}
	var removed []string
	var errs []error
	for _, id := range ids {
		ok, err := s.removeIfAbandoned(id)
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
		if !ok || s.holdsFile(id) {
			continue
		}
		if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) >= AbandonedAfter {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// holdsFile says whether an open volume or a create or delete in flight
// holds the data file of id.
func (s *Store) holdsFile(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, busy := s.prov.fileOps[id]
	return busy || s.vols[id] != nil
}

// removeIfAbandoned removes the data file of id when, under s.mu (which the
// apply of a create takes to open it), no open volume, create in flight or
// volume of the applied state names it; a promise left for it as prepared
// is dropped with it.
func (s *Store) removeIfAbandoned(id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, busy := s.prov.fileOps[id]; busy || s.vols[id] != nil || s.closed {
		return false, nil
	}
	if _, _, named := s.ctl.AppliedVolume(id); named {
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
