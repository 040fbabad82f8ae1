package loopdev

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// attachMiB attaches a loop device to a new 1 MiB file in dir, detached
// at the test's end; it fails t without loop devices.
func attachMiB(t *testing.T, dir string) (string, *Device) {
	t.Helper()
	testenv.RequireNoError(t, "loop devices", Usable())
	backing := filepath.Join(dir, "img")
	if err := os.WriteFile(backing, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Attach(backing)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Detach() })
	return backing, d
}

func TestAttach_File_SizeAndAutoclear(t *testing.T) {
	dir := t.TempDir()
	_, d := attachMiB(t, dir)
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

// TestDevice_Detach_KeepsBufferedWrites: a write another opener made through
// the device's page cache (a pod's dd on a Block volume, closed without
// fsync) reaches the backing file when the device is detached, as it would
// when the last opener of a disk lets go. Detaching first would strand it in
// the page cache of a device with no backing any more.
func TestDevice_Detach_KeepsBufferedWrites(t *testing.T) {
	backing, d := attachMiB(t, t.TempDir())
	want := []byte("written through the page cache, never synced by its writer")
	w, err := os.OpenFile(d.Path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(want, 4096); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil { // not the last opener: nothing is flushed
		t.Fatal(err)
	}
	if err := d.Detach(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	f, err := os.Open(backing)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(got, 4096); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("backing file holds %q after Detach, want %q", got, want)
	}
}

// TestDetach_FreeDevice_NoError: detaching by path a device that nothing is
// attached to (a recovery that finds it already let go) flushes nothing and
// is no error.
func TestDetach_FreeDevice_NoError(t *testing.T) {
	_, d := attachMiB(t, t.TempDir())
	if err := d.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := Detach(d.Path); err != nil {
		t.Fatalf("second Detach(%s) = %v, want nil", d.Path, err)
	}
}
