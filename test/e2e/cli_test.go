package e2e

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/sandbox"
)

// buildSandboxCLI builds bin/vigil-sandbox's command into a temporary directory.
func buildSandboxCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "vigil-sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/vigil-storage/vigil/cmd/vigil-sandbox").CombinedOutput(); err != nil {
		t.Fatalf("build vigil-sandbox: %v\n%s", err, out)
	}
	return bin
}

// TestCLI_Status_FromAnotherProcess runs bin/vigil-sandbox against the suite's
// sandbox: another process finds it through its work directory.
func TestCLI_Status_FromAnotherProcess(t *testing.T) {
	bin := buildSandboxCLI(t)
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

// TestCLI_NodeProcess kills and restarts one process of a node from the
// command line: the process changes, the node's others do not, and bad
// names are refused with what is allowed.
func TestCLI_NodeProcess(t *testing.T) {
	bin := buildSandboxCLI(t)
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--workdir", sb.WorkDir(), "node"}, args...)...).CombinedOutput()
		return string(out), err
	}
	pid := func(node, name string) int {
		t.Helper()
		p, err := sb.ProcessPID(node, name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	standIn0, kwok0 := pid("node-2", standIn.Name), pid("node-2", sandbox.NodeKwok)
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"kill", "node-9", "--process", standIn.Name}, "node-1"},
		{[]string{"restart", "node-2", "--process", "nope"}, "kwok, " + standIn.Name},
		{[]string{"kill", "node-2"}, "--process NAME"},
	} {
		if out, err := cli(c.args...); err == nil || !strings.Contains(out, c.mention) {
			t.Errorf("node %q: %v, %s; want an error naming %q", c.args, err, out, c.mention)
		}
	}
	if pid("node-2", standIn.Name) != standIn0 || pid("node-2", sandbox.NodeKwok) != kwok0 {
		t.Fatal("a refused command changed node-2's processes")
	}
	out, err := cli("restart", "node-2", "--process", standIn.Name, "--timeout", "10s")
	restarted := pid("node-2", standIn.Name)
	if err != nil || !strings.Contains(out, "exited") || !strings.Contains(out, strconv.Itoa(restarted)) || restarted == standIn0 {
		t.Errorf("node restart: %v, %s; want the stand-in (pid %d) stopped by SIGTERM and started again (now %d)", err, out, standIn0, restarted)
	}
	if out, err := cli("kill", "node-2", "--process", standIn.Name); err != nil || pid("node-2", standIn.Name) != 0 {
		t.Errorf("node kill: %v, %s; want the stand-in gone", err, out)
	}
	if out, err := cli("restart", "node-2", "--process", standIn.Name); err != nil || !strings.Contains(out, "was not running") || pid("node-2", standIn.Name) == 0 {
		t.Errorf("node restart of a killed process: %v, %s; want it started", err, out)
	}
	if pid("node-2", sandbox.NodeKwok) != kwok0 {
		t.Error("killing and restarting the stand-in touched node-2's kwok")
	}
}
