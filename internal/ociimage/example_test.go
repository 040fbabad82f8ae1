package ociimage_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/vigil-storage/vigil/internal/ociimage"
)

// An image of one file and a link, written as a docker-archive tarball and
// read back.
func ExampleBuild() {
	t := ociimage.NewTree()
	if err := t.Bytes("/etc/motd", []byte("hello\n"), 0o644); err != nil {
		panic(err)
	}
	if err := t.Symlink("/etc/issue", "motd"); err != nil {
		panic(err)
	}
	img, err := ociimage.Build(t, ociimage.Config{User: "65532:65532", Cmd: []string{"/bin/cat", "/etc/motd"}})
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "ociimage-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "motd.tar")
	if _, err := ociimage.WriteArchive(file, "localhost/motd:1", img); err != nil {
		panic(err)
	}
	back, err := ociimage.ReadArchive(file, "localhost/motd:1")
	if err != nil {
		panic(err)
	}
	c, err := ociimage.Read(back)
	if err != nil {
		panic(err)
	}
	target, _ := c.Resolve("/etc/issue")
	cf, _ := back.ConfigFile()
	fmt.Println(target, c.Files[target].Size, cf.Config.User)
	// Output: /etc/motd 6 65532:65532
}
