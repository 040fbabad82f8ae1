package loopdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Device is an attached loop device, held open by this process.
type Device struct {
	// Path is the device node, /dev/loopN.
	Path string
	// Number is N.
	Number int
	f      *os.File
}

// Attach attaches backing (opened read-write) to a free loop device with
// autoclear set, trying direct I/O (no double caching) and falling back to
// buffered I/O when the backing file refuses O_DIRECT.
func Attach(backing string) (*Device, error) {
	bf, err := os.OpenFile(backing, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop device to %s: %w", backing, err)
	}
	defer bf.Close() // the kernel holds its own reference once configured
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop device to %s: %w", backing, err)
	}
	defer ctl.Close()
	for attempt := 0; attempt < 16; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("attach loop device to %s: get free device: %w", backing, err)
		}
		d, err := configure(n, bf, backing)
		if errors.Is(err, unix.EBUSY) {
			continue // another process took it between GET_FREE and CONFIGURE
		}
		return d, err
	}
	return nil, fmt.Errorf("attach loop device to %s: every free device was taken concurrently", backing)
}

func configure(n int, bf *os.File, backing string) (*Device, error) {
	path := "/dev/loop" + strconv.Itoa(n)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop device to %s: %w", backing, err)
	}
	cfg := unix.LoopConfig{Fd: uint32(bf.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], backing)
	err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
	if errors.Is(err, unix.EINVAL) {
		cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
		err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("attach %s to %s: %w", path, backing, err)
	}
	return &Device{Path: path, Number: n, f: f}, nil
}

// Size is the device's size in bytes.
func (d *Device) Size() (int64, error) {
	var size uint64
	if err := ioctlGetUint64(int(d.f.Fd()), unix.BLKGETSIZE64, &size); err != nil {
		return 0, fmt.Errorf("size of %s: %w", d.Path, err)
	}
	return int64(size), nil
}

// Close lets go of the device. With nothing else holding it (no mounted
// filesystem, no other opener), the kernel detaches it.
func (d *Device) Close() error {
	if d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	return err
}

// ErrNotFlushed wraps the error of a flush that failed before a detach that
// succeeded (a backing that refuses writes, as a fenced volume's does).
var ErrNotFlushed = errors.New("loop device detached without its page cache flushed")

// Detach flushes the device's page cache to the backing file, asks the kernel
// to detach the device now (or, while it is in use, as soon as the last user
// lets go) and closes it. The flush comes first because writes other openers
// made through the device and never synced (a Block volume's pod writing with
// dd) are not written by the kernel once the device is detached: they would
// be lost. A failed flush does not stop the detach; when the detach succeeds,
// the flush's error is returned wrapped in ErrNotFlushed.
func (d *Device) Detach() error {
	if d.f == nil {
		return Detach(d.Path)
	}
	flushErr := unix.Fsync(int(d.f.Fd()))
	err := unix.IoctlSetInt(int(d.f.Fd()), unix.LOOP_CLR_FD, 0)
	if err != nil && !errors.Is(err, unix.ENXIO) {
		return errors.Join(fmt.Errorf("detach %s: %w", d.Path, err), d.Close())
	}
	if err := d.Close(); err != nil {
		return err
	}
	if flushErr != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotFlushed, d.Path, flushErr)
	}
	return nil
}

// Detach detaches the loop device at path; a device already detached is fine.
// Unlike Device.Detach it does not flush: it lets go of devices a dead
// process left, whose backing (a FUSE disk of that process) no longer serves.
func Detach(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENXIO) {
			return nil
		}
		return fmt.Errorf("detach %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach %s: %w", path, err)
	}
	return nil
}

// Attached maps every attached loop device (/dev/loopN) to its backing file, as
// /sys/block/loopN/loop/backing_file reports it.
func Attached() (map[string]string, error) {
	paths, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // detached in the meantime
		}
		name := filepath.Base(filepath.Dir(filepath.Dir(p)))
		out["/dev/"+name] = strings.TrimSpace(string(b))
	}
	return out, nil
}

// Under lists the attached loop devices whose backing file lies under dir.
func Under(dir string) ([]string, error) {
	all, err := Attached()
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir) + "/"
	var out []string
	for dev, backing := range all {
		if strings.HasPrefix(backing, dir) {
			out = append(out, dev)
		}
	}
	return out, nil
}

// Usable reports why loop devices cannot be attached here, or nil.
func Usable() error {
	if os.Geteuid() != 0 {
		return errors.New("loop devices need root")
	}
	f, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("loop devices need /dev/loop-control: %w", err)
	}
	return f.Close()
}
