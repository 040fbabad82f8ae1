package sandbox

import (
	"github.com/vigil-storage/vigil/internal/testenv"

	"context"
	"os"
	"os/exec"
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

// RequirePrerequisite stops a test whose prerequisite is missing (ok false;
// what says which and how to get it): under CI=true it fails, so that a CI
// machine lacking it cannot pass quietly; elsewhere it skips.
func RequirePrerequisite(t testing.TB, ok bool, what string) {
	t.Helper()
	testenv.Require(t, what, ok, "the sandbox needs it")
}

// RequireRoot is RequirePrerequisite for root (network namespaces, nftables,
// mounts), and for the commands the sandbox runs as root: ip, nft and socat.
func RequireRoot(t testing.TB) {
	t.Helper()
	RequirePrerequisite(t, os.Geteuid() == 0, "root (network namespaces, nftables, mounts)")
	for _, tool := range []string{"ip", "nft", "socat"} {
		_, err := exec.LookPath(tool)
		RequirePrerequisite(t, err == nil, tool+" in PATH (Debian: apt-get install iproute2 nftables socat)")
	}
}
