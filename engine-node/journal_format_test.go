package enginenode

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/vigil-storage/vigil/internal/boltformat"
)

// copyJournal copies testdata/v1/journal.db, a journal written before format
// versions were recorded (boot boot-1, one staged and published volume), into
// a new state directory.
func copyJournal(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "v1", JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, JournalFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func journalVersion(t *testing.T, dir string) string {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, JournalFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	_ = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte(boltformat.MetaBucket)); b != nil {
			v = string(b.Get([]byte(boltformat.VersionKey)))
		}
		return nil
	})
	return v
}

// TestOpenJournal_V1FileFromBeforeVersions: a journal written before format
// versions were recorded opens as version 1 with its boot id and records,
// and records the version.
func TestOpenJournal_V1FileFromBeforeVersions(t *testing.T) {
	dir := copyJournal(t)
	j, previous, err := OpenJournal(dir, "boot-2")
	if err != nil {
		t.Fatal(err)
	}
	if previous != "boot-1" {
		t.Errorf("previous boot %q, want the fixture's boot-1", previous)
	}
	st, ok, err := j.Stage("vol-a1e43cb411083fa4")
	if err != nil || !ok || st.Phase != PhaseStaged || st.FsType != "ext4" || st.Epoch != 1 || st.Boot != "boot-1" {
		t.Errorf("the fixture's stage = %+v, %v, %v", st, ok, err)
	}
	pubs, err := j.Publishes()
	if err != nil || len(pubs) != 1 || pubs[0].PodName != "web-0" || pubs[0].Phase != PhasePublished {
		t.Errorf("the fixture's publishes = %+v, %v", pubs, err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if v := journalVersion(t, dir); v != "1" {
		t.Fatalf("recorded format version %q after opening, want 1", v)
	}
}

// TestOpenJournal_NewerFormatRefused: a journal of a format newer than this
// binary knows is refused, naming the file, its version and the highest
// supported one, and left as it was.
func TestOpenJournal_NewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	j, _, err := OpenJournal(dir, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if v := journalVersion(t, dir); v != "1" {
		t.Fatalf("a new journal records format version %q, want 1", v)
	}
	path := filepath.Join(dir, JournalFile)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(boltformat.MetaBucket)).Put([]byte(boltformat.VersionKey), []byte("7"))
	})
	if err != nil || db.Close() != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	_, _, err = OpenJournal(dir, "boot-2")
	if !errors.Is(err, boltformat.ErrTooNew) {
		t.Fatalf("OpenJournal of a version 7 journal: %v; want ErrTooNew", err)
	}
	for _, want := range []string{path, "version 7", "versions up to 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the refused open changed the journal")
	}
}
