package datapath

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func openTest(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{Capacity: 1 << 30})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustCreate(t testing.TB, s *Store, name string, size int64, mode AccessMode) Volume {
	t.Helper()
	v, err := s.CreateVolume(name, size, mode)
	if err != nil {
		t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return v
}

func TestStore_CreateVolume_IdempotentByName(t *testing.T) {
	s := openTest(t, t.TempDir())
	a := mustCreate(t, s, "pvc-1", 1<<20, AccessRWO)
	b := mustCreate(t, s, "pvc-1", 1<<20, AccessRWO)
	if a != b {
		t.Fatalf("second create returned %+v, want %+v", b, a)
	}
	if _, err := s.CreateVolume("pvc-1", 2<<20, AccessRWO); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("different size: err = %v, want ErrAlreadyExists", err)
	}
	if _, err := s.CreateVolume("pvc-1", 1<<20, AccessRWX); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("different mode: err = %v, want ErrAlreadyExists", err)
	}
	vs, _ := s.ListVolumes()
	if len(vs) != 1 {
		t.Fatalf("ListVolumes = %d volumes, want 1", len(vs))
	}
}

func TestStore_CreateVolume_BadInput(t *testing.T) {
	s := openTest(t, t.TempDir())
	cases := []struct {
		name string
		size int64
		mode AccessMode
		want error
	}{
		{"", 1, AccessRWO, ErrInvalidArgument},
		{string(make([]byte, MaxNameLen+1)), 1, AccessRWO, ErrInvalidArgument},
		{"bad\x00name", 1, AccessRWO, ErrInvalidArgument},
		{"ok", 0, AccessRWO, ErrInvalidArgument},
		{"ok", -5, AccessRWO, ErrInvalidArgument},
		{"ok", MaxVolumeSize + 1, AccessRWO, ErrInvalidArgument},
		{"ok", 1, "rwz", ErrInvalidArgument},
		{"ok", 2 << 30, AccessRWO, ErrNoSpace},
	}
	for _, c := range cases {
		_, err := s.CreateVolume(c.name, c.size, c.mode)
		if !errors.Is(err, c.want) {
			t.Errorf("CreateVolume(%.10q, %d, %q) = %v, want %v", c.name, c.size, c.mode, err, c.want)
		}
	}
	if vs, _ := s.ListVolumes(); len(vs) != 0 {
		t.Fatalf("bad input created %d volumes", len(vs))
	}
	if entries, _ := os.ReadDir(filepath.Join(s.dir, volumesDir)); len(entries) != 0 {
		t.Fatalf("bad input left %d data files", len(entries))
	}
}

func TestStore_Capacity_CountsProvisioned(t *testing.T) {
	s := openTest(t, t.TempDir())
	mustCreate(t, s, "a", 100<<20, AccessRWO)
	got, err := s.Capacity()
	if err != nil || got != 1<<30-100<<20 {
		t.Fatalf("Capacity = %d, %v; want %d", got, err, 1<<30-100<<20)
	}
}

func TestStore_DeleteVolume_UnknownAndInUse(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.DeleteVolume("vol-0000000000000000"); err != nil {
		t.Fatalf("delete unknown: %v", err)
	}
	if err := s.DeleteVolume("../../etc"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("delete bad id: %v, want ErrInvalidArgument", err)
	}
	v := mustCreate(t, s, "a", 1<<20, AccessRWO)
	if _, err := s.Grant(v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(v.ID); !errors.Is(err, ErrInUse) {
		t.Fatalf("delete granted: %v, want ErrInUse", err)
	}
	if _, err := s.Fence(v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(v.ID); err != nil {
		t.Fatalf("delete after fence: %v", err)
	}
	if _, err := os.Stat(s.imgPath(v.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data file still there: %v", err)
	}
	if _, err := s.GetVolume(v.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get deleted: %v, want ErrNotFound", err)
	}
	// The name is free again and gets a new id.
	w := mustCreate(t, s, "a", 1<<20, AccessRWO)
	if w.ID == v.ID {
		t.Fatalf("id %s reused", w.ID)
	}
}

func TestStore_Open_RestartKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Capacity: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	v := mustCreate(t, s, "a", 1<<20, AccessRWO)
	e1, _ := s.Grant(v.ID, "n1")
	if err := s.WriteAt(v.ID, "n1", e1, 4096, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	e2, _ := s.Fence(v.ID, "n1")
	e3, _ := s.Grant(v.ID, "n2")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := openTest(t, dir)
	got, err := s2.GetVolume(v.ID)
	if err != nil || got != v {
		t.Fatalf("after restart GetVolume = %+v, %v; want %+v", got, err, v)
	}
	if err := s2.WriteAt(v.ID, "n1", e1, 0, []byte("zombie")); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced node after restart: %v, want ErrFenced", err)
	}
	p, err := s2.ReadAt(v.ID, "n2", e3, 4096, 5)
	if err != nil || string(p) != "hello" {
		t.Fatalf("read after restart = %q, %v", p, err)
	}
	e4, _ := s2.Fence(v.ID, "n2")
	if !(e1 < e2 && e2 < e3 && e3 < e4) {
		t.Fatalf("epochs not strictly increasing across restart: %d %d %d %d", e1, e2, e3, e4)
	}
}

func TestStore_Open_RemovesOrphansAndLocks(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	orphan := filepath.Join(dir, volumesDir, "vol-00000000000000aa.img")
	if err := os.WriteFile(orphan, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil {
		t.Fatal("second Open of a dir in use succeeded")
	}
	_ = s.Close()
	openTest(t, dir)
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan not removed: %v", err)
	}
}

func TestStore_Close_RefusesLaterCalls(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "a", 4096, AccessRWO)
	e, _ := s.Grant(v.ID, "n1")
	_ = s.Close()
	if err := s.WriteAt(v.ID, "n1", e, 0, []byte("x")); err == nil {
		t.Fatal("write after Close succeeded")
	}
	if _, err := s.CreateVolume("b", 1, AccessRWO); err == nil {
		t.Fatal("create after Close succeeded")
	}
}

func TestStore_ReadAt_SparseIsZero(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "a", 1<<20, AccessRWO)
	e, _ := s.Grant(v.ID, "n1")
	p, err := s.ReadAt(v.ID, "n1", e, 1<<19, 4096)
	if err != nil || !bytes.Equal(p, make([]byte, 4096)) {
		t.Fatalf("read of a hole = %v, %v", p[:8], err)
	}
}
