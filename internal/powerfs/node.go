package powerfs

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// layer is the mounted file system's memory: what each file has pending.
type layer struct {
	mu    sync.Mutex
	files map[fileKey]*fileState
}

// fileKey names a file for as long as it exists: go-fuse's inode number (the
// backing inode with its device mixed in) and generation (its birth time).
type fileKey struct{ ino, gen uint64 }

// fileState guards one file's pending changes; p is nil when the backing file
// is the whole truth.
type fileState struct {
	mu sync.Mutex
	p  *pending
}

func (l *layer) state(k fileKey) *fileState {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.files[k]
	if s == nil {
		s = &fileState{}
		l.files[k] = s
	}
	return s
}

// forget drops what a file had pending, for a file whose last name is gone.
func (l *layer) forget(k fileKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.files, k)
}

// node is a loopback node whose regular files keep their unsynced changes in
// the layer's memory. Directories and every namespace operation pass through.
type node struct {
	*fs.LoopbackNode
	l *layer
}

// handle is an open file: the backing descriptor, opened for reading and
// writing whatever the caller asked (the kernel enforces the caller's mode),
// so an fsync can always apply the pending writes. It deliberately has no
// PassthroughFd: the kernel must send every read and write here.
type handle struct {
	lf    *fs.LoopbackFile
	fd    int
	dsync bool // opened O_DSYNC or O_SYNC: every write is synced before it returns
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeReader         = (*node)(nil)
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeWritever       = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeLseeker        = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)

	_ fs.FileReleaser = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileGetlker  = (*handle)(nil)
	_ fs.FileSetlker  = (*handle)(nil)
	_ fs.FileSetlkwer = (*handle)(nil)
)

// WrapChild makes every node of the tree a layer node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if lb, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: lb, l: n.l}
	}
	return ops
}

func (n *node) key() fileKey {
	a := n.StableAttr()
	return fileKey{ino: a.Ino, gen: a.Gen}
}

// openFlags is what the backing file is opened with: read-write, without
// O_TRUNC (a truncate is pending like a write), O_APPEND (the kernel sends
// offsets) or O_DIRECT (the layer's reads are not aligned).
func openFlags(flags uint32) uint32 {
	flags &^= syscall.O_ACCMODE | syscall.O_TRUNC | syscall.O_APPEND | syscall.O_DIRECT | fuse.FMODE_EXEC
	return flags | syscall.O_RDWR
}

func newHandle(fh fs.FileHandle, flags uint32) (*handle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, ok := lf.PassthroughFd()
	if !ok {
		return nil, syscall.EIO
	}
	return &handle{lf: lf, fd: fd, dsync: flags&unix.O_DSYNC != 0}, fs.OK
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, _, errno := n.LoopbackNode.Open(ctx, openFlags(flags))
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := newHandle(fh, flags)
	if errno != 0 {
		_ = fh.(fs.FileReleaser).Release(ctx)
		return nil, 0, errno
	}
	if flags&syscall.O_TRUNC != 0 {
		if errno := n.truncate(h, 0); errno != 0 {
			_ = h.Release(ctx)
			return nil, 0, errno
		}
	}
	return h, 0, fs.OK
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, fh, _, errno := n.LoopbackNode.Create(ctx, name, openFlags(flags), mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := newHandle(fh, flags)
	if errno != 0 {
		_ = fh.(fs.FileReleaser).Release(ctx)
		return nil, nil, 0, errno
	}
	if flags&syscall.O_TRUNC != 0 {
		cn, ok := ch.Operations().(*node)
		if !ok {
			_ = h.Release(ctx)
			return nil, nil, 0, syscall.EIO
		}
		if errno := cn.truncate(h, 0); errno != 0 {
			_ = h.Release(ctx)
			return nil, nil, 0, errno
		}
		out.Size = 0
	}
	return ch, h, 0, fs.OK
}

// backingSize is the size of the backing file behind h.
func backingSize(fd int) (int64, syscall.Errno) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fs.ToErrno(err)
	}
	return st.Size, fs.OK
}

// pendingLocked returns the file's pending record, started from the backing
// file when there is none. s.mu is held.
func pendingLocked(s *fileState, fd int) (*pending, syscall.Errno) {
	if s.p != nil {
		return s.p, fs.OK
	}
	size, errno := backingSize(fd)
	if errno != 0 {
		return nil, errno
	}
	s.p = newPending(size)
	return s.p, fs.OK
}

func handleOf(f fs.FileHandle) (*handle, syscall.Errno) {
	h, ok := f.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	return h, fs.OK
}

func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, errno := handleOf(f)
	if errno != 0 {
		return nil, errno
	}
	s := n.l.state(n.key())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		m, err := unix.Pread(h.fd, dest, off)
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		return fuse.ReadResultData(dest[:m]), fs.OK
	}
	m, err := s.p.readAt(fdReader(h.fd), dest, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:m]), fs.OK
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h, errno := handleOf(f)
	if errno != 0 {
		return 0, errno
	}
	s := n.l.state(n.key())
	s.mu.Lock()
	defer s.mu.Unlock()
	p, errno := pendingLocked(s, h.fd)
	if errno != 0 {
		return 0, errno
	}
	if err := p.writeAt(fdReader(h.fd), data, off); err != nil {
		return 0, fs.ToErrno(err)
	}
	if h.dsync {
		if errno := syncLocked(s, h.fd, true); errno != 0 {
			return 0, errno
		}
	}
	return uint32(len(data)), fs.OK
}

func (n *node) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	var all []byte
	for _, d := range data {
		all = append(all, d...)
	}
	return n.Write(ctx, f, all, off)
}

// Fsync applies what the file has pending to the backing file and syncs it:
// from here on a power cut keeps it.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	h, errno := handleOf(f)
	if errno != 0 {
		return errno
	}
	s := n.l.state(n.key())
	s.mu.Lock()
	defer s.mu.Unlock()
	return syncLocked(s, h.fd, flags&fsyncFdatasync != 0)
}

func syncLocked(s *fileState, fd int, datasync bool) syscall.Errno {
	if s.p != nil {
		size, errno := backingSize(fd)
		if errno != 0 {
			return errno
		}
		if err := s.p.apply(fd, size); err != nil {
			return syscall.EIO
		}
		s.p = nil
	}
	var err error
	if datasync {
		err = unix.Fdatasync(fd)
	} else {
		err = unix.Fsync(fd)
	}
	return fs.ToErrno(err)
}

func (n *node) truncate(h *handle, size int64) syscall.Errno {
	s := n.l.state(n.key())
	s.mu.Lock()
	defer s.mu.Unlock()
	p, errno := pendingLocked(s, h.fd)
	if errno != 0 {
		return errno
	}
	p.truncate(size)
	return fs.OK
}

// Getattr is the backing file's attributes with the size the file shows.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*handle); ok {
		var st syscall.Stat_t
		if err := syscall.Fstat(h.fd, &st); err != nil {
			return fs.ToErrno(err)
		}
		out.FromStat(&st)
	} else if errno := n.LoopbackNode.Getattr(ctx, nil, out); errno != 0 {
		return errno
	}
	n.showSize(&out.Attr)
	return fs.OK
}

func (n *node) showSize(a *fuse.Attr) {
	if !n.IsDir() {
		s := n.l.state(n.key())
		s.mu.Lock()
		if s.p != nil {
			a.Size = uint64(s.p.size)
			a.Blocks = max(a.Blocks, (a.Size+511)/512)
		}
		s.mu.Unlock()
	}
}

// Setattr keeps a size change pending; mode, owner and times pass through.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		h, isHandle := f.(*handle)
		if !isHandle {
			var errno syscall.Errno
			if h, errno = n.openForSize(ctx); errno != 0 {
				return errno
			}
			defer h.Release(ctx)
		}
		if errno := n.truncate(h, int64(sz)); errno != 0 {
			return errno
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	var lf fs.FileHandle
	if h, ok := f.(*handle); ok {
		lf = h.lf
	}
	if errno := n.LoopbackNode.Setattr(ctx, lf, in, out); errno != 0 {
		return errno
	}
	n.showSize(&out.Attr)
	return fs.OK
}

// openForSize opens the backing file for a truncate(2) by path.
func (n *node) openForSize(ctx context.Context) (*handle, syscall.Errno) {
	fh, _, errno := n.LoopbackNode.Open(ctx, syscall.O_RDWR)
	if errno != 0 {
		return nil, errno
	}
	return newHandle(fh, 0)
}

// Allocate reserves the blocks on the backing file at once (the space is
// really there or the call fails) and keeps the size change pending.
// Punching holes and zeroing ranges are not supported.
func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	h, errno := handleOf(f)
	if errno != 0 {
		return errno
	}
	if mode&^unix.FALLOC_FL_KEEP_SIZE != 0 {
		return syscall.EOPNOTSUPP
	}
	s := n.l.state(n.key())
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := unix.Fallocate(h.fd, unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(size)); err != nil {
		return fs.ToErrno(err)
	}
	if mode&unix.FALLOC_FL_KEEP_SIZE != 0 {
		return fs.OK
	}
	p, errno := pendingLocked(s, h.fd)
	if errno != 0 {
		return errno
	}
	p.extend(int64(off + size))
	return fs.OK
}

// Lseek answers SEEK_DATA and SEEK_HOLE as if the file had no holes.
func (n *node) Lseek(ctx context.Context, f fs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	var a fuse.AttrOut
	if errno := n.Getattr(ctx, f, &a); errno != 0 {
		return 0, errno
	}
	if off >= a.Size {
		return 0, syscall.ENXIO
	}
	switch whence {
	case unix.SEEK_DATA:
		return off, fs.OK
	case unix.SEEK_HOLE:
		return a.Size, fs.OK
	}
	return 0, syscall.EINVAL
}

// Statx is left to the kernel's fallback to Getattr, which shows the size.
func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return syscall.ENOSYS
}

// CopyFileRange would copy backing files behind the layer; the kernel falls
// back to reads and writes.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

// Tmpfile (O_TMPFILE) is not supported.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// Unlink removes the name at once; a file that lost its last name loses what
// it had pending.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	gone := n.lastLink(name)
	if errno := n.LoopbackNode.Unlink(ctx, name); errno != 0 {
		return errno
	}
	n.forgetChild(name, gone)
	return fs.OK
}

// Rename moves the name at once; a file replaced by it loses what it had
// pending.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	gone := flags&unix.RENAME_EXCHANGE == 0 && np.lastLink(newName)
	if errno := n.LoopbackNode.Rename(ctx, name, np.LoopbackNode, newName, flags); errno != 0 {
		return errno
	}
	np.forgetChild(newName, gone)
	return fs.OK
}

// lastLink reports whether name is a regular file with one link.
func (n *node) lastLink(name string) bool {
	ch := n.GetChild(name)
	if ch == nil {
		return false
	}
	var st unix.Stat_t
	cn, ok := ch.Operations().(*node)
	if !ok || unix.Lstat(cn.backingPath(), &st) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1
}

func (n *node) forgetChild(name string, gone bool) {
	if !gone {
		return
	}
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok {
			n.l.forget(cn.key())
		}
	}
}

func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(n.Root()))
}

func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
func (h *handle) Flush(ctx context.Context) syscall.Errno   { return h.lf.Flush(ctx) }
func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.lf.Getlk(ctx, owner, lk, flags, out)
}
func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlk(ctx, owner, lk, flags)
}
func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlkw(ctx, owner, lk, flags)
}

// fdReader reads a descriptor with pread.
type fdReader int

func (r fdReader) ReadAt(p []byte, off int64) (int, error) {
	got := 0
	for got < len(p) {
		m, err := unix.Pread(int(r), p[got:], off+int64(got))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return got, err
		}
		if m == 0 {
			break
		}
		got += m
	}
	return got, nil
}

// fsyncFdatasync is FUSE_FSYNC_FDATASYNC: the fsync request is an fdatasync.
const fsyncFdatasync = 1
