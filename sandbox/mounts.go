package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// mountPoint is one line of /proc/self/mountinfo that matters here.
type mountPoint struct {
	path   string
	fstype string
	dev    string // major:minor; for FUSE, 0:N names connection N
}

// mountsUnder lists the mount points strictly under dir, deepest first.
func mountsUnder(dir string) ([]mountPoint, error) {
	all, err := readMounts()
	if err != nil {
		return nil, err
	}
	prefix := filepath.Clean(dir) + "/"
	var out []mountPoint
	for _, m := range all {
		if strings.HasPrefix(m.path, prefix) {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i].path, "/") > strings.Count(out[j].path, "/")
	})
	return out, nil
}

// readMounts lists every mount point of /proc/self/mountinfo, in its order.
func readMounts() ([]mountPoint, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var out []mountPoint
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		out = append(out, mountPoint{path: unescapeMountPath(f[4]), fstype: g[0], dev: f[2]})
	}
	return out, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isFUSE(fstype string) bool { return fstype == "fuse" || strings.HasPrefix(fstype, "fuse.") }

// loopsBackedUnder lists the loop devices whose backing file is under dir.
func loopsBackedUnder(dir string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	prefix := filepath.Clean(dir) + "/"
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !strings.HasPrefix(strings.TrimSpace(string(b)), prefix) {
			continue
		}
		out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
	}
	return out
}

// cleanupMounts takes down what the node processes of a sandbox (a CSI node
// service killed by a power cut or by Down) left mounted under workDir: it
// aborts the FUSE connections of the FUSE mounts there (their servers are dead;
// an ext4 over a loop over a FUSE file whose connection is not aborted blocks
// its unmount forever, waiting for a journal commit no server will answer),
// then unmounts the filesystems (deepest first), detaches the loop devices whose
// backing file is under workDir, and unmounts the FUSE mounts behind them. Nodes
// share the host's mount namespace, so nothing else would ever unmount them.
func cleanupMounts(workDir string) error {
	var errs []error
	for round := 0; round < 5; round++ {
		mps, err := mountsUnder(workDir)
		if err != nil {
			return err
		}
		loops := loopsBackedUnder(workDir)
		if len(mps) == 0 && len(loops) == 0 {
			return nil
		}
		errs = errs[:0]
		abortFUSE(mps)
		for _, m := range mps {
			if !isFUSE(m.fstype) {
				errs = append(errs, unmount(m.path))
			}
		}
		for _, l := range loops {
			if out, err := exec.Command("losetup", "-d", l).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("losetup -d %s: %v: %s", l, err, strings.TrimSpace(string(out))))
			}
		}
		for _, m := range mps {
			if isFUSE(m.fstype) {
				errs = append(errs, unmount(m.path))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mounts left under %s: %w", workDir, err)
	}
	return nil
}

// abortFUSEUnder aborts the kernel connections of the FUSE mounts under dir
// (abortFUSE). An engine killed while one of its own threads was unmounting the
// filesystem on its FUSE disk never finishes dying (the unmount waits for I/O
// only the dying process would serve) and holds what it inherited, and its
// mounts, for good; the aborted connection fails that I/O and it exits.
func abortFUSEUnder(dir string) {
	if mps, err := mountsUnder(dir); err == nil {
		abortFUSE(mps)
	}
}

// unmount unmounts path, lazily if it is busy; a path no longer mounted is fine.
func unmount(path string) error {
	err := syscall.Unmount(path, 0)
	if err == nil || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err := syscall.Unmount(path, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}

// abortFUSE aborts the connection of every FUSE mount of mps, so that I/O still
// waiting on a dead server fails instead of hanging; already aborted or gone
// connections are fine.
func abortFUSE(mps []mountPoint) {
	if slices.ContainsFunc(mps, func(m mountPoint) bool { return isFUSE(m.fstype) }) {
		ensureFusectl()
	}
	for _, m := range mps {
		major, minor, ok := strings.Cut(m.dev, ":")
		if !isFUSE(m.fstype) || !ok || major != "0" {
			continue
		}
		_ = os.WriteFile(filepath.Join(fuseConnections, minor, "abort"), []byte("1"), 0o200)
	}
}

// fuseConnections is where the kernel lists FUSE connections (fusectl).
const fuseConnections = "/sys/fs/fuse/connections"

// ensureFusectl mounts the fusectl filesystem on fuseConnections unless it is
// there: a fresh machine has the directory but not the mount (systemd mounts it
// at boot; a container or a minimal VM may not), and without it an abort
// writes to nothing and a stuck reader stays stuck. A failure is left to the
// abort, which then has no effect (as before).
func ensureFusectl() {
	all, err := readMounts()
	if err != nil || slices.ContainsFunc(all, func(m mountPoint) bool { return m.path == fuseConnections }) {
		return
	}
	_ = syscall.Mount("fusectl", fuseConnections, "fusectl", 0, "")
}
