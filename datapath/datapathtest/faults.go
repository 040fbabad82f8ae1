package datapathtest

import (
	"os"
	"sync"
	"syscall"

	"github.com/vigil-storage/vigil/datapath"
)

// Faults is a fault-injecting file layer for a store (pass Faults.Open as
// datapath.Options.OpenFile): every volume's data file is the real one, but
// FailNextSync makes the next sync of one file fail with EIO, the way a
// disk's write error surfaces at fdatasync, and the syncs after it succeed
// again, as the kernel's do once it has dropped the pages it could not
// write. Its files have no descriptor of their own for the store, so writes
// take the plain WriteAt path, not pwritev or splice.
type Faults struct {
	mu    sync.Mutex
	fail  map[string]int   // path -> syncs still to fail
	syncs map[string]int   // path -> syncs attempted
	holds map[string]*hold // path -> the next sync to hold
}

type hold struct{ entered, release chan struct{} }

// NewFaults returns a layer that fails nothing until told.
func NewFaults() *Faults {
	return &Faults{fail: map[string]int{}, syncs: map[string]int{}, holds: map[string]*hold{}}
}

// HoldNextSync makes the next sync of the file at path wait, once it has
// begun (and, after FailNextSync, taken its failure), until release is
// called; entered is closed when it begins. Syncs that begin meanwhile go
// on, as syncs running side by side do.
func (fs *Faults) HoldNextSync(path string) (entered <-chan struct{}, release func()) {
	h := &hold{entered: make(chan struct{}), release: make(chan struct{})}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.holds[path] = h
	return h.entered, sync.OnceFunc(func() { close(h.release) })
}

// Open opens a data file (datapath.OpenFileFunc).
func (fs *Faults) Open(name string, flag int, perm os.FileMode) (datapath.File, error) {
	f, err := datapath.OpenOSFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, path: name, fs: fs}, nil
}

// FailNextSync makes the next sync (Datasync or Sync) of the file at path
// fail with EIO.
func (fs *Faults) FailNextSync(path string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.fail[path]++
}

// Syncs is how many syncs of the file at path were attempted, failed ones
// included.
func (fs *Faults) Syncs(path string) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.syncs[path]
}

// sync decides one sync of path: an error to return, or nil to go on.
func (fs *Faults) sync(path string) error {
	fs.mu.Lock()
	fs.syncs[path]++
	var err error
	if fs.fail[path] > 0 {
		fs.fail[path]--
		err = &os.PathError{Op: "fdatasync", Path: path, Err: syscall.EIO}
	}
	h := fs.holds[path]
	delete(fs.holds, path)
	fs.mu.Unlock()
	if h != nil {
		close(h.entered)
		<-h.release
	}
	return err
}

type faultFile struct {
	datapath.File
	path string
	fs   *Faults
}

func (f *faultFile) Datasync() error {
	if err := f.fs.sync(f.path); err != nil {
		return err
	}
	return f.File.Datasync()
}

func (f *faultFile) Sync() error {
	if err := f.fs.sync(f.path); err != nil {
		return err
	}
	return f.File.Sync()
}
