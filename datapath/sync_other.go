//go:build !linux

package datapath

import "os"

// fdatasync falls back to fsync where fdatasync is not available.
func fdatasync(f *os.File) error { return f.Sync() }

// pwritev writes the pieces one after another.
func pwritev(f *os.File, iov [][]byte, off int64) error {
	for _, p := range iov {
		if _, err := f.WriteAt(p, off); err != nil {
			return err
		}
		off += int64(len(p))
	}
	return nil
}
