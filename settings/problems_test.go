package settings_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/settings"
)

// waitActBlocked waits until ActBlocked's answer satisfies ok, woken by
// ProblemsChanged; it fails after changeTimeout with the last answer.
func waitActBlocked(t *testing.T, s *settings.Settings, what string, ok func(error) bool) error {
	t.Helper()
	deadline := time.After(changeTimeout)
	for {
		changed := s.ProblemsChanged()
		err := s.ActBlocked()
		if ok(err) {
			return err
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("waiting for %s: ActBlocked still %v after %s", what, err, changeTimeout)
		}
	}
}

func blocked(err error) bool   { return errors.Is(err, settings.ErrActBlocked) }
func unblocked(err error) bool { return err == nil }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSettings_ActBlocked_BadManagedValueAtStartup is the case where a managed
// dry-run with a typo at startup must not silently become the store's false and
// let Vigil act. The value in force is the store's, but acting is blocked with
// an error naming the file, the value and what is allowed, until the file is
// fixed.
func TestSettings_ActBlocked_BadManagedValueAtStartup(t *testing.T) {
	store := settings.NewMemoryStore()
	if err := store.Set(context.Background(), "dry-run", "false"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "dry-run")
	writeFile(t, path, "ture\n")
	s, _ := newSettings(t, store, dir)
	err := s.ActBlocked()
	var be *settings.BlockedError
	if !errors.Is(err, settings.ErrActBlocked) || !errors.As(err, &be) {
		t.Fatalf("ActBlocked = %v, want a *BlockedError", err)
	}
	for _, want := range []string{path, `"ture\n"`, "dry-run", "one of false, true", "did you mean true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ActBlocked %q does not name %q", err, want)
		}
	}
	want := settings.Problem{Setting: "dry-run", Source: settings.SourceManaged, Path: path, Value: "ture\n",
		Allowed: "one of false, true", Blocking: true}
	if len(be.Problems) != 1 || withoutMessage(be.Problems[0]) != want {
		t.Fatalf("blocking problems %+v, want %+v", be.Problems, want)
	}
	if e, _ := s.Get("dry-run"); !e.Blocking || e.Source != settings.SourceStore || e.ManagedPath != path {
		t.Fatalf("entry %+v: want the store's value in force, locked, blocking", e)
	}
	writeFile(t, path, "true")
	waitActBlocked(t, s, "the fix to unblock", unblocked)
	if !s.DryRun() || len(s.Problems()) != 0 {
		t.Fatalf("after the fix: dry-run %t, problems %+v", s.DryRun(), s.Problems())
	}
	// Bad again: the good value seen since start stays in force and does not block.
	writeFile(t, path, "nope")
	for len(s.Problems()) == 0 {
		waitProblemsChanged(t, s)
	}
	if err := s.ActBlocked(); err != nil || !s.DryRun() {
		t.Fatalf("a bad value after a good one: ActBlocked %v, dry-run %t; want nil and the last good true", err, s.DryRun())
	}
	if p := s.Problems(); len(p) != 1 || p[0].Blocking || p[0].Value != "nope" {
		t.Fatalf("problems %+v, want one, not blocking", p)
	}
}

func waitProblemsChanged(t *testing.T, s *settings.Settings) {
	t.Helper()
	select {
	case <-s.ProblemsChanged():
	case <-time.After(changeTimeout):
		t.Fatalf("problems did not change within %s", changeTimeout)
	}
}

func withoutMessage(p settings.Problem) settings.Problem {
	p.Message = ""
	return p
}

// TestSettings_ActBlocked_EmptiedFileAtStartup: an emptied managed file, seen
// by a process that starts after the file was emptied.
func TestSettings_ActBlocked_EmptiedFileAtStartup(t *testing.T) {
	store := settings.NewMemoryStore()
	if err := store.Set(context.Background(), "node-down-grace-period", "4s"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "node-down-grace-period"), "")
	s, _ := newSettings(t, store, dir)
	if err := s.ActBlocked(); !blocked(err) || !strings.Contains(err.Error(), `invalid value ""`) {
		t.Fatalf("ActBlocked = %v, want blocked by the empty file", err)
	}
}

// TestSettings_ActBlocked_RemovedFileUnblocks: removing the bad file is a fix
// too: the store's value is then the one meant.
func TestSettings_ActBlocked_RemovedFileUnblocks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node-down-pod-deletion-policy")
	writeFile(t, path, "delete-everything")
	s, _ := newSettings(t, settings.NewMemoryStore(), dir)
	waitActBlocked(t, s, "the bad file to block", blocked)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitActBlocked(t, s, "the removal to unblock", unblocked)
}

// TestSettings_ActBlocked_UnknownOverlayFile: a file that names no setting
// (dry_run for dry-run) blocks while it is there: what it was meant to change is
// not in force.
func TestSettings_ActBlocked_UnknownOverlayFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dry_run")
	writeFile(t, path, "true")
	s, _ := newSettings(t, settings.NewMemoryStore(), dir)
	err := s.ActBlocked()
	if !blocked(err) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "did you mean dry-run") {
		t.Fatalf("ActBlocked = %v, want blocked naming %s and suggesting dry-run", err, path)
	}
	p := s.Problems()
	if len(p) != 1 || p[0].Setting != "" || p[0].Path != path || p[0].Value != "true" || !strings.Contains(p[0].Allowed, "dry-run") {
		t.Fatalf("problems %+v", p)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitActBlocked(t, s, "the removal to unblock", unblocked)
}

// TestSettings_ActBlocked_BadStoreValue: the same rule for the store (a
// ConfigMap edited with kubectl): bad from the start blocks until fixed or
// reset; bad after a good value keeps the good one and does not block.
func TestSettings_ActBlocked_BadStoreValue(t *testing.T) {
	store := settings.NewMemoryStore()
	ctx := context.Background()
	if err := store.Set(ctx, "dry-run", "yes"); err != nil {
		t.Fatal(err)
	}
	s, _ := newSettings(t, store, "")
	err := s.ActBlocked()
	if !blocked(err) || !strings.Contains(err.Error(), `"yes"`) || !strings.Contains(err.Error(), "store") {
		t.Fatalf("ActBlocked = %v, want blocked by the store's value", err)
	}
	if err := s.Reset(ctx, "dry-run"); err != nil { // the default is what is meant now
		t.Fatal(err)
	}
	waitActBlocked(t, s, "the reset to unblock", unblocked)
	if err := s.Set(ctx, "dry-run", "true"); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, "dry-run", "maybe"); err != nil {
		t.Fatal(err)
	}
	for len(s.Problems()) == 0 {
		waitProblemsChanged(t, s)
	}
	if err := s.ActBlocked(); err != nil || !s.DryRun() {
		t.Fatalf("bad store value after a good one: ActBlocked %v, dry-run %t", err, s.DryRun())
	}
}

// TestSettings_ActBlocked_GoodOverlayCoversBadStore: a bad store value under a
// good managed value blocks nothing: the managed value is in force, as given.
func TestSettings_ActBlocked_GoodOverlayCoversBadStore(t *testing.T) {
	store := settings.NewMemoryStore()
	if err := store.Set(context.Background(), "dry-run", "yes"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "dry-run"), "true")
	s, _ := newSettings(t, store, dir)
	if err := s.ActBlocked(); err != nil {
		t.Fatalf("ActBlocked = %v, want nil", err)
	}
	if p := s.Problems(); len(p) != 1 || p[0].Source != settings.SourceStore || p[0].Blocking {
		t.Fatalf("problems %+v, want the store's, not blocking", p)
	}
}
