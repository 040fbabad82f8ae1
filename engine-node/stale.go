package enginenode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrJournalLocked: another live process holds the journal (a second engine on
// the same state directory).
var ErrJournalLocked = errors.New("journal is locked by another live process")

// openJournalAfterCrash opens the journal. When a killed engine still holds it
// because one of its threads waits in the kernel on its own FUSE disk (a mount
// stuck on a read or write), the dead engine's FUSE connections are aborted so
// that it can finish dying, and the open is retried. A live holder is an error.
func openJournalAfterCrash(stateDir, bootID string) (*Journal, string, error) {
	j, prev, err := OpenJournal(stateDir, bootID)
	if !errors.Is(err, bolterrors.ErrTimeout) {
		return j, prev, err
	}
	path := filepath.Join(stateDir, JournalFile)
	holders := fileHolders(path)
	for _, pid := range holders {
		if !dying(pid) {
			return nil, "", fmt.Errorf("open journal %s: pid %d: %w", path, pid, ErrJournalLocked)
		}
	}
	all, err := mounts()
	if err != nil {
		return nil, "", err
	}
	root := filepath.Join(stateDir, "disks")
	for _, m := range all {
		if filepath.Dir(m.MountPoint) == root {
			if err := abortFuse(m.MountPoint); err != nil {
				return nil, "", err
			}
		}
	}
	time.Sleep(100 * time.Millisecond) // let the dying holders exit
	return OpenJournal(stateDir, bootID)
}

// fileHolders lists the pids that have path open.
func fileHolders(path string) []int {
	procs, _ := os.ReadDir("/proc")
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		for _, fd := range fds {
			if t, _ := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name())); t == path {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// dying reports whether pid is a zombie or has SIGKILL pending for the whole
// process: it is exiting, possibly stuck on I/O.
func dying(pid int) bool {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return true // gone
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "ShdPnd":
			mask, err := strconv.ParseUint(v, 16, 64)
			if err == nil && mask&(1<<(9-1)) != 0 { // SIGKILL is signal 9
				return true
			}
		}
	}
	return false
}
