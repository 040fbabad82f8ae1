package ledger

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrMountNamespace: the writer could not get a mount namespace of its own.
var ErrMountNamespace = errors.New("own mount namespace")

// ownMountNSEnv marks the writer's second image, executed in the mount
// namespace the first one made; its value is the volume directory bound.
const ownMountNSEnv = "VIGIL_WRITER_OWN_MOUNT_NS"

// EnterOwnMountNamespace gives the writer the view of its volume a container
// has: a mount namespace of its own, every mount in it private (no mount or
// unmount on the host reaches it, none of its own leaves), and dir bound onto
// itself in it when it starts, as a container runtime binds a volume's target
// path into the container. From then on, what the host does at dir
// (unmounting a dead FUSE mount, mounting a new one) is not seen: a records
// file opened again by path is opened on the mount the writer started with,
// as a container's process would, and a dead mount shows as an error.
//
// A mount namespace belongs to a thread, and a Go program has several, so
// the first call makes the namespace on its own locked thread and executes
// the program again from it (same PID, arguments and environment, plus
// ownMountNSEnv): it returns only on failure. The second image, whose every
// thread descends from that one, binds dir and returns nil. Needs
// CAP_SYS_ADMIN.
func EnterOwnMountNamespace(dir string) error {
	if v, ok := os.LookupEnv(ownMountNSEnv); ok {
		_ = os.Unsetenv(ownMountNSEnv)
		if v != dir {
			return fmt.Errorf("%w: executed again for %q, now asked for %q", ErrMountNamespace, v, dir)
		}
		return bindPrivate(dir)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread() // only after a failure: the thread is tainted, but exits with the writer
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("%w: unshare(CLONE_NEWNS): %v (needs CAP_SYS_ADMIN)", ErrMountNamespace, err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("%w: make every mount private: %v", ErrMountNamespace, err)
	}
	err := syscall.Exec("/proc/self/exe", os.Args, append(os.Environ(), ownMountNSEnv+"="+dir))
	return fmt.Errorf("%w: execute the writer again in its namespace: %v", ErrMountNamespace, err)
}

// bindPrivate binds dir onto itself, privately: the writer's handle on the
// volume as it was mounted when the writer started.
func bindPrivate(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("%w: bind %s: %v", ErrMountNamespace, dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("%w: make %s private: %v", ErrMountNamespace, dir, err)
	}
	return nil
}
