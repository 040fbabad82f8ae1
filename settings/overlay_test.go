package settings_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil/settings"
)

// configMapVolume writes a directory exactly as the kubelet's atomic writer
// updates a mounted ConfigMap: the data in a timestamped directory, ..data a
// symlink to it swapped by an atomic rename, and each key a symlink to
// ..data/KEY.
type configMapVolume struct {
	dir  string
	gen  int
	keys map[string]bool
}

func newConfigMapVolume(t *testing.T, data map[string]string) *configMapVolume {
	v := &configMapVolume{dir: t.TempDir(), keys: map[string]bool{}}
	v.update(t, data)
	return v
}

func (v *configMapVolume) update(t *testing.T, data map[string]string) {
	t.Helper()
	v.gen++
	ts := fmt.Sprintf("..2026_11_20_23_59_%02d.%09d", v.gen, 123456789+v.gen)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(v.dir, ts), 0o755))
	for k, val := range data {
		must(os.WriteFile(filepath.Join(v.dir, ts, k), []byte(val), 0o644))
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	must(os.Symlink(ts, filepath.Join(v.dir, "..data_tmp")))
	must(os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")))
	for k := range data {
		if !v.keys[k] {
			must(os.Symlink(filepath.Join("..data", k), filepath.Join(v.dir, k)))
			v.keys[k] = true
		}
	}
	for k := range v.keys {
		if _, ok := data[k]; !ok {
			must(os.Remove(filepath.Join(v.dir, k)))
			delete(v.keys, k)
		}
	}
	if old != "" {
		must(os.RemoveAll(filepath.Join(v.dir, old)))
	}
}

func TestSettings_Overlay_OverridesStoreAndRefusesWrites(t *testing.T) {
	store := settings.NewMemoryStore()
	ctx := context.Background()
	if err := store.Set(ctx, "node-down-pod-deletion-policy", "delete-deployment-pod"); err != nil {
		t.Fatal(err)
	}
	vol := newConfigMapVolume(t, map[string]string{"node-down-pod-deletion-policy": "delete-both-statefulset-and-deployment-pod\n"})
	s, _ := newSettings(t, store, vol.dir)
	if got := s.NodeDownPodDeletionPolicy(); got != settings.PolicyDeleteBoth {
		t.Fatalf("policy = %s, want the overlay's", got)
	}
	path := filepath.Join(vol.dir, "node-down-pod-deletion-policy")
	e, _ := s.Get("node-down-pod-deletion-policy")
	if e.Source != settings.SourceManaged || e.ManagedPath != path {
		t.Fatalf("entry %+v, want managed by %s", e, path)
	}
	for _, err := range []error{
		s.Set(ctx, "node-down-pod-deletion-policy", "do-nothing"),
		s.Reset(ctx, "node-down-pod-deletion-policy"),
	} {
		var me *settings.ManagedError
		if !errors.Is(err, settings.ErrManaged) || !errors.As(err, &me) || !strings.Contains(err.Error(), path) {
			t.Fatalf("write to a managed setting = %v, want ErrManaged naming %s", err, path)
		}
	}
	if v, _, _ := store.Get(ctx, "node-down-pod-deletion-policy"); v != "delete-deployment-pod" {
		t.Fatalf("refused write changed the store to %q", v)
	}
	// Other settings stay writable.
	if err := s.Set(ctx, "dry-run", "true"); err != nil {
		t.Fatal(err)
	}
}

// TestSettings_Overlay_ConfigMapUpdateReachesSubscriber: each kubelet-style
// update reaches a subscriber as one change, in order. How long it took is
// logged (-v): the README's "within a second" is that figure, not an assertion.
func TestSettings_Overlay_ConfigMapUpdateReachesSubscriber(t *testing.T) {
	vol := newConfigMapVolume(t, map[string]string{"node-down-pod-deletion-policy": "do-nothing"})
	s, _ := newSettings(t, settings.NewMemoryStore(), vol.dir)
	ch, cancel := s.Subscribe()
	defer cancel()
	steps := []struct {
		data map[string]string
		want settings.Change
	}{
		{map[string]string{"node-down-pod-deletion-policy": "delete-statefulset-pod"},
			settings.Change{Name: "node-down-pod-deletion-policy", Value: "delete-statefulset-pod", Source: settings.SourceManaged}},
		{map[string]string{"node-down-pod-deletion-policy": "delete-statefulset-pod", "crash-loop-restart-limit": "3"},
			settings.Change{Name: "crash-loop-restart-limit", Value: "3", Source: settings.SourceManaged}},
		{map[string]string{"crash-loop-restart-limit": "3"}, // key removed: back to the default
			settings.Change{Name: "node-down-pod-deletion-policy", Value: "do-nothing", Source: settings.SourceDefault}},
	}
	for i, step := range steps {
		start := time.Now()
		vol.update(t, step.data)
		got := nextChange(t, ch)
		if got != step.want {
			t.Fatalf("step %d: change %+v, want %+v", i, got, step.want)
		}
		t.Logf("step %d: overlay change reached the subscriber in %s", i, time.Since(start))
	}
	if err := s.Set(context.Background(), "node-down-pod-deletion-policy", "delete-deployment-pod"); err != nil {
		t.Fatalf("Set after the key left the overlay: %v", err)
	}
}

func TestSettings_Overlay_InvalidValueRefusedLastGoodStays(t *testing.T) {
	vol := newConfigMapVolume(t, map[string]string{"node-down-grace-period": "5s"})
	s, reg := newSettings(t, settings.NewMemoryStore(), vol.dir)
	ch, cancel := s.Subscribe()
	defer cancel()
	vol.update(t, map[string]string{"node-down-grace-period": "forever"})
	// A later valid change of another key proves the bad one was processed.
	vol.update(t, map[string]string{"node-down-grace-period": "forever", "dry-run": "true"})
	if c := nextChange(t, ch); c.Name != "dry-run" {
		t.Fatalf("change %+v: the refused value was published", c)
	}
	e, _ := s.Get("node-down-grace-period")
	if s.NodeDownGracePeriod() != 5*time.Second || e.Source != settings.SourceManaged ||
		!strings.Contains(e.Problem, `"forever"`) || !strings.Contains(e.Problem, "from 0s to 10m") {
		t.Fatalf("after a bad overlay value: %s, %+v; want the last good 5s and the problem", s.NodeDownGracePeriod(), e)
	}
	if got := counterValue(t, reg, "vigil_settings_overlay_rejected_total", "node-down-grace-period"); got != 1 {
		t.Fatalf("overlay rejected counter = %v, want 1 (one bad content, counted once)", got)
	}
	vol.update(t, map[string]string{"node-down-grace-period": "7s", "dry-run": "true"})
	want := settings.Change{Name: "node-down-grace-period", Value: "7s", Source: settings.SourceManaged}
	if c := nextChange(t, ch); c != want {
		t.Fatalf("change %+v, want %+v", c, want)
	}
	if e, _ := s.Get("node-down-grace-period"); e.Problem != "" {
		t.Fatalf("problem %q still reported after the fix", e.Problem)
	}
}

func TestSettings_Overlay_InvalidFromTheStartIsLockedWithStoreValue(t *testing.T) {
	store := settings.NewMemoryStore()
	if err := store.Set(context.Background(), "volume-attachment-recovery-policy", "never"); err != nil {
		t.Fatal(err)
	}
	vol := newConfigMapVolume(t, map[string]string{"volume-attachment-recovery-policy": "sometimes", "not-a-setting": "x"})
	s, reg := newSettings(t, store, vol.dir)
	e, _ := s.Get("volume-attachment-recovery-policy")
	if s.VolumeAttachmentRecoveryPolicy() != settings.RecoveryNever || e.Source != settings.SourceStore ||
		e.ManagedPath == "" || !strings.Contains(e.Problem, "never, wait, immediate") {
		t.Fatalf("entry %+v: want the store's value in force, locked, with the problem", e)
	}
	// The store's value is not the one given: acting is blocked until fixed.
	if err := s.ActBlocked(); !errors.Is(err, settings.ErrActBlocked) || !strings.Contains(err.Error(), `"sometimes"`) {
		t.Fatalf("ActBlocked = %v, want blocked by the bad managed value", err)
	}
	if err := s.Set(context.Background(), "volume-attachment-recovery-policy", "wait"); !errors.Is(err, settings.ErrManaged) {
		t.Fatalf("Set = %v, want ErrManaged", err)
	}
	if got := counterValue(t, reg, "vigil_settings_overlay_rejected_total", "unknown"); got != 1 {
		t.Fatalf("unknown overlay file counted %v times, want 1", got)
	}
}

func TestSettings_Overlay_PlainFiles(t *testing.T) {
	dir := t.TempDir()
	s, _ := newSettings(t, settings.NewMemoryStore(), dir)
	ch, cancel := s.Subscribe()
	defer cancel()
	if err := os.WriteFile(filepath.Join(dir, "dry-run"), []byte("true"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := settings.Change{Name: "dry-run", Value: "true", Source: settings.SourceManaged}
	if c := nextChange(t, ch); c != want {
		t.Fatalf("change %+v, want %+v", c, want)
	}
	if err := os.Remove(filepath.Join(dir, "dry-run")); err != nil {
		t.Fatal(err)
	}
	want = settings.Change{Name: "dry-run", Value: "false", Source: settings.SourceDefault}
	if c := nextChange(t, ch); c != want {
		t.Fatalf("change %+v, want %+v", c, want)
	}
}

func TestNew_MissingOverlayDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	_, err := settings.New(settings.NewMemoryStore(), dir)
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("New with a missing overlay dir = %v, want an error naming it", err)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSettings_Overlay_EmptiedFileIsReported: a good managed file emptied while
// running is refused like any bad content: a problem, a log line, the counter
// (an empty content used to equal the initial "last rejected").
func TestSettings_Overlay_EmptiedFileIsReported(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node-down-grace-period")
	if err := os.WriteFile(path, []byte("4s"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	s, err := settings.New(settings.NewMemoryStore(), dir, settings.WithRegisterer(reg),
		settings.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ch, cancel := s.Subscribe()
	defer cancel()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A later valid change of another key proves the emptied one was processed.
	if err := os.WriteFile(filepath.Join(dir, "dry-run"), []byte("true"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := nextChange(t, ch); c.Name != "dry-run" {
		t.Fatalf("change %+v: the empty value was published", c)
	}
	e, _ := s.Get("node-down-grace-period")
	if s.NodeDownGracePeriod() != 4*time.Second || !strings.Contains(e.Problem, `invalid value ""`) || !strings.Contains(e.Problem, path) {
		t.Fatalf("after emptying %s: %s in force, problem %q; want 4s kept and the problem named", path, s.NodeDownGracePeriod(), e.Problem)
	}
	if got := counterValue(t, reg, "vigil_settings_overlay_rejected_total", "node-down-grace-period"); got != 1 {
		t.Fatalf("overlay rejected counter = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "setting=node-down-grace-period") || !strings.Contains(logs.String(), "refused") {
		t.Fatalf("no log line for the emptied file; log:\n%s", logs.String())
	}
}
