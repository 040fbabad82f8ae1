package settings_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil/settings"
)

// observer is a Settings that records observed changes, like vigil-manager run.
func observer(t *testing.T, store settings.Store, dir string) *settings.Settings {
	t.Helper()
	s, err := settings.New(store, dir, settings.WithObservedHistory(), settings.WithRegisterer(prometheus.NewRegistry()),
		settings.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitInForce waits until every s shows value from src for name.
func waitInForce(t *testing.T, name, value string, src settings.Source, ss ...*settings.Settings) {
	t.Helper()
	deadline := time.Now().Add(changeTimeout)
	for _, s := range ss {
		for e, _ := s.Get(name); e.Value != value || e.Source != src; e, _ = s.Get(name) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still %s (%s), want %s (%s)", name, e.Value, e.Source, value, src)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// records is the history without times, newest first.
func records(t *testing.T, store settings.Store) []settings.ChangeRecord {
	t.Helper()
	h, err := store.History(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range h {
		if h[i].Time.IsZero() {
			t.Errorf("record %+v has no time", h[i])
		}
		h[i].Time = time.Time{}
	}
	return h
}

func wantRecords(t *testing.T, store settings.Store, want ...settings.ChangeRecord) {
	t.Helper()
	got := records(t, store)
	if len(got) != len(want) {
		t.Fatalf("history %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestSettings_ObservedHistory_OverlayChangeRecordedOnce: two managers watch one
// overlay; each change is recorded once, with the file as identity; a manager
// started later adds nothing, and a change made while none ran is recorded
// when one starts.
func TestSettings_ObservedHistory_OverlayChangeRecordedOnce(t *testing.T) {
	store := settings.NewMemoryStore()
	dir := t.TempDir()
	path := filepath.Join(dir, "dry-run")
	a, b := observer(t, store, dir), observer(t, store, dir)
	flush := func(ss ...*settings.Settings) {
		for _, s := range ss {
			settings.FlushObserved(s)
		}
	}
	flush(a, b)
	wantRecords(t, store) // nothing managed, nothing said

	writeFile(t, path, "true")
	waitInForce(t, "dry-run", "true", settings.SourceManaged, a, b)
	flush(a, b)
	cm := settings.Actor{Source: settings.ActorConfigMap, Identity: path}
	added := settings.ChangeRecord{Setting: "dry-run", Old: "false", OldSource: settings.SourceDefault,
		New: "true", NewSource: settings.SourceManaged, Actor: cm}
	wantRecords(t, store, added)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitInForce(t, "dry-run", "false", settings.SourceDefault, a, b)
	flush(a, b)
	removed := settings.ChangeRecord{Setting: "dry-run", Old: "true", OldSource: settings.SourceManaged,
		New: "false", NewSource: settings.SourceDefault, Actor: cm}
	wantRecords(t, store, removed, added)

	c := observer(t, store, dir) // starts with the state the history shows
	flush(c)
	wantRecords(t, store, removed, added)
	_, _ = a.Close(), b.Close()
	_ = c.Close()

	writeFile(t, path, "true") // while no manager runs
	d := observer(t, store, dir)
	flush(d)
	wantRecords(t, store, added, removed, added)
	_ = d.Close()

	writeFile(t, path, "false") // changed while none ran: old is the recorded managed value
	e := observer(t, store, dir)
	flush(e)
	changed := settings.ChangeRecord{Setting: "dry-run", Old: "true", OldSource: settings.SourceManaged,
		New: "false", NewSource: settings.SourceManaged, Actor: cm}
	wantRecords(t, store, changed, added, removed, added)
}

// TestSettings_ObservedHistory_StoreEditedOutsideVigil: a store change without
// a record (kubectl edit) is recorded once as ActorStore; Vigil's own writes
// are not recorded twice.
func TestSettings_ObservedHistory_StoreEditedOutsideVigil(t *testing.T) {
	store := settings.NewMemoryStore()
	a, b := observer(t, store, ""), observer(t, store, "")
	ctx := context.Background()
	api := settings.Actor{Source: settings.ActorAPI, Identity: "ops"}
	if err := a.SetAs(ctx, "crash-loop-restart-limit", "7", api); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, "crash-loop-restart-limit", "9"); err != nil { // kubectl edit
		t.Fatal(err)
	}
	waitInForce(t, "crash-loop-restart-limit", "9", settings.SourceStore, a, b)
	// Each change recorded before the next: a quick succession of edits
	// outside Vigil may be recorded as one change (the rule compares states).
	settings.FlushObserved(a)
	settings.FlushObserved(b)
	if err := store.Delete(ctx, "crash-loop-restart-limit"); err != nil {
		t.Fatal(err)
	}
	waitInForce(t, "crash-loop-restart-limit", "5", settings.SourceDefault, a, b)
	settings.FlushObserved(a)
	settings.FlushObserved(b)
	st, d := settings.SourceStore, settings.SourceDefault
	outside := settings.Actor{Source: settings.ActorStore}
	wantRecords(t, store,
		settings.ChangeRecord{Setting: "crash-loop-restart-limit", Old: "9", OldSource: st, New: "5", NewSource: d, Actor: outside},
		settings.ChangeRecord{Setting: "crash-loop-restart-limit", Old: "7", OldSource: st, New: "9", NewSource: st, Actor: outside},
		settings.ChangeRecord{Setting: "crash-loop-restart-limit", Old: "5", OldSource: d, New: "7", NewSource: st, Actor: api},
	)
}

// TestSettings_ObservedHistory_OnlyWhenAsked: a Settings without
// WithObservedHistory (the CLI) records only its own writes, and a blocking bad
// file is a problem, not a change.
func TestSettings_ObservedHistory_OnlyWhenAsked(t *testing.T) {
	store := settings.NewMemoryStore()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "dry-run"), "true")
	writeFile(t, filepath.Join(dir, "node-down-grace-period"), "soon")
	s, _ := newSettings(t, store, dir)
	if err := store.Set(context.Background(), "crash-loop-restart-limit", "9"); err != nil {
		t.Fatal(err)
	}
	waitInForce(t, "crash-loop-restart-limit", "9", settings.SourceStore, s)
	_ = s.Close()
	wantRecords(t, store)
	o := observer(t, store, dir)
	settings.FlushObserved(o)
	got := records(t, store)
	if len(got) != 1 || got[0].Setting != "dry-run" {
		t.Fatalf("history %+v, want only dry-run becoming managed (the bad file is a problem, the store value predates)", got)
	}
}
