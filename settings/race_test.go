package settings_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/settings"
)

// afterWriteStore runs hook once, right after the first write of the store
// through it: the moment another writer can slip in between a write and its
// effect on the live view.
type afterWriteStore struct {
	settings.Store
	once sync.Once
	hook func()
}

func (a *afterWriteStore) Update(ctx context.Context, fn settings.UpdateFunc) error {
	err := a.Store.Update(ctx, fn)
	a.once.Do(a.hook)
	return err
}

// TestSettings_Set_NewerWriteOfAnotherWriterWins: another writer changes the
// setting after Set (or Reset) wrote it and before it returned, and the watch has
// already applied that newer value. Set must not put its own, older value back in
// force (it did, and the live view then disagreed with the store
// until the next change).
func TestSettings_Set_NewerWriteOfAnotherWriterWins(t *testing.T) {
	tests := []struct {
		name    string
		initial string // stored before; "" for nothing
		write   func(*settings.Settings) error
		other   string // the other writer's value, written in between
	}{
		{"Set", "", func(s *settings.Settings) error { return s.Set(context.Background(), "dry-run", "true") }, "false"},
		{"Reset", "true", func(s *settings.Settings) error { return s.Reset(context.Background(), "dry-run") }, "true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			inner := settings.NewMemoryStore()
			if tc.initial != "" {
				if err := inner.Set(ctx, "dry-run", tc.initial); err != nil {
					t.Fatal(err)
				}
			}
			hooked := &afterWriteStore{Store: inner}
			s, _ := newSettings(t, hooked, "")
			ch, cancel := s.Subscribe()
			defer cancel()
			hooked.hook = func() {
				if err := inner.Set(ctx, "dry-run", tc.other); err != nil {
					t.Error(err)
					return
				}
				// Wait until the live view shows the other writer's value.
				want := settings.Change{Name: "dry-run", Value: tc.other, Source: settings.SourceStore}
				for c := nextChange(t, ch); c != want; c = nextChange(t, ch) {
				}
			}
			if err := tc.write(s); err != nil {
				t.Fatal(err)
			}
			stored, _, _ := inner.Get(ctx, "dry-run")
			if e, _ := s.Get("dry-run"); e.Value != stored || e.Source != settings.SourceStore {
				t.Fatalf("in force %q (%s) while the store holds the newer %q", e.Value, e.Source, stored)
			}
		})
	}
}

// startupRaceStore makes a change land right after the first List read the
// store, and (with an implementation that reads watch events while it reads the
// store) lets that change be applied before List returns.
type startupRaceStore struct {
	settings.Store
	received chan struct{} // closed when the sentinel event was received
}

const sentinelName = "zz-test-sentinel" // names no setting: ignored

func (r *startupRaceStore) Watch(ctx context.Context) (<-chan settings.StoreEvent, error) {
	in, err := r.Store.Watch(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan settings.StoreEvent) // unbuffered: a send ends when the reader took it
	go func() {
		defer close(out)
		for ev := range in {
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
			if ev.Name == sentinelName {
				close(r.received)
			}
		}
	}()
	return out, nil
}

// startupGrace is how long List gives a reader of the watch to take the change
// in. A correct Settings never does (it reads the watch only after List), so
// the test costs this much; an incorrect one is caught unless the machine is
// slower than this to schedule one goroutine.
const startupGrace = 500 * time.Millisecond

func (r *startupRaceStore) List(ctx context.Context) (map[string]string, error) {
	old, err := r.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.Store.Set(ctx, "dry-run", "true"); err != nil {
		return nil, err
	}
	// Receiving the sentinel means the event before it was fully applied.
	if err := r.Store.Set(ctx, sentinelName, "x"); err != nil {
		return nil, err
	}
	select {
	case <-r.received:
	case <-time.After(startupGrace):
	}
	return old, nil
}

// TestNew_StartupReadNeverOverwritesNewerWatchedValue: a value written while New
// reads the store is in force afterwards, not the older value the read returned
// (the read was applied after the watch had already applied the
// newer value).
func TestNew_StartupReadNeverOverwritesNewerWatchedValue(t *testing.T) {
	ctx := context.Background()
	inner := settings.NewMemoryStore()
	if err := inner.Set(ctx, "dry-run", "false"); err != nil {
		t.Fatal(err)
	}
	s, _ := newSettings(t, &startupRaceStore{Store: inner, received: make(chan struct{})}, "")
	ch, cancel := s.Subscribe()
	defer cancel()
	// A marker written now is seen after every earlier event was applied.
	if err := inner.Set(ctx, "crash-loop-restart-limit", "9"); err != nil {
		t.Fatal(err)
	}
	for c := nextChange(t, ch); c.Name != "crash-loop-restart-limit"; c = nextChange(t, ch) {
	}
	if !s.DryRun() {
		t.Fatal("dry-run is false, the older value read at startup, while the store holds true")
	}
}
