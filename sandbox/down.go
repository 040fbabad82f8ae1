package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Down removes everything the sandbox created: every node process, the control
// plane, the forwarders, the veths and namespaces, and the work directory.
func (s *Sandbox) Down() error { return DownWorkDir(s.workDir) }

// DownWorkDir tears down the sandbox whose state is in workDir, from any process.
// It is safe on a half-created sandbox and on one already down (nil then), so a
// test can register it with t.Cleanup before Up.
func DownWorkDir(workDir string) error {
	unlock, err := lockWorkDir(workDir)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := loadState(workDir)
	if errors.Is(err, ErrNotUp) {
		return os.RemoveAll(workDir)
	}
	if err != nil {
		return err
	}
	if err := teardown(st, func(string, ...any) {}); err != nil {
		return err
	}
	return os.RemoveAll(workDir)
}

// teardown kills and deletes everything st records, going on after errors, and
// returns them all. The work directory is left to the caller.
func teardown(st *state, logf func(string, ...any)) error {
	var errs []error
	var ps []*proc
	for _, n := range st.Nodes {
		n.Powered = false
		ps = append(append(ps, n.procs()...), n.Once...)
	}
	if err := killAll(append(ps, st.Host...), 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, n := range st.Nodes {
		if n.real() {
			// containerd's shims and the containers are in no process
			// group of the sandbox's: the node's cgroup holds them.
			if err := killCgroup(n.Cgroup, 10*time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := cleanupMounts(st.WorkDir); err != nil {
		errs = append(errs, err)
	}
	for _, n := range st.Nodes {
		if n.real() {
			if err := removeCgroup(n.Cgroup); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if st.ClusterUp {
		if err := deleteCluster(st); err != nil {
			errs = append(errs, err)
		}
	}
	if err := killAll(st.Forwarders, 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	for _, n := range st.Nodes {
		if err := deleteLink(n); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unmountEmptyNetnsDir(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		logf("sandbox: %s down", st.Name)
	}
	return errors.Join(errs...)
}

// deleteCluster deletes the kwokctl cluster; if kwokctl fails, it kills the
// control-plane processes kwokctl recorded, but only those running a binary from
// the sandbox's BinDir (never an unrelated process that reused a PID).
func deleteCluster(st *state) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kerr := kwokctl(ctx, st, "delete", "cluster", "--name", st.Name, "--kubeconfig", st.Kubeconfig)
	pidDir := filepath.Join(st.WorkDir, "kwok", "clusters", st.Name, "pids")
	files, _ := filepath.Glob(filepath.Join(pidDir, "*.pid"))
	var ps []*proc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || !strings.HasPrefix(exe, filepath.Clean(st.BinDir)+"/") {
			continue
		}
		start, err := procStartTime(pid)
		if err != nil {
			continue
		}
		ps = append(ps, &proc{ProcessSpec: ProcessSpec{Name: filepath.Base(f)}, PID: pid, StartTime: start})
	}
	if err := killAll(ps, 5*time.Second); err != nil {
		return errors.Join(kerr, err)
	}
	// kwokctl's own failure does not matter once every process it started is gone.
	return nil
}

// unmountEmptyNetnsDir undoes the bind mount `ip netns add` puts on /run/netns
// (so that namespaces it pins can be shared) once no namespace is left in it; while
// any other namespace remains, the mount stays for its owner.
func unmountEmptyNetnsDir() error {
	const dir = "/run/netns"
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) > 0 {
		return nil
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == dir {
			if err := syscall.Unmount(dir, 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.EBUSY) {
				return fmt.Errorf("unmount %s: %w", dir, err)
			}
		}
	}
	return nil
}

// cgroupLeftovers lists the cgroups of real nodes of sandbox name
// (vigil-NAME-node-N) still in a hierarchy.
func cgroupLeftovers(name string) []string {
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil
	}
	var out []string
	for _, h := range hs {
		entries, _ := os.ReadDir(h)
		for _, e := range entries {
			if rest, ok := strings.CutPrefix(e.Name(), "vigil-"+name+"-"); ok && e.IsDir() && nodeNetnsRE.MatchString(rest) {
				out = append(out, "cgroup "+filepath.Join(h, e.Name()))
			}
		}
	}
	return out
}

// nodeNetnsRE matches what follows "vigil-NAME-" in a node's namespace name.
var nodeNetnsRE = regexp.MustCompile(`^[a-z]+-[0-9]+$`)

// Leftovers lists what of the sandbox named name with work directory workDir
// is still on the machine: the work directory, mounts under it, network
// namespaces of its nodes (vigil-NAME-...), and processes whose command line
// or working directory names the work directory, and the cgroups of its real
// nodes. Empty after a complete Down.
func Leftovers(name, workDir string) ([]string, error) {
	var out []string
	workDir = filepath.Clean(workDir)
	if _, err := os.Stat(workDir); err == nil {
		out = append(out, "work directory "+workDir)
	}
	mps, err := mountsUnder(workDir)
	if err != nil {
		return nil, err
	}
	for _, m := range mps {
		out = append(out, "mount "+m.path)
	}
	nss, _ := os.ReadDir("/run/netns")
	for _, ns := range nss {
		if rest, ok := strings.CutPrefix(ns.Name(), "vigil-"+name+"-"); ok && nodeNetnsRE.MatchString(rest) {
			out = append(out, "network namespace "+ns.Name())
		}
	}
	out = append(out, cgroupLeftovers(name)...)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		cwd, _ := os.Readlink(filepath.Join("/proc", p.Name(), "cwd"))
		args := "\x00" + string(cmd)
		if strings.Contains(args, "\x00"+workDir+"\x00") || strings.Contains(args, workDir+"/") || cwd == workDir || strings.HasPrefix(cwd, workDir+"/") {
			out = append(out, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
		}
	}
	return out, nil
}
