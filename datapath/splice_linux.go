package datapath

import (
	"errors"
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// stagePipeSize is the pipe size asked for (Linux's default pipe-max-size):
// bulk writes up to this size go socket → pipe → volume file with splice(2),
// so the server never copies the payload through user space.
const stagePipeSize = 1 << 20

// errStageFull: the pipe ran out of slots before it held the whole payload
// (the socket still has data); the caller reads the rest the ordinary way.
var errStageFull = errors.New("splice pipe full")

// stage is a pipe that holds one request's payload between the socket and the
// volume file.
type stage struct {
	r, w int
	size int
}

func newStage() (*stage, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, err
	}
	st := &stage{r: p[0], w: p[1]}
	_, _ = unix.FcntlInt(uintptr(st.w), unix.F_SETPIPE_SZ, stagePipeSize)
	size, err := unix.FcntlInt(uintptr(st.w), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		st.close()
		return nil, err
	}
	st.size = size
	return st, nil
}

func (st *stage) close() {
	_ = unix.Close(st.r)
	_ = unix.Close(st.w)
}

// fill moves n bytes from the socket into the pipe. It returns how many it
// moved; errStageFull if the pipe cannot take more while the socket has data.
func (st *stage) fill(rc syscall.RawConn, n int) (int, error) {
	got := 0
	var serr error
	err := rc.Read(func(fd uintptr) bool {
		for got < n {
			m, err := unix.Splice(int(fd), nil, st.w, nil, n-got, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				if avail, ierr := unix.IoctlGetInt(int(fd), unix.SIOCINQ); ierr == nil && avail > 0 {
					serr = errStageFull
					return true
				}
				return false // wait until the socket is readable
			case err != nil:
				serr = err
				return true
			case m == 0:
				serr = io.ErrUnexpectedEOF
				return true
			}
			got += int(m)
		}
		return true
	})
	if err != nil {
		return got, err
	}
	return got, serr
}

// drainTo moves n bytes from the pipe into f at off: spliced into a file
// with a descriptor, read out and written to any other File.
func (st *stage) drainTo(f File, off int64, n int) error {
	rf, ok := f.(rawFile)
	if !ok {
		return st.copyTo(f, off, n)
	}
	c, err := rf.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	cerr := c.Control(func(fd uintptr) {
		for n > 0 {
			m, err := unix.Splice(st.r, nil, int(fd), &off, n, unix.SPLICE_F_MOVE)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				werr = io.ErrUnexpectedEOF // the pipe holds less than it should
				return
			case err != nil:
				werr = err
				return
			case m == 0:
				werr = io.ErrShortWrite
				return
			}
			n -= int(m)
		}
	})
	if cerr != nil {
		return cerr
	}
	return werr
}

// copyTo reads n bytes out of the pipe and writes them to f at off.
func (st *stage) copyTo(f File, off int64, n int) error {
	buf := make([]byte, n)
	for got := 0; got < n; {
		m, err := st.readOut(buf[got:])
		if err != nil || m <= 0 {
			return io.ErrUnexpectedEOF // the pipe holds less than it should
		}
		got += m
	}
	_, err := f.WriteAt(buf, off)
	return err
}

// readOut reads up to len(p) bytes out of the pipe (EAGAIN: it is empty).
func (st *stage) readOut(p []byte) (int, error) {
	for {
		n, err := unix.Read(st.r, p)
		if err == unix.EINTR {
			continue
		}
		return n, err
	}
}

// discard empties the pipe (after a refused or failed write).
func (st *stage) discard() {
	var buf [64 << 10]byte
	for {
		n, err := st.readOut(buf[:])
		if err != nil || n <= 0 {
			return
		}
	}
}
