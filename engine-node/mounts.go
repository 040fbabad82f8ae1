package enginenode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	// Dev is the "major:minor" of the mounted filesystem.
	Dev        string
	MountPoint string
	FsType     string
	Source     string
	Options    string
}

// parseMountInfo parses the mountinfo format (proc(5)). The kernel separates
// fields with single spaces and escapes only space, tab, newline and
// backslash inside a field (\NNN), so a line is split at '\n' and at ' '
// only: any other byte, '\r', '\v' or a non-ASCII space included, belongs to
// its field, and an empty field (a mount without a source) stays a field.
func parseMountInfo(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	sc.Split(scanLinesKeepCR)
	for sc.Scan() {
		m, err := parseMountLine(sc.Text())
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// parseMountLine parses "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS
// [OPTIONAL...] - FSTYPE SOURCE [SUPEROPTIONS]".
func parseMountLine(line string) (Mount, error) {
	fields := strings.Split(line, " ")
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || len(fields) < sep+3 {
		return Mount{}, fmt.Errorf("mountinfo: malformed line %q: want ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE [SUPEROPTIONS]", line)
	}
	m := Mount{
		Dev:        fields[2],
		MountPoint: unescapeOctal(fields[4]),
		Options:    fields[5],
		FsType:     unescapeOctal(fields[sep+1]),
		Source:     unescapeOctal(fields[sep+2]),
	}
	if m.Dev == "" || m.MountPoint == "" || m.Options == "" || m.FsType == "" {
		return Mount{}, fmt.Errorf("mountinfo: malformed line %q: empty device, mount point, options or filesystem type", line)
	}
	return m, nil
}

// scanLinesKeepCR is bufio.ScanLines without dropping a '\r' before '\n'.
func scanLinesKeepCR(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// unescapeOctal undoes mountinfo's \NNN escapes of space, tab, newline, backslash.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mounts reads this process's mount table.
func mounts() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountInfo(f)
}

// mountAt returns the topmost mount at path, if any.
func mountAt(path string) (Mount, bool, error) {
	all, err := mounts()
	if err != nil {
		return Mount{}, false, err
	}
	path = filepath.Clean(path)
	var found Mount
	ok := false
	for _, m := range all {
		if m.MountPoint == path {
			found, ok = m, true // later lines are mounted on top
		}
	}
	return found, ok, nil
}

// unmountAll unmounts everything stacked at path, detaching lazily when busy
// or when the filesystem below is dead. A path that is not mounted is fine.
func unmountAll(path string) error {
	for i := 0; i < 8; i++ {
		_, ok, err := mountAt(path)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		err = unix.Unmount(path, 0)
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.EIO) {
			err = unix.Unmount(path, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 8 unmounts", path)
}

// bindMount bind-mounts source onto target, read-only when asked.
func bindMount(source, target string, readonly bool) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", source, target, err)
	}
	if readonly {
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH)
			return fmt.Errorf("remount %s read-only: %w", target, err)
		}
	}
	return nil
}

// removePath removes a target path left after unmount: a directory or a file,
// never anything with content (a failed unmount must not destroy data).
func removePath(path string) error {
	err := os.Remove(path)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("remove %s: %w", path, err)
}

// fuseControl is where the kernel's fusectl filesystem lists FUSE connections.
const fuseControl = "/sys/fs/fuse/connections"

// abortFuse aborts the FUSE connection mounted at dir, if any: every request
// pending on it fails at once. A FUSE server killed while the kernel waited on
// it (a mount(2) stuck on a read through the loop device) cannot exit until
// then. Only the mount table is consulted: touching the dead mount would hang.
func abortFuse(dir string) error {
	m, ok, err := mountAt(dir)
	if err != nil || !ok || !strings.HasPrefix(m.FsType, "fuse") {
		return err
	}
	var major, minor uint64
	if _, err := fmt.Sscanf(m.Dev, "%d:%d", &major, &minor); err != nil {
		return fmt.Errorf("abort FUSE at %s: device %q: %w", dir, m.Dev, err)
	}
	if _, mounted, _ := mountAt(fuseControl); !mounted {
		if err := unix.Mount("fusectl", fuseControl, "fusectl", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("abort FUSE at %s: mount fusectl: %w", dir, err)
		}
	}
	abort := filepath.Join(fuseControl, strconv.FormatUint(major<<20|minor, 10), "abort")
	if err := os.WriteFile(abort, []byte("1"), 0o200); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("abort FUSE at %s: %w", dir, err)
	}
	return nil
}
