package datapath_test

import (
	"testing"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestStore_Fence_NoWriteLandsAfterFence races writers against Fence (see
// datapathtest.RaceFence): the data file read right after Fence returns must
// not change afterwards, no write that started after the fence may succeed, and
// every acknowledged write must be in the file.
func TestStore_Fence_NoWriteLandsAfterFence(t *testing.T) {
	for round := 0; round < 5; round++ {
		s, err := datapath.Open(t.TempDir(), datapath.Options{Capacity: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		v, err := s.CreateVolume("race", 1<<20, datapath.AccessRWO)
		if err != nil {
			t.Fatal(err)
		}
		epoch, _ := s.Grant(v.ID, "zombie")
		write := func(off int64, p []byte) error { return s.WriteAt(v.ID, "zombie", epoch, off, p) }
		fence := func() error { _, err := s.Fence(v.ID, "zombie"); return err }
		datapathtest.RaceFence(t, s.DataFile(v.ID), write, fence)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
