package datapath

import (
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
