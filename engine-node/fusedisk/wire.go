package fusedisk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FUSE opcodes and notification codes this server knows (linux/fuse.h). The
// wire structs come from go-fuse; its opcode constants are not exported.
const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opSetattr     = 4
	opOpen        = 14
	opRead        = 15
	opWrite       = 16
	opStatfs      = 17
	opRelease     = 18
	opFsync       = 20
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReaddir     = 28
	opReleasedir  = 29
	opFsyncdir    = 30
	opAccess      = 34
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42

	notifyResend = 7 // FUSE_NOTIFY_RESEND, Linux 6.9
)

// Fixed node ids and the one file handle: a successor that adopts a
// connection understands whatever ids the kernel holds without any state.
const (
	rootID = 1 // FUSE_ROOT_ID
	diskID = 2
)

// Protocol versions: 7.28 brought max_pages (1 MiB requests); the reply
// claims at most ourMinor.
const (
	kernelMajor = 7
	minMinor    = 28
	ourMinor    = 31
)

// cacheSeconds is how long the kernel may cache entries and attributes: the
// tree never changes.
const cacheSeconds = 3600

// wantFlags are the capabilities asked for when the kernel offers them:
// asynchronous reads, large writes, up to max_pages per request, and
// asynchronous direct I/O, which lets the loop device keep several requests
// in flight instead of one at a time.
const wantFlags = fuse.CAP_ASYNC_READ | fuse.CAP_BIG_WRITES | fuse.CAP_MAX_PAGES | fuse.CAP_ASYNC_DIO

var headerSize = int(unsafe.Sizeof(fuse.InHeader{}))

// decode views the start of a request as *T, or reports that it is too short.
func decode[T any](req []byte) (*T, bool) {
	var zero T
	if len(req) < int(unsafe.Sizeof(zero)) {
		return nil, false
	}
	return (*T)(unsafe.Pointer(&req[0])), true
}

// bytesOf is v's memory, for a reply.
func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// reply writes one answer: a header with the errno (0 for success) and, on
// success, the body parts. A request the kernel gave up on (interrupted, the
// connection aborted) answers ENOENT or ENODEV, which is not an error here.
func reply(fd int, unique uint64, errno syscall.Errno, body ...[]byte) error {
	h := fuse.OutHeader{Unique: unique, Status: -int32(errno)}
	n := headerSize16
	if errno == 0 {
		for _, b := range body {
			n += len(b)
		}
	} else {
		body = nil
	}
	h.Length = uint32(n)
	iov := append([][]byte{bytesOf(&h)}, body...)
	_, err := unix.Writev(fd, iov)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

var headerSize16 = int(unsafe.Sizeof(fuse.OutHeader{}))

// notify writes an unsolicited message (unique 0, the code in the error field).
func notify(fd int, code int32) error {
	h := fuse.OutHeader{Length: uint32(headerSize16), Status: code}
	_, err := unix.Write(fd, bytesOf(&h))
	return err
}

// handshake reads the kernel's INIT on a fresh connection and answers it.
func handshake(fd int, maxWrite int) (Meta, error) {
	buf := make([]byte, bufferSize(maxWrite))
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return Meta{}, fmt.Errorf("read FUSE INIT: %w", err)
		}
		in, ok := decode[fuse.InitIn](buf[:n])
		if !ok || in.Opcode != opInit {
			return Meta{}, fmt.Errorf("first FUSE request: want INIT (opcode %d, %d bytes), got %d bytes",
				opInit, unsafe.Sizeof(fuse.InitIn{}), n)
		}
		return answerInit(fd, in, maxWrite)
	}
}

func answerInit(fd int, in *fuse.InitIn, maxWrite int) (Meta, error) {
	if in.Major != kernelMajor || in.Minor < minMinor {
		_ = reply(fd, in.Unique, unix.EPROTO)
		return Meta{}, fmt.Errorf("FUSE protocol %d.%d: want %d.%d or newer", in.Major, in.Minor, kernelMajor, minMinor)
	}
	kernel := uint64(in.Flags) | uint64(in.Flags2)<<32
	out := fuse.InitOut{
		Major: kernelMajor, Minor: min(in.Minor, ourMinor),
		MaxReadAhead: in.MaxReadAhead, Flags: uint32(kernel & wantFlags),
		MaxBackground: 12, CongestionThreshold: 9,
		MaxWrite: uint32(maxWrite), TimeGran: 1, MaxPages: uint16((maxWrite + 4095) / 4096),
	}
	if err := reply(fd, in.Unique, 0, bytesOf(&out)); err != nil {
		return Meta{}, fmt.Errorf("answer FUSE INIT: %w", err)
	}
	return Meta{MaxWrite: maxWrite, Minor: out.Minor, Flags: uint64(out.Flags),
		KernelResend: kernel&fuse.CAP_HAS_RESEND != 0}, nil
}

// bufferSize is the read buffer a connection with maxWrite needs: a WRITE's
// header and payload, and never less than the kernel's FUSE_MIN_READ_BUFFER.
func bufferSize(maxWrite int) int { return max(maxWrite+4096, 8192) }

// handle answers one request; it runs on its own goroutine.
func (d *Disk) handle(req []byte) {
	h, ok := decode[fuse.InHeader](req)
	if !ok {
		return
	}
	var err error
	switch h.Opcode {
	case opForget, opBatchForget, opInterrupt:
		return // no answer: nothing to forget, and block I/O is never abandoned
	case opRead:
		err = d.read(req)
	case opWrite:
		err = d.write(req)
	case opFsync:
		errno := syscall.Errno(0)
		if ferr := d.backend.Flush(context.Background()); ferr != nil {
			errno = d.fail("flush", 0, ferr)
		}
		err = reply(d.fd, h.Unique, errno)
	case opLookup:
		err = d.lookup(h, req[headerSize:])
	case opGetattr:
		err = d.getattr(h)
	case opSetattr:
		err = d.setattr(req)
	case opOpen, opOpendir:
		out := fuse.OpenOut{}
		if h.Opcode == opOpen {
			// No page cache for the file: the loop device and the
			// filesystem above cache already, and a cached write
			// would hide a refused one.
			out.OpenFlags = fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
		}
		err = reply(d.fd, h.Unique, 0, bytesOf(&out))
	case opRelease, opReleasedir, opFlush, opFsyncdir, opAccess, opDestroy:
		err = reply(d.fd, h.Unique, 0)
	case opReaddir:
		err = d.readdir(req)
	case opStatfs:
		out := fuse.StatfsOut{Blocks: uint64(d.meta.Size / 4096), Bsize: 4096, Frsize: 4096, NameLen: 255, Files: 1}
		err = reply(d.fd, h.Unique, 0, bytesOf(&out))
	default: // xattrs, creation, links, locks, ...: not in a one-file filesystem
		err = reply(d.fd, h.Unique, unix.ENOSYS)
	}
	if err != nil {
		d.replyFailed(h.Opcode, err)
	}
}

func (d *Disk) read(req []byte) error {
	in, ok := decode[fuse.ReadIn](req)
	if !ok {
		return reply(d.fd, decodeUnique(req), unix.EINVAL)
	}
	off := int64(in.Offset)
	if off >= d.meta.Size {
		return reply(d.fd, in.Unique, 0)
	}
	n := int(min(int64(in.Size), d.meta.Size-off))
	data, err := d.backend.ReadAt(context.Background(), off, n)
	if err == nil && len(data) != n {
		err = fmt.Errorf("short read: %d of %d bytes", len(data), n)
	}
	if err != nil {
		return reply(d.fd, in.Unique, d.fail("read", off, err))
	}
	return reply(d.fd, in.Unique, 0, data)
}

func (d *Disk) write(req []byte) error {
	in, ok := decode[fuse.WriteIn](req)
	if !ok {
		return reply(d.fd, decodeUnique(req), unix.EINVAL)
	}
	data := req[unsafe.Sizeof(*in):]
	if int(in.Size) > len(data) {
		return reply(d.fd, in.Unique, unix.EINVAL)
	}
	data = data[:in.Size]
	off := int64(in.Offset)
	if off < 0 || off+int64(len(data)) > d.meta.Size {
		return reply(d.fd, in.Unique, unix.ENOSPC)
	}
	if err := d.backend.WriteAt(context.Background(), off, data); err != nil {
		return reply(d.fd, in.Unique, d.fail("write", off, err))
	}
	out := fuse.WriteOut{Size: in.Size}
	return reply(d.fd, in.Unique, 0, bytesOf(&out))
}

func decodeUnique(req []byte) uint64 {
	h, _ := decode[fuse.InHeader](req)
	return h.Unique
}

func (d *Disk) lookup(h *fuse.InHeader, name []byte) error {
	name, _, _ = bytes.Cut(name, []byte{0})
	if h.NodeId != rootID || string(name) != FileName {
		return reply(d.fd, h.Unique, unix.ENOENT)
	}
	out := fuse.EntryOut{NodeId: diskID, Generation: 1, EntryValid: cacheSeconds, AttrValid: cacheSeconds}
	out.Attr = d.attr(diskID)
	return reply(d.fd, h.Unique, 0, bytesOf(&out))
}

func (d *Disk) getattr(h *fuse.InHeader) error {
	if h.NodeId != rootID && h.NodeId != diskID {
		return reply(d.fd, h.Unique, unix.ENOENT)
	}
	out := fuse.AttrOut{AttrValid: cacheSeconds, Attr: d.attr(h.NodeId)}
	return reply(d.fd, h.Unique, 0, bytesOf(&out))
}

// setattr accepts mode, owner and time changes as no-ops and refuses resizing.
func (d *Disk) setattr(req []byte) error {
	in, ok := decode[fuse.SetAttrIn](req)
	if !ok {
		return reply(d.fd, decodeUnique(req), unix.EINVAL)
	}
	if in.Valid&fuse.FATTR_SIZE != 0 && int64(in.Size) != d.meta.Size {
		return reply(d.fd, in.Unique, unix.EPERM)
	}
	return d.getattr(&in.InHeader)
}

func (d *Disk) attr(node uint64) fuse.Attr {
	if node == rootID {
		return fuse.Attr{Ino: rootID, Mode: syscall.S_IFDIR | 0o755, Nlink: 2, Blksize: 4096}
	}
	return fuse.Attr{Ino: diskID, Mode: syscall.S_IFREG | 0o600, Nlink: 1, Size: uint64(d.meta.Size),
		Blocks: uint64(d.meta.Size / 512), Blksize: 4096}
}

// direntHeader is struct fuse_dirent without its name.
type direntHeader struct {
	Ino     uint64
	Off     uint64
	NameLen uint32
	Typ     uint32
}

// readdir lists ".", ".." and the disk; the offset of an entry is its index + 1.
func (d *Disk) readdir(req []byte) error {
	in, ok := decode[fuse.ReadIn](req)
	if !ok {
		return reply(d.fd, decodeUnique(req), unix.EINVAL)
	}
	entries := []struct {
		name string
		ino  uint64
		typ  uint32
	}{{".", rootID, syscall.DT_DIR}, {"..", rootID, syscall.DT_DIR}, {FileName, diskID, syscall.DT_REG}}
	var out []byte
	for i := int(in.Offset); i < len(entries); i++ {
		e := entries[i]
		h := direntHeader{Ino: e.ino, Off: uint64(i + 1), NameLen: uint32(len(e.name)), Typ: e.typ}
		rec := append(append([]byte{}, bytesOf(&h)...), e.name...)
		for len(rec)%8 != 0 {
			rec = append(rec, 0)
		}
		if len(out)+len(rec) > int(in.Size) {
			break
		}
		out = append(out, rec...)
	}
	return reply(d.fd, in.Unique, 0, out)
}
