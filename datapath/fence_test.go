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
		raceFenceNode(t, s, 8)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// raceFenceNode grants node "zombie" others small volumes and one it writes
// to, and races those writes with FenceNode of the node, which must fence
// every one of them (datapathtest.RaceFence).
func raceFenceNode(t *testing.T, s *datapath.Store, others int) {
	t.Helper()
	for i := range others {
		o, err := s.CreateVolume(fmt.Sprintf("other-%d", i), 4096, datapath.AccessRWO)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Grant(o.ID, "zombie"); err != nil {
			t.Fatal(err)
		}
	}
	v, err := s.CreateVolume("race", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := s.Grant(v.ID, "zombie")
	if err != nil {
		t.Fatal(err)
	}
	write := func(off int64, p []byte) error { return s.WriteAt(v.ID, "zombie", epoch, off, p) }
	fence := func() error {
		fs, err := s.FenceNode("zombie")
		if err == nil && len(fs) != others+1 {
			err = fmt.Errorf("FenceNode fenced %d volumes, want %d", len(fs), others+1)
		}
		return err
	}
	datapathtest.RaceFence(t, s.DataFile(v.ID), write, fence)
}
