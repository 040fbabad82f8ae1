package loopdev

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctlGetUint64 runs an ioctl that writes a uint64 (BLKGETSIZE64).
func ioctlGetUint64(fd int, req uint, out *uint64) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(out)))
	if errno != 0 {
		return errno
	}
	return nil
}
