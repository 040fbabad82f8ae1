package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/sandbox"
)

// The demo smoke test runs `make run DEMO=auto` the way the Makefile does,
// with a sandbox name, subnet and port of its own.
const (
	demoName   = "e2e-demo"
	demoSubnet = "10.213.184.0/24"
)

// TestDemo_Auto is `make test`'s smoke test of the demo: bin/vigil-sandbox
// demo --auto brings up the 3-node sandbox with the stack and the manager,
// the StatefulSet and its writer, cuts the power of the pod's node, and must
// exit 0 after the replacement ran elsewhere with all its acknowledged data,
// having printed the recovery as it happened; then nothing of its sandbox may
// be left on the machine.
func TestDemo_Auto(t *testing.T) {
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", sandbox.BinVigilSandbox))
	must(t, err)
	workDir := sandbox.DefaultWorkDir(demoName)
	must(t, sandbox.DownWorkDir(workDir)) // a crashed run's leftovers
	t.Cleanup(func() { _ = sandbox.DownWorkDir(workDir) })
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, bin, "--name", demoName, "demo", "--auto", "--subnet", demoSubnet,
		"--listen", "127.0.0.1:0", "--timeout", "2m")
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	t.Logf("%s demo --auto (%.1fs):\n%s", bin, time.Since(t0).Seconds(), out)
	if err != nil {
		t.Fatalf("demo --auto: %v", err)
	}
	for _, want := range []string{
		"vigil demo [6/6] ready",
		"writer started for pod " + "demo-db-0",
		"power cut of node-",
		"manager: fenced node-",
		"manager: force-deleted pod demo-db-0",
		"data check on node-",
		"runs again on node-",
		"nothing is left behind",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`with all its acknowledged data, ([0-9.]+)s after the power cut`).FindSubmatch(out); m != nil {
		t.Logf("FIGURE demo: power cut → replacement running with its data checked: %ss", m[1])
	}
	left, err := sandbox.Leftovers(demoName, workDir)
	must(t, err)
	if len(left) > 0 {
		t.Errorf("after the demo, left behind: %v", left)
	}
}
