package enginenode

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/internal/testenv"
)

// Task flags (field 9 of /proc/PID/task/TID/stat) that PR_SET_IO_FLUSHER
// sets: PF_MEMALLOC_NOIO | PF_LOCAL_THROTTLE; PR_GET_IO_FLUSHER is 1 exactly
// when a thread has both.
const (
	pfMemallocNoIO   = 0x00080000
	pfLocalThrottle  = 0x00100000
	capIPCLock       = 14
	capSysResource   = 24
	engineBinaryName = "vigil-engine-node"
)

// engineBinary builds the engine's binary once per test binary run.
var engineBinary = func() func(t *testing.T) string {
	var path string
	return func(t *testing.T) string {
		t.Helper()
		if path != "" {
			return path
		}
		dir, err := os.MkdirTemp("", "vengine-bin")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, engineBinaryName)
		if out, err := exec.Command("go", "build", "-o", p, "github.com/vigil-storage/vigil/cmd/vigil-engine-node").CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", engineBinaryName, err, out)
		}
		path = p
		return p
	}
}()

// engineProc is a started vigil-engine-node process.
type engineProc struct {
	pid  int
	log  string
	done chan error
}

// startEngineProcess starts `vigil-engine-node run` (behind the command wrap, if
// any: setpriv, prlimit) against a test datapath with extra flags; with
// serving it waits until the CSI socket answers, else until it exits.
func startEngineProcess(t *testing.T, wrap []string, serving bool, extra ...string) *engineProc {
	t.Helper()
	srv := datapathtest.Start(t, datapath.Options{Logger: quiet})
	dir, err := os.MkdirTemp("", "vwb") // short: a socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	args := append(runArgs(t, dir, srv.Addr, srv.NodeToken("node-a"))[1:], extra...)
	args = append(append(append([]string{}, wrap...), engineBinary(t)), args...)
	e := &engineProc{log: filepath.Join(dir, "engine.log"), done: make(chan error, 1)}
	logf, err := os.Create(e.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.pid = cmd.Process.Pid
	go func() { e.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			t.Errorf("engine %d did not exit after SIGKILL", e.pid)
		}
	})
	if serving {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dialNode(t, ctx, filepath.Join(dir, "csi.sock"))
	}
	return e
}

// status reads a field of /proc/PID/status in kB.
func procStatusKB(t *testing.T, pid int, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, field, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// hasCap reports whether this process has capability bit in its effective set.
func hasCap(t *testing.T, bit uint) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<bit) != 0
		}
	}
	return false
}

// threadFlags is field 9 (flags) of every thread of pid, by thread id.
func threadFlags(t *testing.T, pid int) map[string]uint64 {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue // the thread ended
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		v, err := strconv.ParseUint(f[6], 10, 64) // f[0] is field 3
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = v
	}
	return out
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEngineProcess_WritebackGuard_LocksMemory: a started engine has its
// memory locked (VmLck in /proc/PID/status), and with the guard off it has
// not. Both resident sizes are logged.
func TestEngineProcess_WritebackGuard_LocksMemory(t *testing.T) {
	testenv.RequireRoot(t, "mlockall beyond RLIMIT_MEMLOCK needs CAP_IPC_LOCK")
	testenv.Require(t, "CAP_IPC_LOCK", hasCap(t, capIPCLock), "not in this process's effective capabilities")
	on := startEngineProcess(t, nil, true)
	off := startEngineProcess(t, nil, true, "--writeback-guard", WritebackGuardOff)
	time.Sleep(time.Second) // let both settle before the sizes are read
	lck, rss := procStatusKB(t, on.pid, "VmLck"), procStatusKB(t, on.pid, "VmRSS")
	offLck, offRSS := procStatusKB(t, off.pid, "VmLck"), procStatusKB(t, off.pid, "VmRSS")
	t.Logf("engine serving, idle: guard on VmLck %d kB VmRSS %d kB; guard off VmLck %d kB VmRSS %d kB", lck, rss, offLck, offRSS)
	if lck == 0 {
		t.Errorf("engine with the writeback guard: VmLck 0 kB, want its memory locked; its log:\n%s", readLog(t, on.log))
	}
	if offLck != 0 {
		t.Errorf("engine with --writeback-guard off: VmLck %d kB, want 0", offLck)
	}
}

// TestEngineProcess_WritebackGuard_IOFlusher: every thread of a started
// engine is an I/O flusher (PR_GET_IO_FLUSHER would say 1 on each), not only
// the one that asked. A host that withholds CAP_SYS_RESOURCE even from root
// (a container whose bounding set lacks it, as on the sandbox machines) cannot
// make one; there the engine must say so in one Warning and no thread may
// claim to be one, so the test checks that instead of skipping.
func TestEngineProcess_WritebackGuard_IOFlusher(t *testing.T) {
	testenv.RequireRoot(t, "PR_SET_IO_FLUSHER needs CAP_SYS_RESOURCE")
	granted := hasCap(t, capSysResource)
	e := startEngineProcess(t, nil, true)
	flags := threadFlags(t, e.pid)
	if len(flags) < 2 {
		t.Fatalf("engine %d has %d threads, want several (a Go program)", e.pid, len(flags))
	}
	const flusher = pfMemallocNoIO | pfLocalThrottle
	for tid, f := range flags {
		if got := f&flusher == flusher; got != granted {
			t.Errorf("engine %d thread %s: flags %#x, I/O flusher %v; want %v (CAP_SYS_RESOURCE granted: %v)", e.pid, tid, f, got, granted, granted)
		}
	}
	log := readLog(t, e.log)
	if granted {
		if !strings.Contains(log, "writeback guard on") || strings.Contains(log, "level=WARN") {
			t.Errorf("engine log, want the guard on and no warning:\n%s", log)
		}
		return
	}
	t.Logf("this host withholds CAP_SYS_RESOURCE from root: checked that the engine warns and no thread claims to be an I/O flusher")
	var warns []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "writeback") {
			warns = append(warns, line)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "CAP_SYS_RESOURCE") {
		t.Errorf("engine without CAP_SYS_RESOURCE logged %d writeback warnings, want one naming CAP_SYS_RESOURCE:\n%s", len(warns), log)
	}
}

// TestEngineProcess_WritebackGuard_WithoutCapabilities: without
// CAP_SYS_RESOURCE and CAP_IPC_LOCK (and a small RLIMIT_MEMLOCK) the engine
// logs one Warning naming both and serves; with --writeback-guard require it
// refuses to start, naming them.
func TestEngineProcess_WritebackGuard_WithoutCapabilities(t *testing.T) {
	testenv.RequireRoot(t, "dropping capabilities from a root process")
	testenv.RequireTool(t, "setpriv", "util-linux")
	testenv.RequireTool(t, "prlimit", "util-linux")
	wrap := []string{"prlimit", "--memlock=65536:65536", "setpriv",
		"--bounding-set", "-sys_resource,-ipc_lock", "--inh-caps", "-sys_resource,-ipc_lock", "--"}
	e := startEngineProcess(t, wrap, true)
	log := readLog(t, e.log)
	var warns []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "writeback") {
			warns = append(warns, line)
		}
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "CAP_SYS_RESOURCE") || !strings.Contains(warns[0], "CAP_IPC_LOCK") {
		t.Errorf("engine without the capabilities logged %d writeback warnings, want one naming CAP_SYS_RESOURCE and CAP_IPC_LOCK:\n%s", len(warns), log)
	}
	if lck := procStatusKB(t, e.pid, "VmLck"); lck != 0 {
		t.Errorf("engine without CAP_IPC_LOCK: VmLck %d kB, want 0", lck)
	}

	r := startEngineProcess(t, wrap, false, "--writeback-guard", WritebackGuardRequire)
	select {
	case err := <-r.done:
		log := readLog(t, r.log)
		if err == nil || !strings.Contains(log, ErrWritebackUnguarded.Error()) || !strings.Contains(log, "CAP_SYS_RESOURCE") {
			t.Errorf("--writeback-guard require without the capabilities: exit %v, want a failure naming CAP_SYS_RESOURCE:\n%s", err, log)
		}
		r.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("--writeback-guard require without the capabilities: still running after 30 s:\n%s", readLog(t, r.log))
	}
}
