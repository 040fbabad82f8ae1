package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSandbox_RestartProcess_SIGTERM(t *testing.T) {
	s, n := procFixture(t)
	for _, node := range []string{"node-1", ""} {
		name := map[string]string{"node-1": "sleeper", "": "host-sleep"}[node]
		before := pidOf(t, s, node, name)
		r, err := s.RestartProcess(node, name, 10*time.Second)
		must(t, err)
		after := pidOf(t, s, node, name)
		if r.OldPID != before || r.NewPID != after || after == 0 || after == before || r.Killed || r.Stopped > 5*time.Second {
			t.Errorf("RestartProcess(%q) = %+v, pids %d -> %d; want %d stopped by SIGTERM and a new process", name, r, before, after, before)
		}
	}
	// A process that is not running is only started.
	must(t, s.KillProcess("node-1", "sleeper"))
	r, err := s.RestartProcess("node-1", "sleeper", time.Second)
	must(t, err)
	if r.OldPID != 0 || r.NewPID == 0 || pidOf(t, s, "node-1", "sleeper") != r.NewPID {
		t.Errorf("RestartProcess of a dead process = %+v, want it only started", r)
	}
	// The group goes with it: what the process left behind does not survive
	// its graceful exit, as nothing survives a container's stop.
	child := filepath.Join(n.dir(s.workDir), "child.pid")
	must(t, s.AddProcess("node-1", ProcessSpec{Name: "parent", Args: []string{"sh", "-c",
		"sleep 1000 & jobs -p > " + child + "; exec sleep 1000"}})) // no $: Args are expanded
	var childPID int
	waitFor(t, 5*time.Second, "the child's pid", func() bool {
		b, _ := os.ReadFile(child)
		childPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return childPID > 0
	})
	r, err = s.RestartProcess("node-1", "parent", 10*time.Second)
	must(t, err)
	if r.Killed {
		t.Errorf("a process that exits on SIGTERM was killed: %+v", r)
	}
	waitFor(t, 5*time.Second, "the left-behind child to be gone", func() bool { return gone(childPID) })
}

func TestSandbox_RestartProcess_IgnoresSIGTERM(t *testing.T) {
	s, _ := procFixture(t)
	must(t, s.AddProcess("node-1", ProcessSpec{Name: "stubborn", Args: []string{"sh", "-c", "trap '' TERM; exec sleep 1000"}}))
	before := pidOf(t, s, "node-1", "stubborn")
	// The shell ignores SIGTERM only once its trap ran; it has when it exec'd sleep.
	waitFor(t, 5*time.Second, "the stubborn shell to set its trap and exec sleep", func() bool {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", before))
		return err == nil && strings.TrimSpace(string(comm)) == "sleep"
	})
	r, err := s.RestartProcess("node-1", "stubborn", 300*time.Millisecond)
	must(t, err)
	if !r.Killed || r.Stopped < 300*time.Millisecond || r.OldPID != before || !gone(before) || r.NewPID == 0 {
		t.Errorf("RestartProcess of a process ignoring SIGTERM = %+v (old pid %d gone: %v), want it SIGKILLed after 300ms and started again",
			r, before, gone(before))
	}
}

func TestSandbox_RestartProcess_Bad(t *testing.T) {
	s, _ := procFixture(t)
	must(t, s.RunOnNode("node-1", ProcessSpec{Name: "once", Args: []string{"sleep", "1000"}}))
	sleeper, once := pidOf(t, s, "node-1", "sleeper"), pidOf(t, s, "node-1", "once")
	for _, c := range []struct {
		node, name string
		timeout    time.Duration
		want       error
		mention    string
	}{
		{"node-1", "sleeper", 0, ErrInvalidConfig, "want more than 0"},
		{"node-1", "sleeper", -time.Second, ErrInvalidConfig, "want more than 0"},
		{"node-1", "nope", time.Second, ErrUnknownProcess, "sleeper"},
		{"node-9", "sleeper", time.Second, ErrUnknownNode, "node-1"},
		{"node-1", "once", time.Second, ErrUnknownProcess, "one-off"},
		{"", "nope", time.Second, ErrUnknownProcess, "host-sleep"},
	} {
		r, err := s.RestartProcess(c.node, c.name, c.timeout)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.mention) || r != (Restarted{}) {
			t.Errorf("RestartProcess(%q, %q, %s) = %+v, %v; want %v mentioning %q", c.node, c.name, c.timeout, r, err, c.want, c.mention)
		}
	}
	if pidOf(t, s, "node-1", "sleeper") != sleeper || pidOf(t, s, "node-1", "once") != once {
		t.Error("a refused restart disturbed a running process")
	}
	must(t, s.Stop("node-1"))
	if _, err := s.RestartProcess("node-1", "sleeper", time.Second); !errors.Is(err, ErrNodeOff) {
		t.Errorf("RestartProcess on a stopped node = %v, want ErrNodeOff", err)
	}
}

// gone reports whether pid is no longer a live process (a zombie counts as
// gone: it runs nothing).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	_, err := procStartTime(pid)
	return err != nil
}

func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
