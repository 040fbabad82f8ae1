package datapath

import (
	"io"
	"os"
	"syscall"
)

// File is the few operations the store makes on a volume's data file. In
// production it is the operating system's file (OpenOSFile); tests put a
// fault-injecting layer in its place (Options.OpenFile, datapathtest.Faults)
// to prove what the store does when the disk fails under it.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Datasync makes the data written so far durable (fdatasync). After it
	// fails once, the kernel may have dropped the unwritten pages, and a later
	// Datasync that succeeds proves nothing about them.
	Datasync() error
	// Sync is fsync: the data and the file's metadata.
	Sync() error
	Truncate(size int64) error
	Close() error
}

// OpenFileFunc opens a volume's data file, with os.OpenFile's arguments.
type OpenFileFunc func(name string, flag int, perm os.FileMode) (File, error)

// OpenOSFile is the default OpenFileFunc: the operating system's file.
func OpenOSFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// osFile is a File on a descriptor; the fast write paths (pwritev, splice)
// reach the descriptor through SyscallConn.
type osFile struct{ *os.File }

func (f osFile) Datasync() error { return fdatasync(f.File) }

// Allocate reserves the file's first size bytes on disk (fallocate), so that
// writing them never needs a free block.
func (f osFile) Allocate(size int64) error { return allocate(f.File, size) }

// rawFile is a File with a descriptor of its own: pwritev and splice write
// into it directly. A File without one (a test layer) gets plain WriteAt calls.
type rawFile interface {
	SyscallConn() (syscall.RawConn, error)
}

// writePieces writes iov at off with one WriteAt per piece.
func writePieces(f File, iov [][]byte, off int64) error {
	for _, p := range iov {
		if _, err := f.WriteAt(p, off); err != nil {
			return err
		}
		off += int64(len(p))
	}
	return nil
}
