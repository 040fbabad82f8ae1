//go:build !linux

package datapath

import "os"

// fdatasync falls back to fsync where fdatasync is not available.
func fdatasync(f *os.File) error { return f.Sync() }

// pwritev writes the pieces one after another.
func pwritev(f File, iov [][]byte, off int64) error { return writePieces(f, iov, off) }

// allocate only sets the size where fallocate is not available.
func allocate(f *os.File, size int64) error { return f.Truncate(size) }
