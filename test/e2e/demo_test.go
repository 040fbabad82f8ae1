package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/sandbox"
)

// The demo smoke test runs `make run DEMO=auto` the way the Makefile does,
// with a sandbox name, subnets and port of its own, on real nodes (the
// demo's default).
const (
	demoName      = "e2e-demo"
	demoSubnet    = "10.213.184.0/24"
	demoPodSubnet = "10.220.0.0/16"
)

// TestDemo_Auto is `make test`'s smoke test of the demo: bin/vigil-sandbox
// demo --auto builds the node images, brings up the 3-node sandbox of real
// nodes with the stack and the manager, the StatefulSet whose container is
// the writer, cuts the power of the pod's node, and must exit 0 after the
// replacement's container ran elsewhere with all its acknowledged data,
// having printed the recovery as it happened; then nothing of its sandbox may
// be left on the machine (processes, containers, cgroups, namespaces, mounts).
func TestDemo_Auto(t *testing.T) {
	requireRealNodes(t)
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", sandbox.BinVigilSandbox))
	must(t, err)
	workDir := sandbox.DefaultWorkDir(demoName)
	must(t, sandbox.DownWorkDir(workDir)) // a crashed run's leftovers
	t.Cleanup(func() { _ = sandbox.DownWorkDir(workDir) })
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, bin, "--name", demoName, "demo", "--auto", "--subnet", demoSubnet, "--pod-subnet", demoPodSubnet,
		"--listen", "127.0.0.1:0", "--timeout", "2m")
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	t.Logf("%s demo --auto (%.1fs):\n%s", bin, time.Since(t0).Seconds(), out)
	if err != nil {
		t.Fatalf("demo --auto: %v", err)
	}
	for _, want := range []string{
		"node images built here",
		"each node a real kubelet, containerd",
		"vigil demo [6/6] ready",
		"writer started for pod " + "demo-db-0",
		"power cut of node-",
		"the writer's container",
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
		t.Logf("FIGURE demo (real nodes): power cut → replacement's container writing, its data checked: %ss", m[1])
	}
	left, err := sandbox.Leftovers(demoName, workDir)
	must(t, err)
	if len(left) > 0 {
		t.Errorf("after the demo, left behind: %v", left)
	}
}

// TestDemo_Interactive is `make run` as a person uses it: the demo runs until
// Ctrl-C; meanwhile the node-stop command it prints, run from another
// process, cuts the pod's node, and the demo shows the recovery and the data
// check; SIGINT then ends it with exit status 0 and nothing left behind.
func TestDemo_Interactive(t *testing.T) {
	requireRealNodes(t)
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", sandbox.BinVigilSandbox))
	must(t, err)
	name := demoName + "-i"
	workDir := sandbox.DefaultWorkDir(name)
	must(t, sandbox.DownWorkDir(workDir))
	t.Cleanup(func() { _ = sandbox.DownWorkDir(workDir) })
	cmd := exec.Command(bin, "--name", name, "demo", "--subnet", demoSubnetInteractive, "--pod-subnet", demoPodSubnetInteractive,
		"--listen", "127.0.0.1:0")
	out := &lines{}
	cmd.Stdout, cmd.Stderr = out, out
	must(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		t.Logf("demo output:\n%s", out)
	})
	stop := out.wait(t, done, regexp.MustCompile(`(\S+ --name \S+) node stop (node-\d+)`), 3*time.Minute)
	if stop == nil {
		return
	}
	if b, err := exec.Command(bin, "--name", name, "node", "stop", stop[2]).CombinedOutput(); err != nil {
		t.Fatalf("the printed command %s node stop %s: %v\n%s", stop[1], stop[2], err, b)
	}
	if out.wait(t, done, regexp.MustCompile(`data check on node-\d+: all \d+ records`), 2*time.Minute) == nil {
		return
	}
	must(t, cmd.Process.Signal(os.Interrupt))
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("demo after Ctrl-C: %v, want exit status 0", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the demo did not end within 2 minutes of Ctrl-C")
	}
	if !strings.Contains(out.String(), "nothing is left behind") {
		t.Errorf("the demo did not report its teardown")
	}
	left, err := sandbox.Leftovers(name, workDir)
	must(t, err)
	if len(left) > 0 {
		t.Errorf("after Ctrl-C, left behind: %v", left)
	}
}

// demoSubnetInteractive and demoPodSubnetInteractive keep the interactive
// demo's links and pods apart from the auto mode's.
const (
	demoSubnetInteractive    = "10.213.188.0/24"
	demoPodSubnetInteractive = "10.221.0.0/16"
)

// lines collects a process's output, safe for concurrent use.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// wait waits until the output matches re and returns the submatches; nil
// (the test failed) if the process ended or timeout passed first.
func (l *lines) wait(t *testing.T, done <-chan error, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m := re.FindStringSubmatch(l.String()); m != nil {
			return m
		}
		select {
		case err := <-done:
			t.Errorf("the demo ended (%v) before printing %q", err, re)
			return nil
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Errorf("the demo did not print %q within %s", re, timeout)
			return nil
		}
	}
}
