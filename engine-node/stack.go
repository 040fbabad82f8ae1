package enginenode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vigil-storage/vigil/engine-node/fusedisk"
	"github.com/vigil-storage/vigil/engine-node/loopdev"
)

// DefaultFsType is the filesystem made on a volume staged in Filesystem mode.
const DefaultFsType = "ext4"

// stack is the live layers of one staged volume: datapath-bound backend, FUSE
// disk, loop device and (Filesystem mode) the ext4 mount at the staging path.
type stack struct {
	backend *volumeBackend
	disk    *fusedisk.Disk
	loop    *loopdev.Device
}

// diskDir is where the FUSE disk of volumeID is mounted: a hash keeps any volume
// id (slashes, length) a safe single path element.
func diskDir(stateDir, volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return filepath.Join(stateDir, "disks", hex.EncodeToString(sum[:12]))
}

// build brings up every layer for rec; on failure it removes what it made.
func (n *NodeServer) build(ctx context.Context, rec StageRecord) (st *stack, err error) {
	backend := n.newBackend(rec)
	st = &stack{backend: backend}
	defer func() {
		if err != nil {
			backend.discardKept()
			if terr := n.teardownRecord(rec); terr != nil {
				err = errors.Join(err, terr)
			}
		}
	}()
	if err := os.MkdirAll(rec.DiskDir, 0o700); err != nil {
		return nil, fmt.Errorf("stage volume %s: %w", rec.VolumeID, err)
	}
	st.disk, err = fusedisk.Mount(rec.DiskDir, rec.Size, st.backend, fusedisk.Options{OnError: n.logIOError(rec.VolumeID), Log: n.log})
	if err != nil {
		return nil, fmt.Errorf("stage volume %s: %w", rec.VolumeID, err)
	}
	n.deposit(rec, st.disk)
	st.loop, err = loopdev.Attach(st.disk.Path())
	if err != nil {
		return nil, fmt.Errorf("stage volume %s: %w", rec.VolumeID, err)
	}
	if rec.Block {
		return st, nil
	}
	if err := ensureFilesystem(ctx, st.loop.Path, rec.FsType, rec.ReadOnly); err != nil {
		return nil, fmt.Errorf("stage volume %s: %w", rec.VolumeID, err)
	}
	if err := os.MkdirAll(rec.StagingPath, 0o750); err != nil {
		return nil, fmt.Errorf("stage volume %s: %w", rec.VolumeID, err)
	}
	if err := mountFilesystem(st.loop.Path, rec.StagingPath, rec.FsType, stageMountFlags(rec)); err != nil {
		return nil, fmt.Errorf("stage volume %s: %w", rec.VolumeID, err)
	}
	return st, nil
}

func (n *NodeServer) logIOError(volumeID string) func(op string, off int64, err error) {
	return func(op string, off int64, err error) {
		n.log.Warn("volume I/O failed", "volume", volumeID, "op", op, "offset", off, "err", err)
	}
}

// teardownLive removes the layers of a live stack in reverse order.
func (n *NodeServer) teardownLive(rec StageRecord, st *stack) error {
	var errs []error
	if !rec.Block {
		errs = append(errs, unmountAll(rec.StagingPath))
	}
	if st.loop != nil {
		err := st.loop.Detach()
		if errors.Is(err, loopdev.ErrNotFlushed) {
			// The volume's writes are refused (fenced, or its datapath
			// gone): what the page cache held cannot be written, and the
			// teardown must go on.
			n.log.Warn("volume not flushed before its loop device was detached", "volume", rec.VolumeID, "err", err)
			err = nil
		}
		errs = append(errs, err)
	}
	errs = append(errs, n.teardownRecord(rec))
	if st.disk != nil {
		st.disk.Stop() // unmounted: its reader has ended; this closes its descriptor
	}
	return errors.Join(errs...)
}

// teardownRecord removes whatever layers of rec exist, live or left by a killed
// process: the mount at the staging path, loop devices backed by a file in the
// disk directory, the FUSE mount and the directory itself. It is idempotent.
func (n *NodeServer) teardownRecord(rec StageRecord) error {
	if n.live(rec.VolumeID) == nil {
		// Not served by this process: its server is dead or dying.
		if err := abortFuse(rec.DiskDir); err != nil {
			return err
		}
	}
	if !rec.Block && rec.StagingPath != "" {
		if err := unmountAll(rec.StagingPath); err != nil {
			return err
		}
	}
	devs, err := loopdev.Under(rec.DiskDir)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if err := loopdev.Detach(d); err != nil {
			return err
		}
	}
	if err := unmountDisk(rec.DiskDir); err != nil {
		return err
	}
	n.dropKept(rec.VolumeID)
	if err := os.Remove(rec.DiskDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", rec.DiskDir, err)
	}
	return nil
}

// unmountDisk unmounts a FUSE disk; the loop device lets go of the file
// asynchronously after a detach, so EBUSY is retried briefly before a lazy unmount.
func unmountDisk(dir string) error {
	for i := 0; i < 50; i++ {
		_, ok, err := mountAt(dir)
		if err != nil || !ok {
			return err
		}
		err = unix.Unmount(dir, 0)
		if err == nil || errors.Is(err, unix.EINVAL) {
			continue
		}
		if !errors.Is(err, unix.EBUSY) {
			return unmountAll(dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return unmountAll(dir)
}

// stageMountFlags are the flags rec's filesystem is mounted with: the
// capability's, and for a read-only stage "ro" and, for ext4, "noload", so
// that not even the journal is replayed: a reader writes nothing.
func stageMountFlags(rec StageRecord) []string {
	flags := slices.Clone(rec.MountFlags)
	if !rec.ReadOnly {
		return flags
	}
	flags = slices.DeleteFunc(flags, func(f string) bool { return f == "rw" })
	flags = append(flags, "ro")
	if rec.FsType == "ext4" {
		flags = append(flags, "noload")
	}
	return flags
}

// ensureFilesystem makes a filesystem of fsType on dev unless dev already has a
// signature: a volume is formatted once, on its first stage, and never by a
// read-only stage, which finds a blank volume an error.
func ensureFilesystem(ctx context.Context, dev, fsType string, readonly bool) error {
	out, err := exec.CommandContext(ctx, "blkid", "-p", "-o", "value", "-s", "TYPE", dev).Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		found := strings.TrimSpace(string(out))
		if found != fsType {
			return fmt.Errorf("%s holds %q, want %q: %w", dev, found, fsType, ErrWrongFilesystem)
		}
		return nil
	case errors.As(err, &exit) && exit.ExitCode() == 2: // no signature: blank
		if readonly {
			return fmt.Errorf("%s holds no filesystem, and a volume staged read-only is never formatted; "+
				"stage it once with a writer mode first: %w", dev, ErrWrongFilesystem)
		}
	default:
		return fmt.Errorf("probe %s with blkid: %w", dev, err)
	}
	// Lazy init: the datapath reads holes as zeros, so nothing needs zeroing.
	mkfs := exec.CommandContext(ctx, "mkfs."+fsType, "-q", "-F", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", dev)
	if out, err := mkfs.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.%s %s: %w: %s", fsType, dev, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mountFlagBits are the CSI mount flags that are mount(2) flags; the others are
// passed to the filesystem as data.
var mountFlagBits = map[string]uintptr{
	"ro": unix.MS_RDONLY, "rw": 0, "noatime": unix.MS_NOATIME, "nodiratime": unix.MS_NODIRATIME,
	"relatime": unix.MS_RELATIME, "strictatime": unix.MS_STRICTATIME, "nodev": unix.MS_NODEV,
	"nosuid": unix.MS_NOSUID, "noexec": unix.MS_NOEXEC, "sync": unix.MS_SYNCHRONOUS,
	"dirsync": unix.MS_DIRSYNC, "lazytime": unix.MS_LAZYTIME, "defaults": 0,
}

// mountFilesystem mounts dev at target. noinit_itable keeps ext4 from zeroing
// inode tables in the background over the network.
func mountFilesystem(dev, target, fsType string, flags []string) error {
	var bits uintptr
	data := []string{"noinit_itable"}
	for _, f := range flags {
		if b, ok := mountFlagBits[f]; ok {
			bits |= b
		} else {
			data = append(data, f)
		}
	}
	if err := unix.Mount(dev, target, fsType, bits, strings.Join(data, ",")); err != nil {
		return fmt.Errorf("mount %s (%s) on %s with %q: %w", dev, fsType, target, flags, err)
	}
	return nil
}
