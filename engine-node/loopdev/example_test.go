package loopdev_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/vigil-storage/vigil/engine-node/loopdev"
)

// Attach a file to a loop device; closing it lets the kernel detach it.
func ExampleAttach() {
	if loopdev.Usable() != nil {
		return // needs root and /dev/loop-control
	}
	dir, _ := os.MkdirTemp("", "loop")
	defer os.RemoveAll(dir)
	img := filepath.Join(dir, "img")
	_ = os.WriteFile(img, make([]byte, 1<<20), 0o600)
	d, err := loopdev.Attach(img)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	size, _ := d.Size()
	fmt.Println(size)
}
