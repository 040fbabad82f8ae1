package datapath

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// allocatedBytes is how much of the file's size has blocks on disk.
func allocatedBytes(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// A volume's full size is reserved on disk at creation, so that no write
// inside it can meet a full file system later.
func TestStore_CreateVolume_ReservesItsSize(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "pvc-a", 8<<20, AccessRWO)
	if got := allocatedBytes(t, s.DataFile(v.ID)); got < 8<<20 {
		t.Fatalf("the data file has %d bytes on disk; want its whole size (8 MiB) reserved", got)
	}
}

// More than the file system has free is refused by what it has free, not by
// its total size, and nothing is left behind.
func TestStore_CreateVolume_RefusedBeyondFreeSpace(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Capacity: 1 << 60})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	free := s.freeOnDisk()
	size := (free + 1<<30) &^ 4095
	_, err = s.CreateVolume("pvc-huge", size, AccessRWO)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "free on disk") {
		t.Fatalf("CreateVolume beyond the free space = %v; want ErrNoSpace saying what is free", err)
	}
	if avail, _ := s.Capacity(); avail > free {
		t.Errorf("Capacity = %d, more than the %d free on disk", avail, free)
	}
	if vs, _ := s.ListVolumes(); len(vs) != 0 {
		t.Errorf("volumes after the refusal: %v", vs)
	}
	if ents, _ := os.ReadDir(dir + "/" + volumesDir); len(ents) != 0 {
		t.Errorf("files left in %s: %d", volumesDir, len(ents))
	}
}

// Over-provisioning is explicit: volumes are thin and may add up to the
// percentage of the capacity.
func TestStore_OverProvisioning(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Capacity: 4 << 20, OverProvisioningPercentage: 200})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	v := mustCreate(t, s, "pvc-a", 6<<20, AccessRWO)
	if got := allocatedBytes(t, s.DataFile(v.ID)); got >= 6<<20 {
		t.Errorf("an over-provisioned volume has %d bytes reserved; want a thin file", got)
	}
	if avail, _ := s.Capacity(); avail != 2<<20 {
		t.Errorf("Capacity = %d, want 2 MiB (200%% of 4 MiB less 6 MiB)", avail)
	}
	if _, err := s.CreateVolume("pvc-b", 2<<20+4096, AccessRWO); !errors.Is(err, ErrNoSpace) {
		t.Errorf("beyond 200%% of the capacity: %v, want ErrNoSpace", err)
	}
}

func TestOpen_BadOverProvisioning(t *testing.T) {
	for _, pct := range []int{-1, 50, 99, 1001} {
		_, err := Open(t.TempDir(), Options{Capacity: 1 << 20, OverProvisioningPercentage: pct})
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "want 100") {
			t.Errorf("over-provisioning %d%%: %v, want ErrInvalidArgument saying what is allowed", pct, err)
		}
	}
}
