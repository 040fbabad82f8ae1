package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// NodeKwok is the name of every node's kwok process (a rack's, in a scale
// sandbox).
const NodeKwok = "kwok"

// ProcessInfo names a process a sandbox node runs and says what it does.
type ProcessInfo struct {
	Name  string
	Usage string
}

// NodeProcesses are the processes the sandbox itself registers on a node, for
// help texts; a test or a user may register more (AddProcess, RunOnNode), and
// Status lists what a given sandbox runs.
var NodeProcesses = []ProcessInfo{
	{NodeKwok, "the node's kubelet as Kubernetes sees it (Node status, lease, pods' phases); " +
		"killed, the node goes NotReady while its engine still serves its volumes"},
	{StackFDKeeper, "vigil-engine-node fd-keeper (--stack): holds the FUSE connections of the node's volumes across engine restarts; " +
		"killed while its engine is down, those volumes' I/O fails"},
	{StackEngine, "vigil-engine-node (--stack): the CSI node service, the FUSE disks behind the node's mounts, " +
		"the heartbeat to the datapath; killed, I/O on the node's volumes stalls until it is back (the fd keeper holds their connections), " +
		"and the datapath stops hearing from the node"},
	{StackKubelet, "the kubelet stand-in (--stack): stages and publishes the volumes of the node's pods " +
		"through the engine's CSI socket and reports them in volumesInUse; on a real node (--kubelet real), the real kubelet: " +
		"killed, the node goes NotReady while its containers run on"},
	{NodeContainerd, "a real node's containerd (--kubelet real): killed, its containers run on (their shims hold them) " +
		"and the kubelet cannot start or stop any"},
	{NodeKubeProxy, "a real node's kube-proxy (--kubelet real): killed, the Service rules it wrote stay in force but follow no change"},
	{StackHeartbeat, "a rack's heartbeats to the datapath for every node of the rack (--stack with --racks)"},
}

// findProc returns the process named name: a registered or one-off process of
// node, or, with node "", a host process of the stack. The error of an unknown
// name lists the known ones.
func (st *state) findProc(node, name string) (*nodeState, *proc, error) {
	var n *nodeState
	ps := st.Host
	where := "the host"
	if node != "" {
		var err error
		if n, err = st.node(node); err != nil {
			return nil, nil, err
		}
		ps, where = append(n.procs(), n.Once...), "node "+node
	}
	var names []string
	for _, p := range ps {
		if p.Name == name {
			return n, p, nil
		}
		names = append(names, p.Name)
	}
	return nil, nil, fmt.Errorf("%w: %q on %s (processes: %s)", ErrUnknownProcess, name, where, strings.Join(names, ", "))
}

// KillProcess sends SIGKILL to one process (its process group) and waits for it
// to be gone: a registered or one-off process of node, or with node "" a host
// process of the stack (StackDatapath, StackController, ...). Unlike Stop, the
// node's other processes keep running, and nothing restarts it until
// StartProcess (or, for a registered process, the node's next boot). Killing a
// process that is not running does nothing.
func (s *Sandbox) KillProcess(node, name string) error {
	return s.withState(func(st *state) error {
		_, p, err := st.findProc(node, name)
		if err != nil {
			return err
		}
		return killAll([]*proc{p}, 5*time.Second)
	})
}

// StartProcess starts a registered process of node (or, with node "", a host
// process of the stack) again after KillProcess, with the node's current
// environment, as a supervisor restarts a crashed container. A process that
// still runs is left alone; a powered-off node's process is refused (it starts
// with the node).
func (s *Sandbox) StartProcess(node, name string) error {
	return s.withState(func(st *state) error {
		n, p, err := st.findProc(node, name)
		if err != nil {
			return err
		}
		if err := restartable(n, p); err != nil {
			return err
		}
		if p.alive() {
			return nil
		}
		return startAgain(st, n, p)
	})
}

// restartable refuses, before anything is done, a process StartProcess and
// RestartProcess cannot start again: a one-off process, or one of a
// powered-off node.
func restartable(n *nodeState, p *proc) error {
	if n == nil {
		return nil
	}
	if slices.Contains(n.Once, p) {
		return fmt.Errorf("%w: %s on %s is a one-off process (RunOnNode): run it again instead", ErrUnknownProcess, p.Name, n.Name)
	}
	if !n.Powered {
		return fmt.Errorf("%w: node %s is powered off; its processes start with it (Start)", ErrNodeOff, n.Name)
	}
	return nil
}

// startAgain starts a registered process that is not running with its spec:
// a host process (n nil) or one of node n with the node's current environment.
func startAgain(st *state, n *nodeState, p *proc) error {
	if n != nil {
		return startProc(n, p, nodeEnv(st, n))
	}
	var err error
	p.PID, p.StartTime, err = startDetached("", p.Args, p.Env, p.Log)
	if err != nil {
		return fmt.Errorf("restart host process %s: %w", p.Name, err)
	}
	return nil
}

// DefaultStopTimeout is how long RestartProcess waits for a process to exit
// after SIGTERM before it SIGKILLs it: Kubernetes' default
// terminationGracePeriodSeconds.
const DefaultStopTimeout = 30 * time.Second

// Restarted is what RestartProcess did.
type Restarted struct {
	// OldPID is the process that was stopped; 0 if it was not running.
	OldPID int
	// Stopped is the time from SIGTERM until it was gone.
	Stopped time.Duration
	// Killed: it outlived the timeout and was SIGKILLed.
	Killed bool
	// NewPID is the process started again.
	NewPID int
}

// RestartProcess stops a registered process of node (node "": a host process
// of the stack) and starts it again with the same spec, as a DaemonSet's
// rolling update replaces its pod: SIGTERM to the process, up to timeout for
// it to exit, SIGKILL to its process group if it has not (and to whatever it
// left in its group if it has), then the same command line with the node's
// environment. A process that is not running is only started. A one-off
// process, a process of a powered-off node, an unknown name or a timeout that
// is not positive are refused before anything is signalled. The sandbox's
// state stays locked meanwhile, so no other change interleaves.
func (s *Sandbox) RestartProcess(node, name string, timeout time.Duration) (Restarted, error) {
	var r Restarted
	if timeout <= 0 {
		return r, fmt.Errorf("%w: stop timeout %s: want more than 0 (default %s)", ErrInvalidConfig, timeout, DefaultStopTimeout)
	}
	err := s.withState(func(st *state) error {
		n, p, err := st.findProc(node, name)
		if err != nil {
			return err
		}
		if err := restartable(n, p); err != nil {
			return err
		}
		if p.alive() {
			r.OldPID = p.PID
			t0 := time.Now()
			if r.Killed, err = terminate(p, timeout); err != nil {
				return err
			}
			r.Stopped = time.Since(t0)
		}
		if err := startAgain(st, n, p); err != nil {
			return err
		}
		r.NewPID = p.PID
		return nil
	})
	return r, err
}

// terminate sends SIGTERM to p alone, as a container runtime signals a
// container's first process, waits up to grace for it to exit, then sends
// SIGQUIT (a Go program dumps its goroutines to its log), then SIGKILLs
// its process group: all of it if p did not exit, what p left in it if it
// did (a container's stop leaves nothing behind). It reports whether p had to
// be killed; a process that is not running is left alone.
func terminate(p *proc, grace time.Duration) (killed bool, err error) {
	if !p.alive() {
		return false, nil
	}
	pid := p.PID
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return false, fmt.Errorf("stop %s (pid %d): %w", p.Name, pid, err)
	}
	deadline := time.Now().Add(grace)
	for p.alive() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	killed = p.alive()
	if killed {
		// A Go program writes every goroutine's stack to its stderr (the
		// process's log) on SIGQUIT and exits: the evidence of where it
		// hung, before the SIGKILL.
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		for end := time.Now().Add(2 * time.Second); p.alive() && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := killAll([]*proc{p}, 5*time.Second); err != nil {
		return killed, err
	}
	if !killed {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	return killed, nil
}

// RunOnNode starts spec once on node, inside its network namespace, with the
// node's environment (see ProcessSpec): a workload process such as a pod's
// writer. It runs until it exits, KillProcess, or the node's power cut (Stop),
// and is never started again at a boot. The name must not be that of another
// running process of the node; the log is the node's directory/NAME.log.
func (s *Sandbox) RunOnNode(node string, spec ProcessSpec) error {
	if spec.Name == "" || len(spec.Args) == 0 || strings.ContainsAny(spec.Name, "/ ") {
		return fmt.Errorf("%w: process spec %+v: want a Name (no '/' or space) and Args", ErrInvalidConfig, spec)
	}
	return s.withState(func(st *state) error {
		n, err := st.node(node)
		if err != nil {
			return err
		}
		if !n.Powered {
			return fmt.Errorf("%w: node %s is powered off", ErrNodeOff, node)
		}
		live := n.Once[:0]
		for _, p := range n.Once {
			if p.alive() {
				live = append(live, p)
			}
		}
		n.Once = live
		for _, p := range append(n.procs(), n.Once...) {
			if p.Name == spec.Name && (p.alive() || !slices.Contains(n.Once, p)) {
				return fmt.Errorf("%w: node %s already has a process named %q", ErrAlreadyUp, node, spec.Name)
			}
		}
		p := &proc{ProcessSpec: spec, Log: filepath.Join(n.dir(st.WorkDir), spec.Name+".log")}
		if err := startProc(n, p, nodeEnv(st, n)); err != nil {
			if p.PID != 0 {
				n.Once = append(n.Once, p)
			}
			return err
		}
		n.Once = append(n.Once, p)
		return nil
	})
}

// ProcessPID is the PID of a running process (node "" for a host process of
// the stack), 0 if it is not running.
func (s *Sandbox) ProcessPID(node, name string) (int, error) {
	st, err := loadState(s.workDir)
	if err != nil {
		return 0, err
	}
	_, p, err := st.findProc(node, name)
	if err != nil {
		return 0, err
	}
	if !p.alive() {
		return 0, nil
	}
	return p.PID, nil
}

// RunOnHost starts spec on the host, outside every node, as the stack's host
// processes run (a manager of a demo, for example): its output goes to
// WorkDir/host/NAME.log (HostLog), Status lists it, KillProcess and
// StartProcess with node "" control it, and Down kills it. A name that
// already runs on the host is refused.
func (s *Sandbox) RunOnHost(spec ProcessSpec) error {
	if spec.Name == "" || len(spec.Args) == 0 || strings.ContainsAny(spec.Name, "/ ") {
		return fmt.Errorf("%w: process spec %+v: want a Name (no '/' or space) and Args", ErrInvalidConfig, spec)
	}
	dir := filepath.Dir(s.HostLog(spec.Name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("host process %s: %w", spec.Name, err)
	}
	return s.withState(func(st *state) error { return startHostIn(st, dir, spec) })
}

// HostLog is the log of the host process name started by RunOnHost.
func (s *Sandbox) HostLog(name string) string { return filepath.Join(s.workDir, "host", name+".log") }

// NodeDir is node's directory (its processes' VIGIL_NODE_DIR): its logs, its
// boot id, and the kubelet stand-in's root (NodeDir/kubelet) under which pods'
// volumes are staged and published.
func (s *Sandbox) NodeDir(node string) string { return filepath.Join(s.workDir, "nodes", node) }
