package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLI_Status_FromAnotherProcess runs bin/vigil-sandbox against the suite's
// sandbox: another process finds it through its work directory.
func TestCLI_Status_FromAnotherProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "vigil-sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/vigil-storage/vigil/cmd/vigil-sandbox").CombinedOutput(); err != nil {
		t.Fatalf("build vigil-sandbox: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--workdir", sb.WorkDir(), "status").CombinedOutput()
	if err != nil {
		t.Fatalf("vigil-sandbox status: %v\n%s", err, out)
	}
	t.Logf("vigil-sandbox status:\n%s", out)
	for _, want := range []string{"node-1", "node-2", "node-3", "stand-in(pid", "kwok(pid", sb.Kubeconfig()} {
		if !strings.Contains(string(out), want) {
			t.Errorf("status output lacks %q", want)
		}
	}
	out, err = exec.Command(bin, "--workdir", sb.WorkDir(), "node", "stop", "node-9").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown sandbox node") {
		t.Errorf("node stop node-9: %v, %s; want an unknown-node error", err, out)
	}
}
