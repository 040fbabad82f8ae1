package datapath_test

import (
	"fmt"
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

// TestStore_FenceNode_NoWriteLandsAfterFence is the same race with FenceNode
// as the fence: the node holds other volumes too, fenced in the same call.
func TestStore_FenceNode_NoWriteLandsAfterFence(t *testing.T) {
	for round := 0; round < 3; round++ {
		s, err := datapath.Open(t.TempDir(), datapath.Options{Capacity: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			o, _ := s.CreateVolume(fmt.Sprintf("other-%d", i), 4096, datapath.AccessRWO)
			if _, err := s.Grant(o.ID, "zombie"); err != nil {
				t.Fatal(err)
			}
		}
		v, _ := s.CreateVolume("race", 1<<20, datapath.AccessRWO)
		epoch, _ := s.Grant(v.ID, "zombie")
		write := func(off int64, p []byte) error { return s.WriteAt(v.ID, "zombie", epoch, off, p) }
		fence := func() error {
			fs, err := s.FenceNode("zombie")
			if err == nil && len(fs) != 9 {
				err = fmt.Errorf("FenceNode fenced %d volumes, want 9", len(fs))
			}
			return err
		}
		datapathtest.RaceFence(t, s.DataFile(v.ID), write, fence)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
