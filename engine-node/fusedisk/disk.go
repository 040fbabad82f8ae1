package fusedisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FileName is the name of the one file in every mounted Disk.
const FileName = "disk"

// FsName is the source shown for a Disk's mount in /proc/self/mountinfo; recovery
// code looks for it to find mounts a killed process left behind.
const FsName = "vigil-disk"

// DefaultMaxWrite is the largest single FUSE read or write request asked for.
const DefaultMaxWrite = 1 << 20

// ErrInvalidSize is returned by Mount for a disk size that is not a positive
// multiple of 512 bytes.
var ErrInvalidSize = errors.New("invalid disk size")

// Backend stores the disk's bytes. ReadAt returns exactly n bytes (zeros where
// nothing was written); WriteAt stores p at off; Flush makes prior writes durable.
// It is called concurrently.
type Backend interface {
	ReadAt(ctx context.Context, off int64, n int) ([]byte, error)
	WriteAt(ctx context.Context, off int64, p []byte) error
	Flush(ctx context.Context) error
}

// Options tunes a Disk. The zero value is usable.
type Options struct {
	// MaxWrite bounds one FUSE request; DefaultMaxWrite when zero.
	MaxWrite int
	// OnError, when set, is told about every backend failure (op is "read",
	// "write" or "flush") before the kernel gets EIO.
	OnError func(op string, off int64, err error)
	// Debug logs every FUSE request.
	Debug bool
}

// Disk is a mounted one-file FUSE filesystem.
type Disk struct {
	dir    string
	server *fuse.Server
}

// Mount mounts a Disk of size bytes at dir (which must exist and be empty) and
// serves it until Unmount. It needs CAP_SYS_ADMIN and /dev/fuse.
func Mount(dir string, size int64, b Backend, o Options) (*Disk, error) {
	if size <= 0 || size%512 != 0 {
		return nil, fmt.Errorf("mount disk at %s: size %d: %w (want a positive multiple of 512)", dir, size, ErrInvalidSize)
	}
	if o.MaxWrite == 0 {
		o.MaxWrite = DefaultMaxWrite
	}
	file := &diskFile{size: size, backend: b, onError: o.OnError}
	root := &fs.Inode{}
	timeout := time.Hour // the tree never changes: cache entries and attributes
	// go-fuse opens /dev/fuse without O_CLOEXEC. A child (mkfs, blkid) that
	// inherited it would keep the connection alive after this process dies,
	// and when that child waits on the disk, nothing ever ends the wait. No
	// fork may happen between the open and setting FD_CLOEXEC.
	syscall.ForkLock.Lock()
	defer syscall.ForkLock.Unlock()
	server, err := fs.Mount(dir, root, &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:            FsName,
			Name:              "vigil",
			DirectMountStrict: true,
			MaxWrite:          o.MaxWrite,
			Debug:             o.Debug,
			DisableXAttrs:     true,
			// Asynchronous direct I/O lets the loop device keep several
			// requests in flight instead of one at a time.
			ExtraCapabilities: fuse.CAP_ASYNC_DIO,
		},
		OnAdd: func(ctx context.Context) {
			ch := root.NewPersistentInode(ctx, file, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2})
			root.AddChild(FileName, ch, false)
		},
	})
	cerr := closeOnExec("/dev/fuse")
	if err != nil {
		return nil, fmt.Errorf("mount disk at %s: %w", dir, err)
	}
	d := &Disk{dir: dir, server: server}
	if cerr != nil {
		return nil, errors.Join(fmt.Errorf("mount disk at %s: %w", dir, cerr), d.Unmount())
	}
	return d, nil
}

// Path is the disk file's path, for attaching a loop device.
func (d *Disk) Path() string { return filepath.Join(d.dir, FileName) }

// Dir is the mount point.
func (d *Disk) Dir() string { return d.dir }

// Unmount unmounts the filesystem and waits for the server to stop. It fails with
// EBUSY while the file is open (a loop device still attached).
func (d *Disk) Unmount() error {
	if err := d.server.Unmount(); err != nil {
		return fmt.Errorf("unmount disk at %s: %w", d.dir, err)
	}
	d.server.Wait()
	return nil
}

// diskFile is the one regular file.
type diskFile struct {
	fs.Inode
	size    int64
	backend Backend
	onError func(op string, off int64, err error)
}

var (
	_ fs.NodeOpener    = (*diskFile)(nil)
	_ fs.NodeReader    = (*diskFile)(nil)
	_ fs.NodeWriter    = (*diskFile)(nil)
	_ fs.NodeFsyncer   = (*diskFile)(nil)
	_ fs.NodeGetattrer = (*diskFile)(nil)
	_ fs.NodeSetattrer = (*diskFile)(nil)
)

// Open bypasses the kernel's page cache for the file: the loop device and the
// filesystem on it cache already, and a cached write would hide a refused one.
func (f *diskFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES, fs.OK
}

func (f *diskFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o600
	out.Size = uint64(f.size)
	out.Blocks = uint64(f.size / 512)
	out.Blksize = 4096
	out.Nlink = 1
	return fs.OK
}

// Setattr accepts mode, owner and time changes as no-ops and refuses resizing.
func (f *diskFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && int64(sz) != f.size {
		return syscall.EPERM
	}
	return f.Getattr(ctx, fh, out)
}

func (f *diskFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= f.size {
		return fuse.ReadResultData(nil), fs.OK
	}
	n := int(min(int64(len(dest)), f.size-off))
	data, err := f.backend.ReadAt(ctx, off, n)
	if err != nil {
		return nil, f.fail("read", off, err)
	}
	if len(data) != n {
		return nil, f.fail("read", off, fmt.Errorf("short read: %d of %d bytes", len(data), n))
	}
	return fuse.ReadResultData(data), fs.OK
}

func (f *diskFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if off < 0 || off+int64(len(data)) > f.size {
		return 0, syscall.ENOSPC
	}
	if err := f.backend.WriteAt(ctx, off, data); err != nil {
		return 0, f.fail("write", off, err)
	}
	return uint32(len(data)), fs.OK
}

func (f *diskFile) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	if err := f.backend.Flush(ctx); err != nil {
		return f.fail("flush", 0, err)
	}
	return fs.OK
}

func (f *diskFile) fail(op string, off int64, err error) syscall.Errno {
	if f.onError != nil {
		f.onError(op, off, err)
	}
	return syscall.EIO
}

// Usable reports why FUSE disks cannot be mounted here, or nil when they can:
// tests call it to skip with a clear reason.
func Usable() error {
	if os.Geteuid() != 0 {
		return errors.New("fusedisk needs root (CAP_SYS_ADMIN) to mount FUSE")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("fusedisk needs /dev/fuse: %w", err)
	}
	return f.Close()
}

// closeOnExec sets FD_CLOEXEC on every descriptor of this process open on dev.
func closeOnExec(dev string) error {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || target != dev {
			continue
		}
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return fmt.Errorf("set close-on-exec on %s (fd %d): %w", dev, fd, err)
		}
	}
	return nil
}
