package loopdev

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/internal/testenv"
)

func TestAttach_File_SizeAndAutoclear(t *testing.T) {
	testenv.RequireNoError(t, "loop devices", Usable())
	dir := t.TempDir()
	backing := filepath.Join(dir, "img")
	if err := os.WriteFile(backing, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Attach(backing)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Detach() })
	size, err := d.Size()
	if err != nil || size != 1<<20 {
		t.Fatalf("size %d, %v", size, err)
	}
	under, err := Under(dir)
	if err != nil || !slices.Contains(under, d.Path) {
		t.Fatalf("Under(%s) = %v, %v; want %s", dir, under, err, d.Path)
	}
	path := d.Path
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// autoclear: once nothing holds it, the kernel detaches the device.
	deadline := time.Now().Add(5 * time.Second)
	for {
		all, err := Attached()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := all[path]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still attached after Close", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAttach_MissingBacking_Error(t *testing.T) {
	if _, err := Attach(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("attach of a missing file succeeded")
	}
}

func TestDetach_AlreadyDetached_NoError(t *testing.T) {
	if err := Detach("/dev/loop-does-not-exist"); err != nil {
		t.Fatal(err)
	}
}
