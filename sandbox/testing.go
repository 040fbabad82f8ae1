package sandbox

import (
	"context"
	"testing"
	"time"
)

// UpForTest brings a sandbox up for t: it registers the teardown with t.Cleanup
// before creating anything, so that even a failed Up or a failed test leaves
// nothing behind. An empty cfg.WorkDir becomes a directory under t.TempDir().
func UpForTest(t testing.TB, cfg Config) *Sandbox {
	t.Helper()
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	t.Cleanup(func() {
		if err := DownWorkDir(cfg.WorkDir); err != nil {
			t.Errorf("sandbox down: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Up(ctx, cfg)
	if err != nil {
		t.Fatalf("sandbox up: %v", err)
	}
	return s
}
