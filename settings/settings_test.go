package settings_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil/settings"
)

// newSettings returns Settings over store with a private registry and a silent
// logger, closed at the end of the test.
func newSettings(t *testing.T, store settings.Store, overlayDir string) (*settings.Settings, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := settings.New(store, overlayDir, settings.WithRegisterer(reg),
		settings.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, reg
}

// changeTimeout bounds the wait for a change that must come. It is generous on
// purpose (a loaded 2-core machine under -race); the figure of interest, how
// fast a change arrives, is measured and logged where it matters, not asserted.
const changeTimeout = 15 * time.Second

// nextChange returns the next change. It fails when none arrives within
// changeTimeout or the subscription ends: the change a test waits for never
// came.
func nextChange(t *testing.T, ch <-chan settings.Change) settings.Change {
	t.Helper()
	select {
	case c, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed, want a change")
		}
		return c
	case <-time.After(changeTimeout):
		t.Fatalf("no change within %s", changeTimeout)
	}
	return settings.Change{}
}

func TestSettings_Defaults(t *testing.T) {
	s, _ := newSettings(t, settings.NewMemoryStore(), "")
	if got := s.NodeDownPodDeletionPolicy(); got != settings.PolicyDoNothing {
		t.Errorf("NodeDownPodDeletionPolicy = %q", got)
	}
	if got := s.VolumeAttachmentRecoveryPolicy(); got != settings.RecoveryWait {
		t.Errorf("VolumeAttachmentRecoveryPolicy = %q", got)
	}
	if s.FastFencedTrigger() || s.CrashLoopPodDeletion() || s.DryRun() {
		t.Error("a boolean setting defaults to true")
	}
	if s.NodeDownGracePeriod() != 2*time.Second || s.NotReadyDebounce() != 15*time.Second ||
		s.DatapathConnectivityLossThreshold() != 3*time.Second {
		t.Error("a duration default is wrong")
	}
	if s.CrashLoopRestartLimit() != 5 || len(s.ExtraProtectedProvisioners()) != 0 {
		t.Error("crash-loop-restart-limit or extra-protected-provisioners default is wrong")
	}
	if got := s.ControlPlaneOutageThreshold(); got != 55 {
		t.Errorf("ControlPlaneOutageThreshold = %d, want 55", got)
	}
	for _, e := range s.List() {
		if e.Source != settings.SourceDefault || e.Value != e.Default {
			t.Errorf("%s: %+v, want the default", e.Name, e)
		}
	}
}

func TestSettings_Set_Valid(t *testing.T) {
	store := settings.NewMemoryStore()
	s, _ := newSettings(t, store, "")
	ctx := context.Background()
	for name, v := range map[string]string{
		"node-down-pod-deletion-policy": "delete-statefulset-pod", "fast-fenced-trigger": "true",
		"node-down-grace-period": "120s", "crash-loop-restart-limit": "12",
		"extra-protected-provisioners": "b.csi.io, a.csi.io",
	} {
		if err := s.Set(ctx, name, v); err != nil {
			t.Fatalf("Set(%s, %s): %v", name, v, err)
		}
	}
	if s.NodeDownPodDeletionPolicy() != settings.PolicyDeleteStatefulSetPod || !s.FastFencedTrigger() ||
		s.NodeDownGracePeriod() != 2*time.Minute || s.CrashLoopRestartLimit() != 12 ||
		!slices.Equal(s.ExtraProtectedProvisioners(), []string{"b.csi.io", "a.csi.io"}) {
		t.Fatal("accessors do not reflect Set")
	}
	if v, _, _ := store.Get(ctx, "node-down-grace-period"); v != "2m" {
		t.Errorf("store holds %q, want the canonical 2m", v)
	}
	e, err := s.Get("node-down-grace-period")
	if err != nil || e.Value != "2m" || e.Source != settings.SourceStore || e.Default != "2s" {
		t.Errorf("Get = %+v, %v", e, err)
	}
	s.ExtraProtectedProvisioners()[0] = "mutated"
	if s.ExtraProtectedProvisioners()[0] != "b.csi.io" {
		t.Error("ExtraProtectedProvisioners returned the internal slice")
	}
}

func TestSettings_Set_RefusesAndWritesNothing(t *testing.T) {
	store := settings.NewMemoryStore()
	s, _ := newSettings(t, store, "")
	ctx := context.Background()
	if err := s.Set(ctx, "node-down-pod-deletion-policy", "delete-deployment-pod"); err != nil {
		t.Fatal(err)
	}
	err := s.Set(ctx, "node-down-pod-deletion-policy", "delete-everything")
	if !errors.Is(err, settings.ErrInvalidValue) {
		t.Fatalf("Set invalid = %v, want ErrInvalidValue", err)
	}
	if err := s.Set(ctx, "node-down-pod-deletion", "do-nothing"); !errors.Is(err, settings.ErrUnknownSetting) ||
		!strings.Contains(err.Error(), "did you mean node-down-pod-deletion-policy") {
		t.Fatalf("Set unknown = %v", err)
	}
	if err := s.Reset(ctx, "no-such-setting"); !errors.Is(err, settings.ErrUnknownSetting) {
		t.Fatalf("Reset unknown = %v", err)
	}
	all, _ := store.List(ctx)
	if len(all) != 1 || all["node-down-pod-deletion-policy"] != "delete-deployment-pod" {
		t.Fatalf("store = %v after refused writes", all)
	}
	if s.NodeDownPodDeletionPolicy() != settings.PolicyDeleteDeploymentPod {
		t.Fatal("refused write changed the value in force")
	}
}

func TestSettings_Reset(t *testing.T) {
	store := settings.NewMemoryStore()
	s, _ := newSettings(t, store, "")
	ctx := context.Background()
	if err := s.Set(ctx, "dry-run", "true"); err != nil {
		t.Fatal(err)
	}
	if err := s.Reset(ctx, "dry-run"); err != nil {
		t.Fatal(err)
	}
	if s.DryRun() {
		t.Fatal("dry-run still true after Reset")
	}
	if _, ok, _ := store.Get(ctx, "dry-run"); ok {
		t.Fatal("Reset left the value in the store")
	}
	if e, _ := s.Get("dry-run"); e.Source != settings.SourceDefault {
		t.Fatalf("source after Reset = %s", e.Source)
	}
}

func TestSettings_Subscribe_StoreWrites(t *testing.T) {
	store := settings.NewMemoryStore()
	s, _ := newSettings(t, store, "")
	ch, cancel := s.Subscribe()
	defer cancel()
	ctx := context.Background()
	// Another writer of the store, not through s.
	if err := store.Set(ctx, "volume-attachment-recovery-policy", "immediate"); err != nil {
		t.Fatal(err)
	}
	want := settings.Change{Name: "volume-attachment-recovery-policy", Value: "immediate", Source: settings.SourceStore}
	if got := nextChange(t, ch); got != want {
		t.Fatalf("change %+v, want %+v", got, want)
	}
	if s.VolumeAttachmentRecoveryPolicy() != settings.RecoveryImmediate {
		t.Fatal("accessor not updated")
	}
	if err := store.Delete(ctx, "volume-attachment-recovery-policy"); err != nil {
		t.Fatal(err)
	}
	want = settings.Change{Name: "volume-attachment-recovery-policy", Value: "wait", Source: settings.SourceDefault}
	if got := nextChange(t, ch); got != want {
		t.Fatalf("change %+v, want %+v", got, want)
	}
	cancel()
	for range ch { // closed by cancel
	}
}

func TestSettings_StoreInvalidValue_LastGoodStays(t *testing.T) {
	store := settings.NewMemoryStore()
	ctx := context.Background()
	if err := store.Set(ctx, "crash-loop-restart-limit", "bogus"); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, "unknown-thing", "1"); err != nil {
		t.Fatal(err)
	}
	s, reg := newSettings(t, store, "")
	if s.CrashLoopRestartLimit() != 5 {
		t.Fatal("invalid stored value not refused at load")
	}
	ch, cancel := s.Subscribe()
	defer cancel()
	if err := store.Set(ctx, "crash-loop-restart-limit", "7"); err != nil {
		t.Fatal(err)
	}
	nextChange(t, ch)
	if err := store.Set(ctx, "crash-loop-restart-limit", "0"); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, "dry-run", "true"); err != nil { // a marker after the bad value
		t.Fatal(err)
	}
	if c := nextChange(t, ch); c.Name != "dry-run" {
		t.Fatalf("change %+v: the refused value was published", c)
	}
	e, _ := s.Get("crash-loop-restart-limit")
	if s.CrashLoopRestartLimit() != 7 || e.Value != "7" || !strings.Contains(e.Problem, `"0"`) {
		t.Fatalf("after a bad store value: %d, %+v; want the last good 7 and a problem", s.CrashLoopRestartLimit(), e)
	}
	if got := counterValue(t, reg, "vigil_settings_store_rejected_total", "crash-loop-restart-limit"); got != 2 {
		t.Fatalf("store rejected counter = %v, want 2", got)
	}
}

// counterValue is the value of the counter name{setting=setting} in reg (0 if
// it was never incremented).
func counterValue(t *testing.T, reg *prometheus.Registry, name, setting string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "setting" && l.GetValue() == setting {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestSettings_Close(t *testing.T) {
	s, _ := newSettings(t, settings.NewMemoryStore(), "")
	ch, _ := s.Subscribe()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Fatal("subscription open after Close")
	}
	if err := s.Set(context.Background(), "dry-run", "true"); !errors.Is(err, settings.ErrClosed) {
		t.Fatalf("Set after Close = %v, want ErrClosed", err)
	}
	if s.DryRun() {
		t.Fatal("accessor broken after Close")
	}
}

func TestSettings_New_TwoOnOneRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		s, err := settings.New(settings.NewMemoryStore(), "", settings.WithRegisterer(reg))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		_ = s.Close()
	}
}

func TestSettings_Subscribe_OtherWriterOfTheBoltFile(t *testing.T) {
	path := t.TempDir() + "/settings.db"
	mine, other := openBolt(t, path), openBolt(t, path)
	defer mine.Close()
	defer other.Close()
	s, _ := newSettings(t, mine, "")
	ch, cancel := s.Subscribe()
	defer cancel()
	if err := other.Set(context.Background(), "node-not-ready-debounce", "30s"); err != nil {
		t.Fatal(err)
	}
	want := settings.Change{Name: "node-not-ready-debounce", Value: "30s", Source: settings.SourceStore}
	if got := nextChange(t, ch); got != want {
		t.Fatalf("change %+v, want %+v", got, want)
	}
	if s.NotReadyDebounce() != 30*time.Second {
		t.Fatal("accessor not updated")
	}
}
