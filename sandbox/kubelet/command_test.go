package kubelet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestCommand_BadFlags(t *testing.T) {
	t.Setenv("VIGIL_NODE", "")
	t.Setenv("VIGIL_KUBECONFIG", "")
	t.Setenv("VIGIL_NODE_DIR", "")
	app := &cli.App{Commands: []*cli.Command{Command()}, ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run([]string{"x", "kubelet", "--node", "node-a"})
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "--csi-endpoint") {
		t.Errorf("missing flags: %v", err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("not: [a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("VIGIL_NODE_DIR", t.TempDir())
	err = app.Run([]string{"x", "kubelet", "--node", "node-a", "--kubeconfig", kc, "--csi-endpoint", "unix:///x.sock"})
	if err == nil || !strings.Contains(err.Error(), "kubeconfig "+kc) {
		t.Errorf("bad kubeconfig: %v", err)
	}
}
