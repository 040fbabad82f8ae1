//go:build !linux

package datapath

import "os"

// fdatasync falls back to fsync where fdatasync is not available.
func fdatasync(f *os.File) error { return f.Sync() }

// pwritev writes the pieces one after another.
func pwritev(f File, iov [][]byte, off int64) error { return writePieces(f, iov, off) }
