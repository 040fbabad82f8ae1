package fusedisk_test

import (
	"context"
	"fmt"
	"os"

	"github.com/vigil-storage/vigil/engine-node/fusedisk"
)

// zeros is a Backend that reads zeros and accepts every write.
type zeros struct{}

func (zeros) ReadAt(_ context.Context, _ int64, n int) ([]byte, error) { return make([]byte, n), nil }
func (zeros) WriteAt(context.Context, int64, []byte) error             { return nil }
func (zeros) Flush(context.Context) error                              { return nil }

// Mount serves one file whose bytes live in a Backend; a loop device attached
// to Path() turns it into a block device.
func ExampleMount() {
	if fusedisk.Usable() != nil {
		return // needs root and /dev/fuse
	}
	dir, _ := os.MkdirTemp("", "disk")
	defer os.Remove(dir)
	d, err := fusedisk.Mount(dir, 1<<20, zeros{}, fusedisk.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Unmount()
	fi, _ := os.Stat(d.Path())
	fmt.Println(fi.Name(), fi.Size())
}
