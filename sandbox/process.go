package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessSpec is a command the sandbox runs inside a node's network namespace,
// started with the node and killed with it (SIGKILL, like a power cut). Args and Env
// values may refer to the node's environment, which is also passed to the process:
//
//	VIGIL_NODE        the node's name
//	VIGIL_BOOT_ID     a new random id at each boot of the node
//	VIGIL_NODE_DIR    a directory of the node's own, kept across boots
//	VIGIL_KUBECONFIG  a kubeconfig that reaches the API server over the node's link
//	VIGIL_NODE_IP     the node's address on its link
//	VIGIL_HOST_IP     the host's address on the node's link
//	VIGIL_NODES       the Kubernetes nodes it runs, comma-separated: the node
//	                  itself, or every node of a rack (scale sandbox)
//
// e.g. Args: []string{"bin/vigil-engine-node", "--node", "$VIGIL_NODE"}.
type ProcessSpec struct {
	// Name identifies the process on its node (status, logs); unique per node.
	Name string `json:"name"`
	// Args is the command line; Args[0] is looked up in PATH if it has no slash.
	Args []string `json:"args"`
	// Env is extra KEY=VALUE entries.
	Env []string `json:"env,omitempty"`
}

// proc is a ProcessSpec and, while it runs, its PID and start time (which guard
// against killing an unrelated process that reused the PID).
type proc struct {
	ProcessSpec
	PID       int    `json:"pid,omitempty"`
	StartTime uint64 `json:"startTime,omitempty"`
	Log       string `json:"log"`
}

// startDetached starts args (in network namespace netns unless it is empty) in a
// session of its own, so it outlives the caller, with output appended to logPath.
func startDetached(netns string, args, env []string, logPath string) (pid int, start uint64, err error) {
	if len(args) == 0 {
		return 0, 0, errors.New("empty command")
	}
	if netns != "" {
		// nsenter, not `ip netns exec`: the latter also unshares the mount
		// namespace, so mounts a node's process makes (a CSI node service's
		// staging and target paths) would be invisible to the host and to the
		// node's other processes; a node shares the host's mounts.
		args = append([]string{"nsenter", "--net=/run/netns/" + netns, "--"}, args...)
	}
	closeInheritedOnExec()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, 0, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== %s start: %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("start %s: %w", args[0], err)
	}
	pid = cmd.Process.Pid
	// Reap it when it dies, so a killed process does not linger as a zombie of a
	// long-lived caller (a test binary); the CLI exits long before.
	go func() { _ = cmd.Wait() }()
	start, err = procStartTime(pid)
	if err != nil {
		return pid, 0, fmt.Errorf("start %s: exited at once (see %s)", args[0], logPath)
	}
	return pid, start, nil
}

// closeInheritedOnExec marks every descriptor above stderr close-on-exec, once
// per process. Go opens its own files so, but not those it inherited: `flock
// FILE go test ...` hands its lock to the test as descriptor 3, and without this
// every node process would inherit it, so a node process stuck in the kernel
// (an engine killed while unmounting over its own FUSE disk) would hold the
// machine's sandbox lock for good.
var closeInheritedOnExec = sync.OnceFunc(closeInheritedOnExecBody)

func closeInheritedOnExecBody() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// procStartTime reads the start time of pid (field 22 of /proc/PID/stat, in clock
// ticks since boot); a dead process or a zombie is an error.
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); start time is field 22.
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, fmt.Errorf("process %d is dead", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether p still runs as the process that was started.
func (p *proc) alive() bool {
	if p == nil || p.PID <= 0 {
		return false
	}
	st, err := procStartTime(p.PID)
	return err == nil && st == p.StartTime
}

// signal sends SIGKILL to p's process group and to p itself, if p is still the
// process that was started; it does not wait.
func (p *proc) kill() {
	if !p.alive() {
		return
	}
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
}

// killAll SIGKILLs every process at once (no process gets to notice the others
// dying first), then waits up to timeout for all of them to be gone.
func killAll(ps []*proc, timeout time.Duration) error {
	for _, p := range ps {
		p.kill()
	}
	deadline := time.Now().Add(timeout)
	for _, p := range ps {
		for p.alive() {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %s (pid %d) survived SIGKILL", p.Name, p.PID)
			}
			time.Sleep(10 * time.Millisecond)
		}
		p.PID, p.StartTime = 0, 0
	}
	return nil
}

// expandArgs replaces $VAR and ${VAR} in args from env (KEY=VALUE entries).
func expandArgs(args, env []string) []string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = os.Expand(a, func(k string) string {
			if v, ok := m[k]; ok {
				return v
			}
			return os.Getenv(k)
		})
	}
	return out
}
