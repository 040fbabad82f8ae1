package settingstest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/settings"
)

// Backend makes the stores under test.
type Backend struct {
	// New returns an opener over fresh, empty backing state (a new file, a new
	// ConfigMap name, …). Every call of the opener returns a new Store over that
	// same state; the suite closes what it opens.
	New func(t *testing.T) (open func(t *testing.T) settings.Store)
	// Persistent: values survive Close and a new open, and two stores opened over
	// the same state see each other's writes. False for the memory twin, whose
	// opener may be called only once.
	Persistent bool
}

// EventTimeout bounds how long the suite waits for a watch event.
var EventTimeout = 5 * time.Second

// RunStoreConformance runs every behaviour Store documents against b, and the
// change history that Settings keeps through Update and History.
func RunStoreConformance(t *testing.T, b Backend) {
	tests := []struct {
		name       string
		persistent bool
		fn         func(t *testing.T, open func(t *testing.T) settings.Store)
	}{
		{"GetMissing", false, testGetMissing},
		{"SetGetOverwrite", false, testSetGetOverwrite},
		{"Delete", false, testDelete},
		{"ListIsACopy", false, testListIsACopy},
		{"AwkwardValues", false, testAwkwardValues},
		{"WatchReportsEveryChangeInOrder", false, testWatchOrder},
		{"WatchStartsNow", false, testWatchStartsNow},
		{"WatchEndsWithContext", false, testWatchEndsWithContext},
		{"CloseEndsWatchAndRefusesUse", false, testClose},
		{"ConcurrentWritersLoseNothing", false, testConcurrentWriters},
		{"PersistsAcrossReopen", true, testReopen},
		{"WatchSeesOtherInstance", true, testWatchOtherInstance},
		{"ConcurrentInstancesLoseNothing", true, testConcurrentInstances},
	}
	for _, tc := range append(tests, historyTests...) {
		t.Run(tc.name, func(t *testing.T) {
			if tc.persistent && !b.Persistent {
				t.Skip("backend is not persistent")
			}
			tc.fn(t, b.New(t))
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func openClosed(t *testing.T, open func(t *testing.T) settings.Store) settings.Store {
	s := open(t)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustSet(t *testing.T, s settings.Store, name, value string) {
	t.Helper()
	if err := s.Set(ctx(t), name, value); err != nil {
		t.Fatalf("Set(%q, %q): %v", name, value, err)
	}
}

func wantGet(t *testing.T, s settings.Store, name, want string, wantOK bool) {
	t.Helper()
	got, ok, err := s.Get(ctx(t), name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	if ok != wantOK || got != want {
		t.Fatalf("Get(%q) = %q, %v; want %q, %v", name, got, ok, want, wantOK)
	}
}

// NextEvent returns the next event from ch or fails the test after EventTimeout.
func NextEvent(t testing.TB, ch <-chan settings.StoreEvent) settings.StoreEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed, want an event")
		}
		return ev
	case <-time.After(EventTimeout):
		t.Fatalf("no watch event within %s", EventTimeout)
	}
	return settings.StoreEvent{}
}

func testGetMissing(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	wantGet(t, s, "dry-run", "", false)
	all, err := s.List(ctx(t))
	if err != nil || len(all) != 0 {
		t.Fatalf("List on an empty store = %v, %v; want empty, nil", all, err)
	}
}

func testSetGetOverwrite(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	mustSet(t, s, "dry-run", "true")
	wantGet(t, s, "dry-run", "true", true)
	mustSet(t, s, "dry-run", "false")
	mustSet(t, s, "node-down-grace-period", "2s")
	wantGet(t, s, "dry-run", "false", true)
	all, err := s.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all["dry-run"] != "false" || all["node-down-grace-period"] != "2s" {
		t.Fatalf("List = %v, want dry-run=false node-down-grace-period=2s", all)
	}
}

func testDelete(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	mustSet(t, s, "dry-run", "true")
	mustSet(t, s, "crash-loop-restart-limit", "7")
	if err := s.Delete(ctx(t), "dry-run"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantGet(t, s, "dry-run", "", false)
	wantGet(t, s, "crash-loop-restart-limit", "7", true)
	if err := s.Delete(ctx(t), "dry-run"); err != nil {
		t.Fatalf("Delete of an absent name: %v, want nil", err)
	}
	if err := s.Delete(ctx(t), "never-set"); err != nil {
		t.Fatalf("Delete of a never-set name: %v, want nil", err)
	}
}

func testListIsACopy(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	mustSet(t, s, "dry-run", "true")
	all, err := s.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	all["dry-run"] = "changed"
	all["other"] = "x"
	wantGet(t, s, "dry-run", "true", true)
	wantGet(t, s, "other", "", false)
}

func testAwkwardValues(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	values := map[string]string{
		"empty":     "",
		"newlines":  "a\nb\n",
		"unicode":   "fenced ✓ — ok",
		"long":      strings.Repeat("x", 10000),
		"a.b_c-d.9": "dots, underscores and dashes in the name",
	}
	for name, v := range values {
		mustSet(t, s, name, v)
	}
	for name, v := range values {
		wantGet(t, s, name, v, true)
	}
}

func testWatchOrder(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	ch, err := s.Watch(ctx(t))
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	steps := []struct {
		do   func() error
		want settings.StoreEvent
	}{
		{func() error { return s.Set(ctx(t), "dry-run", "true") }, settings.StoreEvent{Name: "dry-run", Value: "true"}},
		{func() error { return s.Set(ctx(t), "dry-run", "false") }, settings.StoreEvent{Name: "dry-run", Value: "false"}},
		{func() error { return s.Set(ctx(t), "crash-loop-restart-limit", "9") }, settings.StoreEvent{Name: "crash-loop-restart-limit", Value: "9"}},
		{func() error { return s.Delete(ctx(t), "dry-run") }, settings.StoreEvent{Name: "dry-run", Deleted: true}},
	}
	for i, step := range steps {
		if err := step.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := NextEvent(t, ch); got != step.want {
			t.Fatalf("step %d: event %+v, want %+v", i, got, step.want)
		}
	}
}

func testWatchStartsNow(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	mustSet(t, s, "dry-run", "true")
	ch, err := s.Watch(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, "fast-fenced-trigger", "true")
	want := settings.StoreEvent{Name: "fast-fenced-trigger", Value: "true"}
	if got := NextEvent(t, ch); got != want {
		t.Fatalf("first event %+v, want %+v (no replay of earlier writes)", got, want)
	}
}

func testWatchEndsWithContext(t *testing.T, open func(t *testing.T) settings.Store) {
	s := openClosed(t, open)
	c, cancel := context.WithCancel(context.Background())
	ch, err := s.Watch(c)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	waitClosed(t, ch)
	mustSet(t, s, "dry-run", "true") // the store still works
}

func waitClosed(t *testing.T, ch <-chan settings.StoreEvent) {
	t.Helper()
	deadline := time.After(EventTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("watch channel not closed")
		}
	}
}

func testClose(t *testing.T, open func(t *testing.T) settings.Store) {
	s := open(t)
	ch, err := s.Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, ch)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Set(ctx(t), "dry-run", "true"); err == nil {
		t.Fatal("Set after Close succeeded, want an error")
	}
	if _, _, err := s.Get(ctx(t), "dry-run"); err == nil {
		t.Fatal("Get after Close succeeded, want an error")
	}
	if _, err := s.Watch(ctx(t)); err == nil {
		t.Fatal("Watch after Close succeeded, want an error")
	}
}

// writeMany has writers goroutines each set perWriter distinct names on the
// stores given (round robin) and then checks that every one is there.
func writeMany(t *testing.T, stores []settings.Store, writers, perWriter int) {
	var wg sync.WaitGroup
	errs := make(chan error, writers*perWriter)
	for w := range writers {
		s := stores[w%len(stores)]
		wg.Go(func() {
			for i := range perWriter {
				if err := s.Set(ctx(t), fmt.Sprintf("key-%d-%d", w, i), fmt.Sprint(w*1000+i)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Set: %v", err)
	}
	all, err := stores[0].List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for w := range writers {
		for i := range perWriter {
			name := fmt.Sprintf("key-%d-%d", w, i)
			if got := all[name]; got != fmt.Sprint(w*1000+i) {
				t.Errorf("%s = %q after concurrent writes, want %d (lost update)", name, got, w*1000+i)
			}
		}
	}
}

func testConcurrentWriters(t *testing.T, open func(t *testing.T) settings.Store) {
	writeMany(t, []settings.Store{openClosed(t, open)}, 4, 10)
}

func testConcurrentInstances(t *testing.T, open func(t *testing.T) settings.Store) {
	writeMany(t, []settings.Store{openClosed(t, open), openClosed(t, open)}, 4, 10)
}

func testReopen(t *testing.T, open func(t *testing.T) settings.Store) {
	s := open(t)
	mustSet(t, s, "dry-run", "true")
	mustSet(t, s, "crash-loop-restart-limit", "8")
	if err := s.Delete(ctx(t), "crash-loop-restart-limit"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	again := openClosed(t, open)
	wantGet(t, again, "dry-run", "true", true)
	wantGet(t, again, "crash-loop-restart-limit", "", false)
}

func testWatchOtherInstance(t *testing.T, open func(t *testing.T) settings.Store) {
	a, b := openClosed(t, open), openClosed(t, open)
	ch, err := a.Watch(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, b, "dry-run", "true")
	if got, want := NextEvent(t, ch), (settings.StoreEvent{Name: "dry-run", Value: "true"}); got != want {
		t.Fatalf("event %+v, want %+v", got, want)
	}
	if err := b.Delete(ctx(t), "dry-run"); err != nil {
		t.Fatal(err)
	}
	if got, want := NextEvent(t, ch), (settings.StoreEvent{Name: "dry-run", Deleted: true}); got != want {
		t.Fatalf("event %+v, want %+v", got, want)
	}
}
