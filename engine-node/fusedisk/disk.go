package fusedisk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// FileName is the name of the one file in every mounted Disk.
const FileName = "disk"

// FsName is the source shown for a Disk's mount in /proc/self/mountinfo; recovery
// code looks for it to find mounts a killed process left behind.
const FsName = "vigil-disk"

// FsType is the filesystem type of a Disk's mount.
const FsType = "fuse.vigil"

// DefaultMaxWrite is the largest single FUSE read or write request asked for.
const DefaultMaxWrite = 1 << 20

// Sentinel errors.
var (
	// ErrInvalidSize is returned by Mount for a disk size that is not a
	// positive multiple of 512 bytes.
	ErrInvalidSize = errors.New("invalid disk size")
	// ErrInvalidMeta is returned by Adopt for metadata no Disk could have
	// written, or a descriptor that is not /dev/fuse.
	ErrInvalidMeta = errors.New("invalid disk metadata")
)

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
	// MaxWrite bounds one FUSE request; DefaultMaxWrite when zero. Adopt
	// takes it from the Meta instead: the kernel negotiated it once.
	MaxWrite int
	// OnError, when set, is told about every backend failure (op is "read",
	// "write" or "flush") before the kernel gets EIO.
	OnError func(op string, off int64, err error)
	// Log receives the few events worth a line (a refused RESEND, a
	// connection that ended); nil: slog.Default().
	Log *slog.Logger
}

// Meta is what another process needs to serve a connection a Disk
// initialized: the kernel sends INIT once per connection, so what it
// negotiated must travel with the descriptor (see Adopt).
type Meta struct {
	// Dir is the mount point.
	Dir string `json:"dir"`
	// Size of the disk in bytes.
	Size int64 `json:"size"`
	// MaxWrite is the negotiated largest request.
	MaxWrite int `json:"maxWrite"`
	// Minor is the negotiated protocol minor version (major 7).
	Minor uint32 `json:"minor"`
	// Flags are the negotiated capabilities.
	Flags uint64 `json:"flags"`
	// KernelResend tells that the kernel offered FUSE_NOTIFY_RESEND.
	KernelResend bool `json:"kernelResend"`
}

func (m Meta) validate() error {
	switch {
	case !filepath.IsAbs(m.Dir):
		return fmt.Errorf("dir %q: want an absolute path: %w", m.Dir, ErrInvalidMeta)
	case m.Size <= 0 || m.Size%512 != 0:
		return fmt.Errorf("size %d: want a positive multiple of 512: %w", m.Size, ErrInvalidMeta)
	case m.MaxWrite < 4096 || m.MaxWrite > 16<<20:
		return fmt.Errorf("maxWrite %d: want 4096 to %d: %w", m.MaxWrite, 16<<20, ErrInvalidMeta)
	case m.Minor < minMinor:
		return fmt.Errorf("protocol minor %d: want %d or newer: %w", m.Minor, minMinor, ErrInvalidMeta)
	}
	return nil
}

// Disk serves a one-file FUSE filesystem over one /dev/fuse connection.
//
// It answers the kernel's requests itself, not through go-fuse's server
// (whose wire structs it uses): a server that adopts a connection another
// process initialized must never wait for an INIT, which the kernel sends
// only once. Node ids are fixed (root 1, the disk 2) and file handles carry
// nothing, so the next server understands whatever the kernel holds.
type Disk struct {
	meta    Meta
	fd      int
	backend Backend
	o       Options
	log     *slog.Logger
	bufs    sync.Pool

	stopping  atomic.Bool
	readDone  chan struct{}
	inflight  sync.WaitGroup
	closeOnce sync.Once
}

// Mount mounts a Disk of size bytes at dir (which must exist and be empty) and
// serves it until Unmount or Stop. It needs CAP_SYS_ADMIN and /dev/fuse.
func Mount(dir string, size int64, b Backend, o Options) (*Disk, error) {
	if size <= 0 || size%512 != 0 {
		return nil, fmt.Errorf("mount disk at %s: size %d: %w (want a positive multiple of 512)", dir, size, ErrInvalidSize)
	}
	if o.MaxWrite == 0 {
		o.MaxWrite = DefaultMaxWrite
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("mount disk at %s: %w", dir, err)
	}
	// O_CLOEXEC: a child (mkfs, blkid) that inherited the descriptor would
	// keep the connection alive after this process dies, and when that child
	// waits on the disk, nothing would ever end the wait. The descriptor is
	// handed on deliberately (a keeper), never by inheritance.
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("mount disk at %s: open /dev/fuse: %w", dir, err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,max_read=%d", fd, o.MaxWrite)
	if err := unix.Mount(FsName, abs, FsType, unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mount disk at %s: %w", dir, err)
	}
	meta, err := handshake(fd, o.MaxWrite)
	if err != nil {
		unix.Close(fd) // the connection dies with its last descriptor
		_ = unix.Unmount(abs, unix.MNT_DETACH)
		return nil, fmt.Errorf("mount disk at %s: %w", dir, err)
	}
	meta.Dir, meta.Size = abs, size
	d := start(fd, meta, b, o)
	if err := d.refusePoll(); err != nil {
		d.stopping.Store(true)
		return nil, errors.Join(fmt.Errorf("mount disk at %s: %w", dir, err), d.Unmount())
	}
	return d, nil
}

// refusePoll makes the kernel ask this server about poll(2) once and learn
// that it is not supported, which it remembers for the connection. Without
// it, Go's os.OpenFile of the disk file in this process (loopdev.Attach, a
// test) registers the file with the runtime's poller, whose epoll_ctl waits
// for this server's answer outside the scheduler's knowledge: a garbage
// collection stopping the world then waits for it forever.
func (d *Disk) refusePoll() error {
	fd, err := unix.Open(d.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", d.Path(), err)
	}
	defer unix.Close(fd)
	_, err = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	if err != nil {
		return fmt.Errorf("poll %s: %w", d.Path(), err)
	}
	return nil
}

// Adopt serves an initialized connection that another process (a previous
// engine) mounted and served: fd is a descriptor of it (a duplicate the
// caller no longer uses) and meta what that Disk reported. Once serving, it
// asks the kernel to send again every request the previous server read but
// never answered (FUSE_NOTIFY_RESEND, Linux 6.9); on an older kernel that
// cannot, such a request never completes, which is logged.
func Adopt(fd int, meta Meta, b Backend, o Options) (*Disk, error) {
	if err := meta.validate(); err != nil {
		return nil, fmt.Errorf("adopt disk: %w", err)
	}
	if err := checkFuseDevice(fd); err != nil {
		return nil, fmt.Errorf("adopt disk at %s: %w", meta.Dir, err)
	}
	// Blocking reads (the previous server may have made the shared file
	// description non-blocking), and not inherited by children.
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, fmt.Errorf("adopt disk at %s: %w", meta.Dir, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("adopt disk at %s: set close-on-exec: %w", meta.Dir, err)
	}
	o.MaxWrite = meta.MaxWrite
	d := start(fd, meta, b, o)
	if err := notify(fd, notifyResend); err != nil {
		d.log.Warn("the kernel refused FUSE_NOTIFY_RESEND (needs Linux 6.9): a request the previous server read "+
			"but did not answer never completes", "dir", meta.Dir, "err", err)
	}
	return d, nil
}

// checkFuseDevice refuses a descriptor that is not open on /dev/fuse.
func checkFuseDevice(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("descriptor %d: %w: %w", fd, err, ErrInvalidMeta)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 10 || unix.Minor(st.Rdev) != 229 {
		return fmt.Errorf("descriptor %d is not /dev/fuse (character device 10:229): %w", fd, ErrInvalidMeta)
	}
	return nil
}

func start(fd int, meta Meta, b Backend, o Options) *Disk {
	d := &Disk{meta: meta, fd: fd, backend: b, o: o, log: o.Log, readDone: make(chan struct{})}
	if d.log == nil {
		d.log = slog.Default()
	}
	size := bufferSize(meta.MaxWrite)
	d.bufs.New = func() any { b := make([]byte, size); return &b }
	go d.readLoop()
	return d
}

// Path is the disk file's path, for attaching a loop device.
func (d *Disk) Path() string { return filepath.Join(d.meta.Dir, FileName) }

// Dir is the mount point.
func (d *Disk) Dir() string { return d.meta.Dir }

// Meta is what Adopt needs to serve this connection in another process.
func (d *Disk) Meta() Meta { return d.meta }

// Fd is the connection's /dev/fuse descriptor, to hand to a keeper (it is
// close-on-exec; passing it over a unix socket duplicates it).
func (d *Disk) Fd() int { return d.fd }

// Stop stops serving without unmounting: it reads no new request, waits
// until every request read is answered, and closes its descriptor. The
// connection lives on while another process holds a descriptor of it, and a
// successor can Adopt it; otherwise the kernel aborts it.
func (d *Disk) Stop() {
	d.stopping.Store(true)
	<-d.readDone
	d.inflight.Wait()
	d.close()
}

// Unmount unmounts the filesystem and waits for the server to stop. It fails with
// EBUSY while the file is open (a loop device still attached).
func (d *Disk) Unmount() error {
	if err := unix.Unmount(d.meta.Dir, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount disk at %s: %w", d.meta.Dir, err)
	}
	// Unmounting aborts the connection even while a keeper still holds a
	// descriptor, so the reader ends with ENODEV.
	<-d.readDone
	d.inflight.Wait()
	d.close()
	return nil
}

func (d *Disk) close() { d.closeOnce.Do(func() { unix.Close(d.fd) }) }

// pollMillis bounds how long the reader waits before it looks at Stop again.
const pollMillis = 100

// readLoop reads requests one at a time and answers each on its own
// goroutine, so the loop device's requests run in parallel.
func (d *Disk) readLoop() {
	defer close(d.readDone)
	for !d.stopping.Load() {
		pfd := []unix.PollFd{{Fd: int32(d.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, pollMillis)
		if errors.Is(err, unix.EINTR) || (err == nil && n == 0) {
			continue
		}
		if err != nil {
			d.log.Error("FUSE disk: poll failed; serving stops", "dir", d.meta.Dir, "err", err)
			return
		}
		buf := d.bufs.Get().(*[]byte)
		n, err = unix.Read(d.fd, *buf)
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ENOENT):
			d.bufs.Put(buf) // nothing taken (ENOENT: a request interrupted meanwhile)
			continue
		case errors.Is(err, unix.ENODEV): // unmounted or aborted
			d.bufs.Put(buf)
			return
		case err != nil:
			d.bufs.Put(buf)
			d.log.Error("FUSE disk: read failed; serving stops", "dir", d.meta.Dir, "err", err)
			return
		}
		d.inflight.Add(1)
		go func(req []byte) {
			defer d.inflight.Done()
			defer d.bufs.Put(buf)
			d.handle(req)
		}((*buf)[:n])
	}
}

func (d *Disk) fail(op string, off int64, err error) syscall.Errno {
	if d.o.OnError != nil {
		d.o.OnError(op, off, err)
	}
	return syscall.EIO
}

func (d *Disk) replyFailed(opcode uint32, err error) {
	d.log.Warn("FUSE disk: could not answer a request", "dir", d.meta.Dir, "opcode", opcode, "err", err)
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
