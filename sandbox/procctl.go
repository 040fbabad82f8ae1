package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

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
		if n != nil && slices.Contains(n.Once, p) {
			return fmt.Errorf("%w: %s on %s is a one-off process (RunOnNode): run it again instead", ErrUnknownProcess, name, node)
		}
		if p.alive() {
			return nil
		}
		if n == nil {
			p.PID, p.StartTime, err = startDetached("", p.Args, p.Env, p.Log)
			if err != nil {
				return fmt.Errorf("restart host process %s: %w", name, err)
			}
			return nil
		}
		if !n.Powered {
			return fmt.Errorf("%w: node %s is powered off; its processes start with it (Start)", ErrNodeOff, node)
		}
		return startProc(n, p, nodeEnv(st, n))
	})
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
