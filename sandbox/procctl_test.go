package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// procFixture is a sandbox state of one powered node (a real namespace) with
// one registered process, and one host process, all `sleep`.
func procFixture(t *testing.T) (*Sandbox, *nodeState) {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	n := &nodeState{Name: "node-1", HostIP: "10.213.251.13", NodeIP: "10.213.251.14", Powered: true}
	n.NetNS, n.HostVeth, n.NodeVeth = linkNames("unit-procctl", NodeName(0), 0)
	st := &state{Name: "unit-procctl", WorkDir: dir, Nodes: []*nodeState{n}}
	t.Cleanup(func() {
		if st, err := loadState(dir); err == nil {
			_ = teardownProcs(st)
		}
		if err := deleteLink(n); err != nil {
			t.Error(err)
		}
	})
	if err := createLink(n); err != nil {
		t.Fatal(err)
	}
	must(t, os.MkdirAll(n.dir(dir), 0o755))
	sleeper := &proc{ProcessSpec: ProcessSpec{Name: "sleeper", Args: []string{"sleep", "1000"}}, Log: filepath.Join(n.dir(dir), "sleeper.log")}
	n.Hooks = []*proc{sleeper}
	must(t, startProc(n, sleeper, nodeEnv(st, n)))
	host := &proc{ProcessSpec: ProcessSpec{Name: "host-sleep", Args: []string{"sleep", "1000"}}, Log: filepath.Join(dir, "host.log")}
	var err error
	host.PID, host.StartTime, err = startDetached("", host.Args, nil, host.Log)
	must(t, err)
	st.Host = []*proc{host}
	must(t, st.save())
	return &Sandbox{workDir: dir, logf: t.Logf, client: fake.NewClientset()}, n
}

func teardownProcs(st *state) error {
	var ps []*proc
	for _, n := range st.Nodes {
		ps = append(append(ps, n.procs()...), n.Once...)
	}
	return killAll(append(ps, st.Host...), 5*time.Second)
}

func pidOf(t *testing.T, s *Sandbox, node, name string) int {
	t.Helper()
	pid, err := s.ProcessPID(node, name)
	if err != nil {
		t.Fatalf("ProcessPID(%q, %q): %v", node, name, err)
	}
	return pid
}

func TestSandbox_KillProcess_StartProcess(t *testing.T) {
	s, _ := procFixture(t)
	for _, node := range []string{"node-1", ""} {
		name := map[string]string{"node-1": "sleeper", "": "host-sleep"}[node]
		before := pidOf(t, s, node, name)
		if before == 0 {
			t.Fatalf("%s not running", name)
		}
		must(t, s.KillProcess(node, name))
		if pid := pidOf(t, s, node, name); pid != 0 {
			t.Errorf("%s still runs as %d after KillProcess", name, pid)
		}
		must(t, s.KillProcess(node, name)) // killing a dead process does nothing
		must(t, s.StartProcess(node, name))
		after := pidOf(t, s, node, name)
		if after == 0 || after == before {
			t.Errorf("%s after StartProcess: pid %d (before %d), want a new process", name, after, before)
		}
		must(t, s.StartProcess(node, name)) // a running process is left alone
		if again := pidOf(t, s, node, name); again != after {
			t.Errorf("StartProcess of a running %s replaced it (%d -> %d)", name, after, again)
		}
	}
}

func TestSandbox_RunOnNode_OnceAndStop(t *testing.T) {
	s, _ := procFixture(t)
	spec := ProcessSpec{Name: "writer-x", Args: []string{"sh", "-c", `echo "$VIGIL_NODE" > "$VIGIL_NODE_DIR/once.out"; exec sleep 1000`}}
	must(t, s.RunOnNode("node-1", spec))
	if err := s.RunOnNode("node-1", spec); !errors.Is(err, ErrAlreadyUp) {
		t.Errorf("second RunOnNode with the same name = %v, want ErrAlreadyUp", err)
	}
	if err := s.RunOnNode("node-1", ProcessSpec{Name: "sleeper", Args: []string{"true"}}); !errors.Is(err, ErrAlreadyUp) {
		t.Errorf("RunOnNode named like a registered process = %v, want ErrAlreadyUp", err)
	}
	if pidOf(t, s, "node-1", "writer-x") == 0 {
		t.Fatal("one-off process not running")
	}
	if err := s.StartProcess("node-1", "writer-x"); !errors.Is(err, ErrUnknownProcess) {
		t.Errorf("StartProcess of a one-off = %v, want ErrUnknownProcess", err)
	}
	st, err := s.Status(t.Context())
	must(t, err)
	found := false
	for _, p := range st.Nodes[0].Processes {
		found = found || (p.Name == "writer-x" && p.Running)
	}
	if !found || len(st.Host) != 1 || !st.Host[0].Running {
		t.Errorf("Status lists node processes %+v, host %+v; want writer-x and host-sleep running", st.Nodes[0].Processes, st.Host)
	}
	must(t, s.Stop("node-1"))
	if _, err := s.ProcessPID("node-1", "writer-x"); !errors.Is(err, ErrUnknownProcess) {
		t.Errorf("after Stop, ProcessPID(writer-x) = %v, want ErrUnknownProcess (a power cut ends one-off processes)", err)
	}
	if err := s.RunOnNode("node-1", spec); !errors.Is(err, ErrNodeOff) {
		t.Errorf("RunOnNode on a stopped node = %v, want ErrNodeOff", err)
	}
	if err := s.StartProcess("node-1", "sleeper"); !errors.Is(err, ErrNodeOff) {
		t.Errorf("StartProcess on a stopped node = %v, want ErrNodeOff", err)
	}
}

func TestSandbox_ProcessControl_Bad(t *testing.T) {
	s, _ := procFixture(t)
	err := s.KillProcess("node-1", "nope")
	if !errors.Is(err, ErrUnknownProcess) || !strings.Contains(err.Error(), "sleeper") {
		t.Errorf("KillProcess(nope) = %v, want ErrUnknownProcess listing the processes", err)
	}
	if err := s.KillProcess("node-9", "sleeper"); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("KillProcess on node-9 = %v, want ErrUnknownNode", err)
	}
	if err := s.StartProcess("", "nope"); !errors.Is(err, ErrUnknownProcess) {
		t.Errorf("StartProcess(host nope) = %v, want ErrUnknownProcess", err)
	}
	for _, spec := range []ProcessSpec{{}, {Name: "a/b", Args: []string{"true"}}, {Name: "x"}} {
		if err := s.RunOnNode("node-1", spec); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("RunOnNode(%+v) = %v, want ErrInvalidConfig", spec, err)
		}
	}
	if pidOf(t, s, "node-1", "sleeper") == 0 {
		t.Error("bad calls disturbed the running process")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSandbox_RunOnHost_BadSpec(t *testing.T) {
	s := &Sandbox{workDir: t.TempDir()}
	for _, spec := range []ProcessSpec{{}, {Name: "x"}, {Name: "a/b", Args: []string{"true"}}, {Name: "a b", Args: []string{"true"}}} {
		if err := s.RunOnHost(spec); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("RunOnHost(%+v) = %v, want ErrInvalidConfig", spec, err)
		}
	}
	if err := s.RunOnHost(ProcessSpec{Name: "ok", Args: []string{"true"}}); !errors.Is(err, ErrNotUp) {
		t.Errorf("RunOnHost without a sandbox = %v, want ErrNotUp", err)
	}
}

func TestLeftovers_WorkDirAndProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vigil-sandbox-left")
	if left, err := Leftovers("left", dir); err != nil || len(left) != 0 {
		t.Fatalf("nothing there: %v, %v; want none", left, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(dir string, args ...string) *exec.Cmd {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	named := start("/", "sh", "-c", "sleep 60; :", dir+"/marker") // names the directory
	inside := start(dir, "sleep", "60")                           // runs in it
	other := start("/", "sh", "-c", "sleep 60; :", dir+"-other/marker")
	left, err := Leftovers("left", dir)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(left, "\n")
	for _, c := range []*exec.Cmd{named, inside} {
		if !strings.Contains(got, fmt.Sprintf("process %d:", c.Process.Pid)) {
			t.Errorf("leftovers %q lack process %d (%s)", got, c.Process.Pid, c.Args)
		}
	}
	if !strings.Contains(got, "work directory "+dir) {
		t.Errorf("leftovers %q lack the work directory", got)
	}
	if strings.Contains(got, fmt.Sprintf("process %d:", other.Process.Pid)) {
		t.Errorf("leftovers %q name process %d, which belongs to another directory", got, other.Process.Pid)
	}
}
