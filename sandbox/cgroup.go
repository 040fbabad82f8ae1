package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A real node's processes all run in one cgroup of the node's own, the same
// relative path in every hierarchy mounted under cgroupRoot (cgroup v1, and
// the cgroup2 one of a hybrid machine): the sandbox starts containerd, the
// kubelet, kube-proxy and every registered process inside it, and what they
// start stays there. containerd's shims are started by containerd; the
// kubelet, its pods' cgroups off (cgroupsPerQOS: false), gives containerd no
// cgroup parent, and runc then makes each container's cgroup relative to its
// own, the shim's, which is the node's. So the node's cgroup tree holds every
// process of the node, the daemonized shims and the containers included,
// whichever session or process group they are in: a power cut kills the tree.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 and v2) under
// cgroupRoot.
func cgroupHierarchies() ([]string, error) {
	all, err := readMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range all {
		if (m.fstype == "cgroup" || m.fstype == "cgroup2") && strings.HasPrefix(m.path, cgroupRoot+"/") {
			out = append(out, m.path)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no cgroup hierarchy mounted under %s", ErrToolMissing, cgroupRoot)
	}
	return out, nil
}

// createCgroup creates cgroup rel in every hierarchy. A new cpuset cgroup of
// cgroup v1 has no CPUs and no memory nodes, which refuses every task: it
// gets its parent's.
func createCgroup(rel string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil || strings.TrimSpace(string(cur)) != "" {
				continue // not a v1 cpuset hierarchy, or set already
			}
			parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
			if err != nil {
				return fmt.Errorf("create cgroup %s: %w", dir, err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
				return fmt.Errorf("create cgroup %s: %s: %w", dir, f, err)
			}
		}
	}
	return nil
}

// inCgroup wraps args so that the process joins cgroup rel in every
// hierarchy before it runs (the shell moves itself, then execs args: the
// process keeps its PID and nothing it starts can escape the cgroup).
func inCgroup(rel string, args []string) []string {
	script := `for h in "$0"/*/; do if [ -f "$h$1/cgroup.procs" ]; then echo $$ > "$h$1/cgroup.procs" || exit 1; fi; done; shift; exec "$@"`
	return append([]string{"sh", "-c", script, cgroupRoot, rel}, args...)
}

// cgroupPIDs lists every process in cgroup rel and its descendants, in any
// hierarchy.
func cgroupPIDs(rel string) ([]int, error) {
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, h := range hs {
		err := filepath.WalkDir(filepath.Join(h, rel), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil // removed meanwhile
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	return out, nil
}

// killCgroup SIGKILLs every process of cgroup rel's tree, then again what
// was forked meanwhile, until the tree is empty or timeout passes.
func killCgroup(rel string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := cgroupPIDs(rel)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s: processes %v survived SIGKILL", rel, pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// removeCgroup removes cgroup rel and its descendants from every hierarchy,
// deepest first; they must hold no process. What is gone already is fine.
func removeCgroup(rel string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, rel), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupExists reports whether cgroup rel is in any hierarchy.
func cgroupExists(rel string) bool {
	hs, err := cgroupHierarchies()
	if err != nil {
		return false
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, rel)); err == nil {
			return true
		}
	}
	return false
}
