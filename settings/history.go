package settings

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Every change of a setting is recorded in the store, in the same transaction as
// the change itself, so a change and its record are never seen apart. The
// history is bounded (HistoryLimit records, oldest dropped) and read newest
// first with History.

// HistoryLimit is how many change records a store keeps; older ones are dropped.
const HistoryLimit = 500

// The values of Actor.Source.
const (
	ActorUI        = "ui"        // the manager's web UI
	ActorAPI       = "api"       // the manager's REST API
	ActorCLI       = "cli"       // vigil-manager settings set/reset
	ActorUnknown   = "unknown"   // Set and Reset, which do not say who calls
	ActorConfigMap = "configmap" // the managed overlay directory changed (recorded by a process that saw it)
	ActorStore     = "store"     // the store was changed outside Vigil (kubectl edit), seen by a process that watches it
)

// maxIdentity bounds Actor.Identity, in bytes.
const maxIdentity = 256

// Actor says who made a change.
type Actor struct {
	// Source is one of ActorUI, ActorAPI, ActorCLI, ActorUnknown (given to SetAs,
	// ResetAs and SetMany), ActorConfigMap and ActorStore (recorded by Vigil for
	// changes it saw but did not make).
	Source string `json:"source"`
	// Identity is who, where known: the bearer-token holder, the OS user; for
	// ActorConfigMap the overlay file; "" when unknown. Free text, at most 256
	// bytes, no control characters.
	Identity string `json:"identity,omitempty"`
}

// ChangeRecord is one entry of the change history. Old and New are full
// canonical values, never "" for "the default": OldSource and NewSource say
// where each came from (SourceDefault when it was the default). A record made
// by a write through the store (SetAs, ResetAs, SetMany, ActorStore) describes
// the store's layer: its sources are SourceStore or SourceDefault. A record of
// the overlay (ActorConfigMap) describes the value in force, before and after
// the overlay file changed. A value the store held that does not parse is shown
// as stored.
type ChangeRecord struct {
	Time      time.Time `json:"time"`
	Setting   string    `json:"setting"`
	Old       string    `json:"old"`
	New       string    `json:"new"`
	OldSource Source    `json:"oldSource"`
	NewSource Source    `json:"newSource"`
	Actor     Actor     `json:"actor"`
}

// UpdateFunc is the body of a Store.Update transaction. It changes values in
// place (set, add or delete names) and returns the records to append to the
// history, oldest first. newest finds the newest record of the history, as of
// this transaction, for which match is true.
type UpdateFunc func(values map[string]string, newest func(match func(ChangeRecord) bool) (ChangeRecord, bool)) ([]ChangeRecord, error)

// More sentinel errors of the history.
var (
	// ErrInvalidActor: an Actor given to SetAs, ResetAs or SetMany has an
	// unknown source or an identity that is too long or holds control characters.
	ErrInvalidActor = errors.New("invalid actor")
	// ErrNothingToSet: SetMany was given no values.
	ErrNothingToSet = errors.New("no settings given")
	// ErrInvalidLimit: a negative History limit.
	ErrInvalidLimit = errors.New("invalid history limit")
)

// ManyError is SetMany's refusal: one error per refused entry (each an
// *UnknownSettingError, *ValueError or *ManagedError), in name order. errors.Is
// and errors.As see through it; Unwrap lists them all.
type ManyError struct {
	Errors []error
}

func (e *ManyError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, err := range e.Errors {
		msgs[i] = err.Error()
	}
	return fmt.Sprintf("%d of the settings given refused, nothing changed: %s", len(e.Errors), strings.Join(msgs, "; "))
}

// Unwrap returns each refusal.
func (e *ManyError) Unwrap() []error { return e.Errors }

// checkActor refuses an actor a caller may not claim.
func checkActor(who Actor) error {
	switch who.Source {
	case ActorUI, ActorAPI, ActorCLI, ActorUnknown:
	default:
		return fmt.Errorf("%w: source %s; allowed: %s, %s, %s or %s", ErrInvalidActor, Echo(who.Source),
			ActorUI, ActorAPI, ActorCLI, ActorUnknown)
	}
	switch {
	case len(who.Identity) > maxIdentity:
		return fmt.Errorf("%w: identity %s is longer than %d bytes", ErrInvalidActor, Echo(who.Identity), maxIdentity)
	case !utf8.ValidString(who.Identity) || strings.ContainsFunc(who.Identity, unicode.IsControl):
		return fmt.Errorf("%w: identity %s: allowed: printable UTF-8 text", ErrInvalidActor, Echo(who.Identity))
	}
	return nil
}

// write is one validated change for writeStore.
type write struct {
	name  string
	text  string // canonical; ignored for a reset
	reset bool
}

// SetAs validates value and writes it to the store, recording who in the
// history. It refuses what Set refuses, and an invalid actor (ErrInvalidActor),
// without writing anything.
func (s *Settings) SetAs(ctx context.Context, name, value string, who Actor) error {
	if err := checkActor(who); err != nil {
		return err
	}
	w, err := s.validate(name, value)
	if err != nil {
		return err
	}
	return s.writeStore(ctx, []write{w}, who)
}

// ResetAs removes the stored value of name, so its default is in force,
// recording who in the history. It refuses an unknown or managed setting and an
// invalid actor.
func (s *Settings) ResetAs(ctx context.Context, name string, who Actor) error {
	if err := checkActor(who); err != nil {
		return err
	}
	if _, err := s.writable(name); err != nil {
		return err
	}
	return s.writeStore(ctx, []write{{name: name, reset: true}}, who)
}

// SetMany validates every value first and then applies all of them or none, in
// one store transaction (one bolt transaction; one update of the ConfigMap,
// retried as a whole on a conflict), recording one history entry per setting
// whose value changed. A refusal is a *ManyError listing every bad entry (unknown
// name with a suggestion, bad value with what is allowed, managed setting with
// its file) and changes nothing; so does an empty map (ErrNothingToSet) or an
// invalid actor (ErrInvalidActor).
func (s *Settings) SetMany(ctx context.Context, values map[string]string, who Actor) error {
	if err := checkActor(who); err != nil {
		return err
	}
	if len(values) == 0 {
		return fmt.Errorf("SetMany: %w", ErrNothingToSet)
	}
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names)
	var (
		writes []write
		errs   []error
	)
	for _, name := range names {
		w, err := s.validate(name, values[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		writes = append(writes, w)
	}
	if len(errs) > 0 {
		return &ManyError{Errors: errs}
	}
	return s.writeStore(ctx, writes, who)
}

// validate checks that name may be written with value and returns the write.
func (s *Settings) validate(name, value string) (write, error) {
	d, err := s.writable(name)
	if err != nil {
		return write{}, err
	}
	parsed, err := d.Parse(value)
	if err != nil {
		return write{}, err
	}
	return write{name: name, text: Format(parsed)}, nil
}

// writeStore makes writes and their records in one store transaction, then puts
// them in force (see applyOwn).
func (s *Settings) writeStore(ctx context.Context, writes []write, who Actor) error {
	gens := make(map[string]uint64, len(writes))
	for _, w := range writes {
		gens[w.name] = s.watchedGeneration(w.name)
	}
	var committed []StoreEvent
	err := s.store.Update(ctx, func(values map[string]string, _ func(func(ChangeRecord) bool) (ChangeRecord, bool)) ([]ChangeRecord, error) {
		committed = committed[:0] // a retried transaction starts over
		var records []ChangeRecord
		now := time.Now()
		for _, w := range writes {
			old, oldSrc := storeLayer(values, w.name)
			ev := StoreEvent{Name: w.name, Value: w.text, Deleted: w.reset}
			if cur, ok := values[w.name]; (w.reset && !ok) || (!w.reset && ok && cur == w.text) {
				continue // nothing to write
			}
			if w.reset {
				delete(values, w.name)
			} else {
				values[w.name] = w.text
			}
			committed = append(committed, ev)
			if nv, nSrc := storeLayer(values, w.name); nv != old || nSrc != oldSrc {
				records = append(records, ChangeRecord{Time: now, Setting: w.name, Old: old, OldSource: oldSrc,
					New: nv, NewSource: nSrc, Actor: who})
			}
		}
		return records, nil
	})
	if err != nil {
		names := make([]string, len(writes))
		for i, w := range writes {
			names[i] = w.name
		}
		return fmt.Errorf("write %s to the settings store: %w", strings.Join(names, ", "), err)
	}
	for _, ev := range committed {
		s.applyOwn(ev, gens[ev.Name])
	}
	return nil
}

// storeLayer is the store's value of name as a record shows it: canonical when
// it parses, as stored when not, the default when absent.
func storeLayer(values map[string]string, name string) (string, Source) {
	d := byName[name]
	v, ok := values[name]
	if !ok {
		return d.Default, SourceDefault
	}
	if c, err := d.Canonical(v); err == nil {
		return c, SourceStore
	}
	return v, SourceStore
}

// History returns up to limit change records, newest first (limit 0: all the
// store keeps, at most HistoryLimit). The order is the order in which the store
// committed the changes.
func (s *Settings) History(ctx context.Context, limit int) ([]ChangeRecord, error) {
	if limit < 0 {
		return nil, fmt.Errorf("%w %d: want 0 (all) or a positive number", ErrInvalidLimit, limit)
	}
	return s.store.History(ctx, limit)
}
