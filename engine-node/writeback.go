package enginenode

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Values of `run --writeback-guard`.
const (
	// WritebackGuardWarn: guard, and on failure log one Warning naming what is
	// missing and serve anyway (the default).
	WritebackGuardWarn = "warn"
	// WritebackGuardRequire: guard, and refuse to start when any part fails.
	WritebackGuardRequire = "require"
	// WritebackGuardOff: do not guard.
	WritebackGuardOff = "off"
)

// ErrWritebackUnguarded: --writeback-guard require, and the engine could not
// make itself an I/O flusher or lock its memory.
var ErrWritebackUnguarded = errors.New("writeback guard incomplete")

// ioFlusherExecEnv marks the engine's second image: the first one made its
// thread an I/O flusher and executed the program again from that thread.
const ioFlusherExecEnv = "VIGIL_ENGINE_IO_FLUSHER_EXEC"

// WritebackGuard is what GuardWriteback achieved.
type WritebackGuard struct {
	// IOFlusher: every thread of the process is in the I/O flusher state.
	IOFlusher bool
	// MemoryLocked: the process's memory is locked, now and as it grows.
	MemoryLocked bool
	// Missing says, per part that failed, why and what it needs.
	Missing []string
}

// GuardWriteback keeps this process, which serves FUSE file systems, from
// deadlocking the writeback it serves. Under memory pressure the kernel
// reclaims by writing dirty pages back, possibly to the engine's own
// volumes; an engine that then waits on reclaim itself (allocating, or
// faulting in a page that was swapped or dropped) waits on its own I/O. As
// block and file system daemons in user space do (nbd, ublk, tcmu-runner):
//
//   - PR_SET_IO_FLUSHER (prctl 57; needs CAP_SYS_RESOURCE): the engine's
//     allocations do not recurse into I/O and it is not throttled as a
//     writer of dirty pages. The state is per thread and is inherited by
//     threads and processes created later and kept across execve, so the
//     first call sets it on its own thread and executes the program again
//     from there (same PID, arguments and environment, plus
//     ioFlusherExecEnv): it does not return then. The second image's threads
//     all descend from that thread.
//   - mlockall(MCL_CURRENT|MCL_FUTURE|MCL_ONFAULT) (needs CAP_IPC_LOCK, or a
//     RLIMIT_MEMLOCK above the engine's size): no page the engine touched is
//     reclaimed. MCL_ONFAULT locks pages as they are first touched instead
//     of populating every mapping at once, so the engine's resident memory
//     is what it uses, not what the Go runtime reserved.
//
// It reports what it achieved; a part that fails is in Missing.
func GuardWriteback() WritebackGuard {
	var g WritebackGuard
	if os.Getenv(ioFlusherExecEnv) == "" {
		g.Missing = append(g.Missing, becomeIOFlusher())
	} else {
		_ = os.Unsetenv(ioFlusherExecEnv) // not for the engine's children
		v, err := unix.PrctlRetInt(unix.PR_GET_IO_FLUSHER, 0, 0, 0, 0)
		if g.IOFlusher = err == nil && v == 1; !g.IOFlusher {
			g.Missing = append(g.Missing, fmt.Sprintf("PR_SET_IO_FLUSHER: lost across execve (PR_GET_IO_FLUSHER = %d, %v)", v, err))
		}
	}
	if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
		g.Missing = append(g.Missing, fmt.Sprintf("mlockall: %v (needs CAP_IPC_LOCK, or RLIMIT_MEMLOCK above the engine's memory)", err))
	} else {
		g.MemoryLocked = true
	}
	return g
}

// setIOFlusher is prctl(PR_SET_IO_FLUSHER, v) on the calling thread; a test
// without CAP_SYS_RESOURCE replaces it to follow the execve that comes next.
var setIOFlusher = func(v uintptr) error { return unix.Prctl(unix.PR_SET_IO_FLUSHER, v, 0, 0, 0) }

// becomeIOFlusher sets PR_SET_IO_FLUSHER on this thread and executes the
// program again from it; it returns only on failure, saying why.
func becomeIOFlusher() string {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := setIOFlusher(1); err != nil {
		return fmt.Sprintf("PR_SET_IO_FLUSHER: %v (needs CAP_SYS_RESOURCE)", err)
	}
	err := syscall.Exec("/proc/self/exe", os.Args, append(os.Environ(), ioFlusherExecEnv+"=1"))
	// One thread of many flagged helps nothing and surprises: take it back.
	_ = setIOFlusher(0)
	return fmt.Sprintf("PR_SET_IO_FLUSHER: execute the engine again so that every thread has it: %v", err)
}

// guardWriteback applies --writeback-guard mode with guard (nil when the
// engine runs inside another program, which it must not lock or replace).
func guardWriteback(mode string, guard func() WritebackGuard, log *slog.Logger) error {
	if mode == WritebackGuardOff {
		return nil
	}
	if guard == nil {
		if mode == WritebackGuardRequire {
			return fmt.Errorf("%w: --writeback-guard %s: the engine runs inside another program here, whose process it cannot guard", ErrWritebackUnguarded, mode)
		}
		return nil
	}
	g := guard()
	if len(g.Missing) == 0 {
		log.Info("writeback guard on: every thread an I/O flusher, memory locked")
		return nil
	}
	missing := strings.Join(g.Missing, "; ")
	if mode == WritebackGuardRequire {
		return fmt.Errorf("%w: %s (--writeback-guard %s; %s serves without it)", ErrWritebackUnguarded, missing, mode, WritebackGuardWarn)
	}
	log.Warn("writeback guard incomplete: under memory pressure, writeback to this node's volumes can deadlock the engine that serves it",
		"missing", missing, "io-flusher", g.IOFlusher, "memory-locked", g.MemoryLocked)
	return nil
}

// checkWritebackGuard checks the value of --writeback-guard.
func checkWritebackGuard(mode string) error {
	switch mode {
	case WritebackGuardWarn, WritebackGuardRequire, WritebackGuardOff:
		return nil
	}
	return fmt.Errorf("--writeback-guard %q: want %s (default: guard, warn once if it fails), %s (refuse to start without it) or %s",
		mode, WritebackGuardWarn, WritebackGuardRequire, WritebackGuardOff)
}
