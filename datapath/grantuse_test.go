package datapath

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestGrantConflict is the specification of who may hold live grants together.
func TestGrantConflict(t *testing.T) {
	live := func(use GrantUse) attachmentRecord { return attachmentRecord{Epoch: 1, State: StateGranted, Use: use} }
	legacy := attachmentRecord{Epoch: 1, State: StateGranted} // written before uses existed
	gone := attachmentRecord{Epoch: 2, State: StateFenced}
	cases := []struct {
		name  string
		mode  AccessMode
		use   GrantUse
		other attachmentRecord
		want  string // substring of the refusal; "" = allowed
	}{
		{"rwo alone", AccessRWO, UseFilesystemWriter, gone, ""},
		{"rwo second reader", AccessRWO, UseReadOnly, live(UseReadOnly), "it is RWO"},
		{"rwo second writer", AccessRWO, UseReadWrite, live(UseReadWrite), "it is RWO"},
		{"rwx fs writer after fs writer", AccessRWX, UseFilesystemWriter, live(UseFilesystemWriter), "mounted read-write on one node only"},
		{"rwx fs writer after block writer", AccessRWX, UseFilesystemWriter, live(UseReadWrite), "mounted read-write on one node only"},
		{"rwx fs writer after legacy grant", AccessRWX, UseFilesystemWriter, legacy, "holds a live rw grant"},
		{"rwx fs writer after reader", AccessRWX, UseFilesystemWriter, live(UseReadOnly), ""},
		{"rwx fs writer after fenced", AccessRWX, UseFilesystemWriter, gone, ""},
		{"rwx block writer after fs writer", AccessRWX, UseReadWrite, live(UseFilesystemWriter), "no other node may write under it"},
		{"rwx block writer after block writer", AccessRWX, UseReadWrite, live(UseReadWrite), ""},
		{"rwx block writer after legacy grant", AccessRWX, UseReadWrite, legacy, ""},
		{"rwx reader after fs writer", AccessRWX, UseReadOnly, live(UseFilesystemWriter), ""},
		{"rwx reader after reader", AccessRWX, UseReadOnly, live(UseReadOnly), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			attach := map[string]attachmentRecord{"n1": c.other, "n2": {Epoch: 1, State: StateReleased}}
			got := grantConflict(c.mode, "n2", c.use, attach)
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Fatalf("grantConflict(%s, %s next to %+v) = %q, want %q", c.mode, c.use, c.other, got, c.want)
			}
			// The node's own grant never conflicts with itself.
			if own := grantConflict(c.mode, "n1", c.use, attach); own != "" {
				t.Fatalf("n1 against its own grant: %q", own)
			}
		})
	}
}

func TestStore_GrantAs_SecondFilesystemWriterRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	v := mustCreate(t, s, "shared", 1<<20, AccessRWX)
	e1, err := s.GrantAs(v.ID, "n1", UseFilesystemWriter)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.GrantAs(v.ID, "n2", UseFilesystemWriter)
	if !errors.Is(err, ErrAttachedElsewhere) || !strings.Contains(err.Error(), "volumeMode: Block") {
		t.Fatalf("second filesystem writer: %v, want ErrAttachedElsewhere naming volumeMode: Block", err)
	}
	if _, err := s.GrantAs(v.ID, "n2", UseReadWrite); !errors.Is(err, ErrAttachedElsewhere) {
		t.Fatalf("block writer under a mounted filesystem: %v, want ErrAttachedElsewhere", err)
	}
	if _, err := s.GrantAs(v.ID, "n3", UseReadOnly); err != nil {
		t.Fatalf("reader next to the filesystem writer: %v", err)
	}
	// Refusals changed nothing: n2 has no grant, n1 keeps its epoch.
	if err := s.WriteAt(v.ID, "n1", e1, 0, []byte("x")); err != nil {
		t.Fatalf("n1 after the refusals: %v", err)
	}
	atts, _ := s.Attachments(v.ID)
	for _, a := range atts {
		if a.Node == "n2" {
			t.Fatalf("refused grant left a row: %+v", a)
		}
	}
	// The use is durable: after a restart the second writer is still refused.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	if _, err := s.GrantAs(v.ID, "n2", UseFilesystemWriter); !errors.Is(err, ErrAttachedElsewhere) {
		t.Fatalf("second filesystem writer after reopen: %v, want ErrAttachedElsewhere", err)
	}
	// Once n1 is fenced, n2 may mount it.
	if _, err := s.Fence(v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GrantAs(v.ID, "n2", UseFilesystemWriter); err != nil {
		t.Fatalf("filesystem writer after the first was fenced: %v", err)
	}
}

func TestStore_GrantAs_BlockWritersShareRWX(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "shared", 1<<20, AccessRWX)
	e1, err1 := s.GrantAs(v.ID, "n1", UseReadWrite)
	e2, err2 := s.GrantAs(v.ID, "n2", UseReadWrite)
	if err1 != nil || err2 != nil {
		t.Fatalf("two block writers: %v, %v", err1, err2)
	}
	if err := s.WriteAt(v.ID, "n1", e1, 0, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteAt(v.ID, "n2", e2, 1, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GrantAs(v.ID, "n3", UseFilesystemWriter); !errors.Is(err, ErrAttachedElsewhere) {
		t.Fatalf("filesystem writer next to block writers: %v", err)
	}
}

func TestStore_GrantAs_ReadOnlyRefusesWrites(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "ro", 1<<20, AccessRWX)
	e, err := s.GrantAs(v.ID, "n1", UseReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	err = s.WriteAt(v.ID, "n1", e, 0, []byte("x"))
	if !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), "read-only grant") {
		t.Fatalf("write under a read-only grant: %v, want ErrReadOnly", err)
	}
	if p, err := s.ReadAt(v.ID, "n1", e, 0, 1); err != nil || p[0] != 0 {
		t.Fatalf("read under a read-only grant = %v, %v; want one zero byte (nothing written)", p, err)
	}
	if err := s.Flush(v.ID, "n1", e); err != nil {
		t.Fatalf("flush under a read-only grant: %v", err)
	}
	// Asking again as a writer records the new use in place, same epoch.
	e2, err := s.GrantAs(v.ID, "n1", UseFilesystemWriter)
	if err != nil || e2 != e {
		t.Fatalf("re-grant as writer = %d, %v; want epoch %d", e2, err, e)
	}
	if err := s.WriteAt(v.ID, "n1", e, 0, []byte("x")); err != nil {
		t.Fatalf("write after the use changed: %v", err)
	}
}

func TestStore_GrantAs_BadUse(t *testing.T) {
	s := openTest(t, t.TempDir())
	v := mustCreate(t, s, "a", 1<<20, AccessRWX)
	_, err := s.GrantAs(v.ID, "n1", "rwx")
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), `allowed are "rw", "rw-fs" and "ro"`) {
		t.Fatalf("bad use: %v", err)
	}
	if atts, _ := s.Attachments(v.ID); len(atts) != 0 {
		t.Fatalf("bad use left rows: %+v", atts)
	}
}

// A record written before grants had a use reads as read-write.
func TestAttachmentRecord_LegacyIsReadWrite(t *testing.T) {
	var a attachmentRecord
	if err := json.Unmarshal([]byte(`{"epoch":3,"state":"granted","updated":"2026-01-01T00:00:00Z"}`), &a); err != nil {
		t.Fatal(err)
	}
	if a.use() != UseReadWrite {
		t.Fatalf("legacy record use = %q, want %q", a.use(), UseReadWrite)
	}
	b, _ := json.Marshal(attachmentRecord{Epoch: 3, State: StateGranted, Use: UseReadOnly})
	if !strings.Contains(string(b), `"use":"ro"`) {
		t.Fatalf("record = %s, want the use in it", b)
	}
}
