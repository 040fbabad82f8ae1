package datapath

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync makes the file's data durable without forcing its mtime out.
func fdatasync(f *os.File) error {
	c, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	return serr
}

// pwritev writes iov at off, all of it (a short write is continued).
func pwritev(f File, iov [][]byte, off int64) error {
	rf, ok := f.(rawFile)
	if !ok {
		return writePieces(f, iov, off)
	}
	c, err := rf.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	cerr := c.Control(func(fd uintptr) {
		for len(iov) > 0 && len(iov[0]) == 0 {
			iov = iov[1:]
		}
		for len(iov) > 0 {
			chunk := iov[:min(len(iov), 1024)] // IOV_MAX
			n, err := unix.Pwritev(int(fd), chunk, off)
			if err != nil {
				if err == unix.EINTR {
					continue
				}
				werr = err
				return
			}
			if n == 0 {
				werr = io.ErrShortWrite
				return
			}
			off += int64(n)
			for n > 0 && len(iov) > 0 {
				if n >= len(iov[0]) {
					n -= len(iov[0])
					iov = iov[1:]
				} else {
					iov[0] = iov[0][n:]
					n = 0
				}
			}
			for len(iov) > 0 && len(iov[0]) == 0 {
				iov = iov[1:]
			}
		}
	})
	if cerr != nil {
		return cerr
	}
	return werr
}

// allocate reserves the file's first size bytes on disk and makes it that
// long (fallocate, mode 0).
func allocate(f *os.File, size int64) error {
	c, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		for {
			serr = unix.Fallocate(int(fd), 0, 0, size)
			if serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
