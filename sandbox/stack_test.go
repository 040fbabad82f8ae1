package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/vigil-storage/vigil/internal/testenv"
)

func TestStackConfig_WithDefaults_Bad(t *testing.T) {
	if _, err := (StackConfig{}).withDefaults(t.TempDir()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("empty VigilBinDir: err %v, want ErrInvalidConfig", err)
	}
	if _, err := (StackConfig{VigilBinDir: t.TempDir(), DatapathPort: 70000}).withDefaults(t.TempDir()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("port 70000: err %v, want ErrInvalidConfig", err)
	}
	if _, err := (StackConfig{VigilBinDir: t.TempDir()}).withDefaults(t.TempDir()); !errors.Is(err, ErrBinariesMissing) {
		t.Errorf("empty bin dirs: err %v, want ErrBinariesMissing", err)
	}
}

func TestNodeCSIEndpoint_UnderNodeDir(t *testing.T) {
	if got, want := NodeCSIEndpoint("/w/nodes/node-1"), "unix:///w/nodes/node-1/engine/csi.sock"; got != want {
		t.Errorf("NodeCSIEndpoint = %q, want %q", got, want)
	}
}

func TestUnescapeMountPath_Octal(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/bad\09`: `/bad\09`} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// A process killed by a power cut leaves its mounts in the host's namespace;
// cleanupMounts removes the nested ones under the work dir, deepest first.
func TestCleanupMounts_Nested(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	dir := t.TempDir()
	outer, inner := filepath.Join(dir, "a b"), filepath.Join(dir, "a b", "inner")
	if err := os.MkdirAll(outer, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", outer, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(inner, syscall.MNT_DETACH); _ = syscall.Unmount(outer, syscall.MNT_DETACH) })
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(outer, inner, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if mps, _ := mountsUnder(dir); len(mps) != 2 || mps[0].path != inner {
		t.Fatalf("mountsUnder = %+v, want %s then %s", mps, inner, outer)
	}
	if err := cleanupMounts(dir); err != nil {
		t.Fatal(err)
	}
	if mps, _ := mountsUnder(dir); len(mps) != 0 {
		t.Errorf("after cleanupMounts: %+v still mounted", mps)
	}
}
