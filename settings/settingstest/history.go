package settingstest

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil/settings"
)

// historyTests are the behaviours of Update and History, and of the change
// history Settings keeps through them.
var historyTests = []struct {
	name       string
	persistent bool
	fn         func(t *testing.T, open func(t *testing.T) settings.Store)
}{
	{"HistoryEmpty", false, testHistoryEmpty},
	{"UpdateCommitsValuesAndRecords", false, testUpdateCommits},
	{"UpdateErrorChangesNothing", false, testUpdateError},
	{"UpdateSeesNewestRecord", false, testUpdateNewest},
	{"HistoryNewestFirstAndLimit", false, testHistoryOrder},
	{"HistoryKeepsAtMostHistoryLimit", false, testHistoryBound},
	{"ConcurrentUpdatesLoseNoRecord", false, testConcurrentUpdates},
	{"SettingsRecordEveryChange", false, testSettingsRecords},
	{"SetManyAllOrNothing", false, testSetManyAllOrNothing},
	{"HistoryPersistsAcrossReopen", true, testHistoryReopen},
	{"ConcurrentInstancesUpdateLoseNoRecord", true, testConcurrentInstanceUpdates},
}

func rec(setting, old, new string) settings.ChangeRecord {
	return settings.ChangeRecord{Time: time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC), Setting: setting,
		Old: old, New: new, OldSource: settings.SourceStore, NewSource: settings.SourceStore,
		Actor: settings.Actor{Source: settings.ActorAPI, Identity: "tester"}}
}

// appendOnly is an Update body that only appends records.
func appendOnly(records ...settings.ChangeRecord) settings.UpdateFunc {
	return func(map[string]string, func(func(settings.ChangeRecord) bool) (settings.ChangeRecord, bool)) ([]settings.ChangeRecord, error) {
		return records, nil
	}
}

func mustUpdate(t *testing.T, s settings.Store, fn settings.UpdateFunc) {
	t.Helper()
	if err := s.Update(ctx(t), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func history(t *testing.T, s settings.Store, limit int) []settings.ChangeRecord {
	t.Helper()
	h, err := s.History(ctx(t), limit)
	if err != nil {
		t.Fatalf("History(%d): %v", limit, err)
	}
	return h
}

// sameRecords compares records field by field (times with Equal: a store may
// drop the monotonic clock or the location).
func sameRecords(t *testing.T, what string, got, want []settings.ChangeRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d:\n got %+v\nwant %+v", what, len(got), len(want), got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.Time.Equal(w.Time) {
			t.Fatalf("%s: record %d time %s, want %s", what, i, g.Time, w.Time)
		}
		g.Time, w.Time = time.Time{}, time.Time{}
		if g != w {
			t.Fatalf("%s: record %d = %+v, want %+v", what, i, g, w)
		}
	}
}

func testHistoryEmpty(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	if h := history(t, s, 0); len(h) != 0 {
		t.Fatalf("History of a new store = %+v, want none", h)
	}
}

func testUpdateCommits(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	mustSet(t, s, "dry-run", "true")
	mustSet(t, s, "crash-loop-restart-limit", "7")
	ch, err := s.Watch(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	r := rec("dry-run", "true", "false")
	mustUpdate(t, s, func(values map[string]string, _ func(func(settings.ChangeRecord) bool) (settings.ChangeRecord, bool)) ([]settings.ChangeRecord, error) {
		if values["dry-run"] != "true" || values["crash-loop-restart-limit"] != "7" || len(values) != 2 {
			return nil, fmt.Errorf("the Update function sees %v, want the two stored values", values)
		}
		values["dry-run"] = "false"
		delete(values, "crash-loop-restart-limit")
		values["node-down-grace-period"] = "3s"
		return []settings.ChangeRecord{r}, nil
	})
	wantGet(t, s, "dry-run", "false", true)
	wantGet(t, s, "crash-loop-restart-limit", "", false)
	wantGet(t, s, "node-down-grace-period", "3s", true)
	all, err := s.List(ctx(t))
	if err != nil || len(all) != 2 {
		t.Fatalf("List = %v, %v; want the two values only (no history key)", all, err)
	}
	sameRecords(t, "History", history(t, s, 0), []settings.ChangeRecord{r})
	want := map[settings.StoreEvent]bool{
		{Name: "dry-run", Value: "false"}: true, {Name: "crash-loop-restart-limit", Deleted: true}: true,
		{Name: "node-down-grace-period", Value: "3s"}: true,
	}
	for len(want) > 0 {
		ev := NextEvent(t, ch)
		if !want[ev] {
			t.Fatalf("event %+v, want one of %v (one per name changed, nothing else)", ev, want)
		}
		delete(want, ev)
	}
}

func testUpdateError(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	mustSet(t, s, "dry-run", "true")
	mustUpdate(t, s, appendOnly(rec("dry-run", "false", "true")))
	ch, err := s.Watch(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused by the caller")
	err = s.Update(ctx(t), func(values map[string]string, _ func(func(settings.ChangeRecord) bool) (settings.ChangeRecord, bool)) ([]settings.ChangeRecord, error) {
		values["dry-run"] = "false"
		values["crash-loop-restart-limit"] = "9"
		return []settings.ChangeRecord{rec("dry-run", "true", "false")}, refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("Update = %v, want the function's error", err)
	}
	wantGet(t, s, "dry-run", "true", true)
	wantGet(t, s, "crash-loop-restart-limit", "", false)
	if h := history(t, s, 0); len(h) != 1 {
		t.Fatalf("history after a refused Update: %+v, want the one earlier record", h)
	}
	mustSet(t, s, "fast-fenced-trigger", "true") // a marker: nothing came before it
	if got, want := NextEvent(t, ch), (settings.StoreEvent{Name: "fast-fenced-trigger", Value: "true"}); got != want {
		t.Fatalf("event %+v, want the marker %+v: the refused Update was seen", got, want)
	}
}

func testUpdateNewest(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	mustUpdate(t, s, appendOnly(rec("dry-run", "false", "true"), rec("crash-loop-restart-limit", "5", "6")))
	mustUpdate(t, s, appendOnly(rec("dry-run", "true", "false")))
	mustUpdate(t, s, func(_ map[string]string, newest func(func(settings.ChangeRecord) bool) (settings.ChangeRecord, bool)) ([]settings.ChangeRecord, error) {
		r, ok := newest(func(r settings.ChangeRecord) bool { return r.Setting == "dry-run" })
		if !ok || r.New != "false" {
			return nil, fmt.Errorf("newest dry-run record = %+v, %t; want the one to false", r, ok)
		}
		r, ok = newest(func(r settings.ChangeRecord) bool { return r.Setting == "crash-loop-restart-limit" })
		if !ok || r.New != "6" {
			return nil, fmt.Errorf("newest crash-loop-restart-limit record = %+v, %t", r, ok)
		}
		if r, ok := newest(func(r settings.ChangeRecord) bool { return r.Setting == "none" }); ok {
			return nil, fmt.Errorf("newest of a setting without records = %+v", r)
		}
		return nil, nil
	})
}

func testHistoryOrder(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	var want []settings.ChangeRecord
	for i := range 5 {
		r := rec("crash-loop-restart-limit", strconv.Itoa(i), strconv.Itoa(i+1))
		r.Time = r.Time.Add(-time.Duration(i) * time.Minute) // commit order, not time order
		mustUpdate(t, s, appendOnly(r))
		want = append([]settings.ChangeRecord{r}, want...)
	}
	sameRecords(t, "History(0)", history(t, s, 0), want)
	sameRecords(t, "History(2)", history(t, s, 2), want[:2])
	sameRecords(t, "History(99)", history(t, s, 99), want)
}

func testHistoryBound(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	total := settings.HistoryLimit + 50
	var all []settings.ChangeRecord
	for i := range total {
		all = append(all, rec("crash-loop-restart-limit", strconv.Itoa(i), strconv.Itoa(i+1)))
	}
	for start := 0; start < total; start += 200 { // a few transactions of many records
		mustUpdate(t, s, appendOnly(all[start:min(start+200, total)]...))
	}
	h := history(t, s, 0)
	if len(h) != settings.HistoryLimit {
		t.Fatalf("%d records kept, want HistoryLimit (%d)", len(h), settings.HistoryLimit)
	}
	if h[0].New != strconv.Itoa(total) || h[len(h)-1].New != strconv.Itoa(total-settings.HistoryLimit+1) {
		t.Fatalf("kept %s..%s, want the newest %d (%d..%d)", h[len(h)-1].New, h[0].New,
			settings.HistoryLimit, total-settings.HistoryLimit+1, total)
	}
}

// updateMany has writers goroutines each run perWriter Updates on the stores
// given (round robin), each setting one name and appending one record; every
// value and every record must be there afterwards.
func updateMany(t *testing.T, stores []settings.Store, writers, perWriter int) {
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			for i := range perWriter {
				name := fmt.Sprintf("key-%d-%d", w, i)
				err := s.Update(ctx(t), func(values map[string]string, _ func(func(settings.ChangeRecord) bool) (settings.ChangeRecord, bool)) ([]settings.ChangeRecord, error) {
					values[name] = "v"
					return []settings.ChangeRecord{rec(name, "", "v")}, nil
				})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Update: %v", err)
	}
	all, err := stores[0].List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, r := range history(t, stores[0], 0) {
		seen[r.Setting]++
	}
	for w := range writers {
		for i := range perWriter {
			name := fmt.Sprintf("key-%d-%d", w, i)
			if all[name] != "v" || seen[name] != 1 {
				t.Errorf("%s: value %q, %d records; want v and 1 (lost update)", name, all[name], seen[name])
			}
		}
	}
}

func testConcurrentUpdates(t *testing.T, open func(t *testing.T) settings.Store) {
	updateMany(t, []settings.Store{openClosed(t, open)}, 4, 10)
}

func testConcurrentInstanceUpdates(t *testing.T, open func(t *testing.T) settings.Store) {
	updateMany(t, []settings.Store{openClosed(t, open), openClosed(t, open)}, 4, 10)
}

func testHistoryReopen(t *testing.T, open func(t *testing.T) settings.Store) {
	s := open(t)
	live := newSettings(t, s, "")
	who := settings.Actor{Source: settings.ActorCLI, Identity: "alice"}
	if err := live.SetAs(ctx(t), "dry-run", "true", who); err != nil {
		t.Fatal(err)
	}
	before := history(t, s, 0)
	_ = live.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := openClosed(t, open)
	sameRecords(t, "History after reopen", history(t, again, 0), before)
	if len(before) != 1 || before[0].Actor != who {
		t.Fatalf("history %+v, want one record by %+v", before, who)
	}
}

// newSettings is a Settings over store with a private registry and a silent
// log, closed at the end of the test.
func newSettings(t *testing.T, store settings.Store, overlayDir string) *settings.Settings {
	t.Helper()
	s, err := settings.New(store, overlayDir, settings.WithRegisterer(prometheus.NewRegistry()),
		settings.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatalf("settings.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testSettingsRecords(t *testing.T, open func(t *testing.T) settings.Store) {
	store := openClosed(t, open)
	s := newSettings(t, store, "")
	api := settings.Actor{Source: settings.ActorAPI, Identity: "token-holder"}
	ui := settings.Actor{Source: settings.ActorUI}
	steps := []func() error{
		func() error { return s.SetAs(ctx(t), "node-down-grace-period", "120s", api) },
		func() error { return s.SetAs(ctx(t), "node-down-grace-period", "2m", api) }, // same value: no record
		func() error {
			return s.SetMany(ctx(t), map[string]string{"dry-run": "true", "fast-fenced-trigger": "false"}, ui)
		},
		func() error { return s.ResetAs(ctx(t), "node-down-grace-period", api) },
		func() error { return s.ResetAs(ctx(t), "node-down-grace-period", api) }, // nothing stored: no record
		func() error { return s.Set(ctx(t), "crash-loop-restart-limit", "8") },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	d, st := settings.SourceDefault, settings.SourceStore
	unknown := settings.Actor{Source: settings.ActorUnknown}
	want := []settings.ChangeRecord{
		{Setting: "crash-loop-restart-limit", Old: "5", OldSource: d, New: "8", NewSource: st, Actor: unknown},
		{Setting: "node-down-grace-period", Old: "2m", OldSource: st, New: "2s", NewSource: d, Actor: api},
		{Setting: "fast-fenced-trigger", Old: "false", OldSource: d, New: "false", NewSource: st, Actor: ui},
		{Setting: "dry-run", Old: "false", OldSource: d, New: "true", NewSource: st, Actor: ui},
		{Setting: "node-down-grace-period", Old: "2s", OldSource: d, New: "2m", NewSource: st, Actor: api},
	}
	got := history(t, store, 0)
	// SetMany's records share one transaction; their order is by name.
	if len(got) == len(want) {
		for i := range got {
			if got[i].Time.IsZero() || (i > 0 && got[i].Time.After(got[i-1].Time)) {
				t.Errorf("record %d time %s: want set, and not after the newer record's", i, got[i].Time)
			}
			want[i].Time = got[i].Time
		}
	}
	sameRecords(t, "History", got, want)
	fromSettings, err := s.History(ctx(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "Settings.History(2)", fromSettings, want[:2])
	if _, err := s.History(ctx(t), -1); !errors.Is(err, settings.ErrInvalidLimit) {
		t.Fatalf("History(-1) = %v, want ErrInvalidLimit", err)
	}
}

func testSetManyAllOrNothing(t *testing.T, open func(t *testing.T) settings.Store) {
	store := openClosed(t, open)
	dir := t.TempDir()
	managed := filepath.Join(dir, "dry-run")
	if err := os.WriteFile(managed, []byte("true"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSettings(t, store, dir)
	who := settings.Actor{Source: settings.ActorAPI}
	if err := s.SetAs(ctx(t), "crash-loop-restart-limit", "7", who); err != nil {
		t.Fatal(err)
	}
	before := history(t, store, 0)
	err := s.SetMany(ctx(t), map[string]string{
		"node-down-grace-period":            "5s",        // good
		"crash-loop-restart-limit":          "0",         // out of range
		"DRY-RUN":                           "true",      // unknown, suggests dry-run
		"dry-run":                           "false",     // managed
		"volume-attachment-recovery-policy": "sometimes", // not a choice
	}, who)
	var many *settings.ManyError
	if !errors.As(err, &many) || len(many.Errors) != 4 {
		t.Fatalf("SetMany = %v, want a *ManyError with 4 refusals", err)
	}
	var (
		ve *settings.ValueError
		ue *settings.UnknownSettingError
		me *settings.ManagedError
	)
	if !errors.As(err, &ve) || !errors.As(err, &ue) || !errors.As(err, &me) ||
		ue.Suggestion != "dry-run" || me.Path != managed {
		t.Fatalf("SetMany = %v: want a ValueError, an UnknownSettingError suggesting dry-run and a ManagedError naming %s", err, managed)
	}
	values := map[string]settings.ValueError{}
	for _, e := range many.Errors {
		if errors.As(e, &ve) {
			values[ve.Setting] = *ve
		}
	}
	if values["crash-loop-restart-limit"].Value != "0" || values["crash-loop-restart-limit"].Allowed == "" ||
		values["volume-attachment-recovery-policy"].Value != "sometimes" {
		t.Fatalf("value errors %+v, want each with the value given and what is allowed", values)
	}
	wantGet(t, store, "node-down-grace-period", "", false)
	wantGet(t, store, "crash-loop-restart-limit", "7", true)
	sameRecords(t, "history after a refused SetMany", history(t, store, 0), before)
	for _, bad := range []struct {
		values map[string]string
		who    settings.Actor
		want   error
	}{
		{map[string]string{}, who, settings.ErrNothingToSet},
		{map[string]string{"node-down-grace-period": "5s"}, settings.Actor{Source: settings.ActorConfigMap}, settings.ErrInvalidActor},
		{map[string]string{"node-down-grace-period": "5s"}, settings.Actor{Source: "cli", Identity: "a\nb"}, settings.ErrInvalidActor},
	} {
		if err := s.SetMany(ctx(t), bad.values, bad.who); !errors.Is(err, bad.want) {
			t.Errorf("SetMany(%v, %+v) = %v, want %v", bad.values, bad.who, err, bad.want)
		}
	}
	wantGet(t, store, "node-down-grace-period", "", false)
	sameRecords(t, "history after refused calls", history(t, store, 0), before)
}
