package settings

import (
	"context"
	"time"
)

// Changes that Vigil saw but did not make reach the history too, recorded by the
// processes given WithObservedHistory (vigil-manager run; never the one-shot
// CLI commands, which must not write when they only read). Several such
// processes watch the same overlay and store, so each checks the history in the
// transaction that would add a record, and records only what it does not
// already show:
//
//   - The overlay (ActorConfigMap, Identity the file): a process records a
//     change of the value in force that an overlay change caused (a file added,
//     changed to another good value, or removed), unless the newest overlay
//     record of that setting already has the same new value and source. At
//     startup it compares what it sees with that newest record, so a change made
//     while no manager ran is recorded once too. A quick succession of changes
//     that a lagging replica sees late may be recorded again by it.
//   - The store (ActorStore): a store change that comes with no record (kubectl
//     edit of the ConfigMap, an older vigil-manager) is found by comparing the
//     store's value with the newest record of the store's layer (any record but
//     an overlay one). Vigil's own writes commit their record with the value, so
//     they always agree and are never recorded twice. Edits outside Vigil that
//     follow each other faster than a process records them may appear as one
//     change, from the last recorded value to the current one.
//
// Records are written by one goroutine in the order seen; those still queued
// when Close is called are dropped (another process, or the next start, records
// the overlay's state again).

// WithObservedHistory makes New record in the store's history the changes this
// process sees but did not make: overlay changes (ActorConfigMap) and store
// changes made outside Vigil (ActorStore). Give it to long-running processes;
// several may share a store and overlay.
func WithObservedHistory() Option {
	return func(o *options) { o.observe = true }
}

type observationKind int

const (
	observedStore   observationKind = iota // the store's value of a setting changed
	observedOverlay                        // the value in force changed through the overlay
)

// sourced is a value with where it came from.
type sourced struct {
	text string
	src  Source
}

// observation is a change this process saw, to be recorded if the history does
// not show it yet.
type observation struct {
	kind    observationKind
	setting string
	path    string // the overlay file
	old     sourced
	new     sourced
	startup bool          // the overlay's first read: old is unknown
	below   sourced       // at startup: the value in force beneath the overlay
	flushed chan struct{} // not a change: closed when every earlier one was handled (tests)
}

// observeLocked queues an observation when this process records them.
func (s *Settings) observeLocked(o observation) {
	if s.observed != nil && !s.closed {
		s.observed.push(o)
	}
}

// recordObserved writes the queued observations that the history lacks, until
// ctx ends.
func (s *Settings) recordObserved(ctx context.Context) {
	for o := range s.observed.out {
		if o.flushed != nil {
			close(o.flushed)
			continue
		}
		err := s.store.Update(ctx, func(values map[string]string, newest func(func(ChangeRecord) bool) (ChangeRecord, bool)) ([]ChangeRecord, error) {
			var r *ChangeRecord
			if o.kind == observedStore {
				r = storeChangeRecord(values, newest, o.setting)
			} else {
				r = overlayChangeRecord(newest, o)
			}
			if r == nil {
				return nil, nil
			}
			r.Time = time.Now()
			return []ChangeRecord{*r}, nil
		})
		if err != nil && ctx.Err() == nil {
			s.log.Warn("could not record an observed settings change in the history", "setting", o.setting, "error", err)
		}
	}
}

// storeChangeRecord is the record of a store change made outside Vigil, or nil
// when the newest record of the store's layer already shows the store's value.
func storeChangeRecord(values map[string]string, newest func(func(ChangeRecord) bool) (ChangeRecord, bool), name string) *ChangeRecord {
	want := sourced{byName[name].Default, SourceDefault}
	if r, ok := newest(func(r ChangeRecord) bool { return r.Setting == name && r.Actor.Source != ActorConfigMap }); ok {
		want = sourced{r.New, r.NewSource}
	}
	text, src := storeLayer(values, name)
	if (sourced{text, src}) == want {
		return nil
	}
	return &ChangeRecord{Setting: name, Old: want.text, OldSource: want.src, New: text, NewSource: src,
		Actor: Actor{Source: ActorStore}}
}

// overlayChangeRecord is the record of an overlay change, or nil when the
// newest overlay record of the setting already shows it (another process
// recorded it) or, at startup, when there is nothing to say.
func overlayChangeRecord(newest func(func(ChangeRecord) bool) (ChangeRecord, bool), o observation) *ChangeRecord {
	last, ok := newest(func(r ChangeRecord) bool { return r.Setting == o.setting && r.Actor.Source == ActorConfigMap })
	if ok && last.New == o.new.text && last.NewSource == o.new.src {
		return nil
	}
	old := o.old
	if o.startup {
		switch {
		case ok && last.NewSource == SourceManaged:
			old = sourced{last.New, SourceManaged} // changed or removed while no one watched
		case o.new.src == SourceManaged:
			old = o.below // newly managed
		default:
			return nil // not managed, and the history does not say it was
		}
	}
	if old == o.new {
		return nil
	}
	return &ChangeRecord{Setting: o.setting, Old: old.text, OldSource: old.src, New: o.new.text,
		NewSource: o.new.src, Actor: Actor{Source: ActorConfigMap, Identity: o.path}}
}

// observeStore queues a check of the store's value of name against the history.
func (s *Settings) observeStore(name string) {
	if s.observed == nil {
		return
	}
	if _, known := byName[name]; !known {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observeLocked(observation{kind: observedStore, setting: name})
}

// observeOverlayLocked queues what an overlay read changed: at the first read,
// the state of every setting (startup); later, each change of a value in force
// between before and the snapshot now.
func (s *Settings) observeOverlayLocked(before *snapshot, paths map[string]string) {
	if s.observed == nil {
		return
	}
	after := s.snap.Load()
	for i := range definitions {
		name := definitions[i].Name
		o := observation{kind: observedOverlay, setting: name, path: paths[name],
			old: sourced{before.values[name].text, before.source[name]},
			new: sourced{after.values[name].text, after.source[name]}}
		if mk, ok := s.managed[name]; ok {
			o.path = mk.path
			if mk.refused != nil && mk.good == nil {
				continue // a blocking problem, reported as such: no change to record
			}
		}
		if !s.overlaySeen {
			o.startup = true
			v, src := s.belowOverlayLocked(name)
			o.below = sourced{v.text, src}
		} else if o.old == o.new {
			continue
		}
		s.observeLocked(o)
	}
	s.overlaySeen = true
}

// belowOverlayLocked is the value that would be in force without the overlay.
func (s *Settings) belowOverlayLocked(name string) (value, Source) {
	if v, ok := s.stored[name]; ok {
		return v, SourceStore
	}
	return s.defaults[name], SourceDefault
}
