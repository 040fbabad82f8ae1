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

func TestOpenStore_Bolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b.db")
	s, err := settings.OpenStore(context.Background(), "bolt:"+path, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("bolt file not created: %v", err)
	}
}

func TestOpenStore_Invalid(t *testing.T) {
	for _, spec := range []string{"", "bolt:", "bolt", "etcd:foo", "configmap:", "configmap:ns", "configmap:/name", "configmap:ns/"} {
		_, err := settings.OpenStore(context.Background(), spec, "")
		if !errors.Is(err, settings.ErrInvalidStoreSpec) {
			t.Errorf("OpenStore(%q) = %v, want ErrInvalidStoreSpec", spec, err)
			continue
		}
		if !strings.Contains(err.Error(), "configmap:NAMESPACE/NAME") && !strings.Contains(err.Error(), "bolt:") {
			t.Errorf("OpenStore(%q) error %q does not say what is allowed", spec, err)
		}
	}
}

func TestOpenStore_ConfigMapUnreachable(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// A server on a port nothing listens on.
	cfg := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := settings.OpenStore(context.Background(), "configmap:vigil-system/vigil-settings", kubeconfig)
	if !errors.Is(err, settings.ErrStoreUnavailable) {
		t.Fatalf("OpenStore against nothing = %v, want ErrStoreUnavailable", err)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("took %s to report an unreachable server", time.Since(start))
	}
	if _, err := settings.OpenStore(context.Background(), "configmap:a/b", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("OpenStore with a missing kubeconfig succeeded")
	}
}

func TestDefaultStoreSpec(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "/tmp/xdg")
	if got, want := settings.DefaultStoreSpec(), "bolt:/tmp/xdg/vigil/settings.db"; got != want {
		t.Fatalf("DefaultStoreSpec = %q, want %q", got, want)
	}
}
