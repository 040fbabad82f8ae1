package datapath

import (
	"errors"
	"testing"
)

func TestStore_Grant_RWOOneWriter(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "a", 1<<20, AccessRWO)
	e1, err := s.Grant(v.ID, "n1")
	if err != nil || e1 == 0 {
		t.Fatalf("Grant n1 = %d, %v", e1, err)
	}
	again, err := s.Grant(v.ID, "n1")
	if err != nil || again != e1 {
		t.Fatalf("repeated Grant n1 = %d, %v; want the same epoch %d", again, err, e1)
	}
	if _, err := s.Grant(v.ID, "n2"); !errors.Is(err, ErrAttachedElsewhere) {
		t.Fatalf("Grant n2 while n1 live: %v, want ErrAttachedElsewhere", err)
	}
	if err := s.Release(v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	e2, err := s.Grant(v.ID, "n2")
	if err != nil || e2 <= e1 {
		t.Fatalf("Grant n2 after release = %d, %v; want > %d", e2, err, e1)
	}
	if err := s.WriteAt(v.ID, "n1", e1, 0, []byte("x")); !errors.Is(err, ErrFenced) {
		t.Fatalf("write by released node: %v, want ErrFenced", err)
	}
}

func TestStore_Grant_RWXManyWriters(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "a", 1<<20, AccessRWX)
	e1, _ := s.Grant(v.ID, "n1")
	e2, err := s.Grant(v.ID, "n2")
	if err != nil || e2 <= e1 {
		t.Fatalf("Grant n2 on RWX = %d, %v", e2, err)
	}
	if _, err := s.Fence(v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAt(v.ID, "n1", e1, 0, []byte("x")); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced n1: %v", err)
	}
	if err := s.WriteAt(v.ID, "n2", e2, 0, []byte("x")); err != nil {
		t.Fatalf("n2 must keep writing after n1's fence: %v", err)
	}
}

func TestStore_Fence_StaleAndUnknownEpochs(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "a", 1<<20, AccessRWO)
	e1, _ := s.Grant(v.ID, "n1")
	for _, bad := range []uint64{0, e1 + 1, e1 + 100} {
		if err := s.WriteAt(v.ID, "n1", bad, 0, []byte("x")); !errors.Is(err, ErrFenced) {
			t.Errorf("epoch %d: %v, want ErrFenced", bad, err)
		}
	}
	if err := s.WriteAt(v.ID, "stranger", e1, 0, []byte("x")); !errors.Is(err, ErrFenced) {
		t.Errorf("node without grant: %v, want ErrFenced", err)
	}
	fe, _ := s.Fence(v.ID, "n1")
	fe2, _ := s.Fence(v.ID, "n1")
	if !(e1 < fe && fe < fe2) {
		t.Fatalf("epochs %d, %d, %d not strictly increasing", e1, fe, fe2)
	}
	// Fencing a node that never had a grant is recorded too.
	if _, err := s.Fence(v.ID, "ghost"); err != nil {
		t.Fatal(err)
	}
	as, _ := s.Attachments(v.ID)
	if len(as) != 2 || as[0].Node != "ghost" || as[0].State != StateFenced || as[1].State != StateFenced {
		t.Fatalf("attachments = %+v", as)
	}
	e3, err := s.Grant(v.ID, "n1")
	if err != nil || e3 <= fe2 {
		t.Fatalf("re-grant after fence = %d, %v", e3, err)
	}
	p, _ := s.ReadAt(v.ID, "n1", e3, 0, 1)
	if p[0] != 0 {
		t.Fatal("a refused write changed the data")
	}
}
