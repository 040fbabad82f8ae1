package datapath

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

// The volumes in testdata/v1/datapath.db, a file written by the store before
// format versions were recorded: pvc-a granted to node-1 at epoch 1, pvc-b
// granted to node-2 and then fenced (epoch 2), node-3's announced stop.
const (
	fixtureA = "vol-a1e43cb411083fa4"
	fixtureB = "vol-b17b43adf52fed41"
)

// copyV1Fixture copies testdata/v1/datapath.db into a new data directory and
// adds the volumes' data files, which the fixture does not carry (sparse
// files of the recorded sizes).
func copyV1Fixture(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "v1", dbFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, volumesDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, dbFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	for id, size := range map[string]int64{fixtureA: 1 << 20, fixtureB: 2 << 20} {
		if err := os.Truncate(createEmpty(t, filepath.Join(dir, volumesDir, id+imgSuffix)), size); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func createEmpty(t *testing.T, path string) string {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestStore_Open_V1FileFromBeforeVersions: a datapath.db written before
// format versions were recorded opens as version 1 with everything in it,
// and records the version.
func TestStore_Open_V1FileFromBeforeVersions(t *testing.T) {
	dir := copyV1Fixture(t)
	s := openTest(t, dir)
	vs, err := s.ListVolumes()
	if err != nil || len(vs) != 2 || vs[0].ID != fixtureA || vs[0].Name != "pvc-a" || vs[1].ID != fixtureB || vs[1].Size != 2<<20 {
		t.Fatalf("ListVolumes = %+v, %v; want the fixture's pvc-a and pvc-b", vs, err)
	}
	as, err := s.Attachments(fixtureA)
	if err != nil || len(as) != 1 || as[0].Node != "node-1" || as[0].State != StateGranted || as[0].Epoch != 1 {
		t.Fatalf("pvc-a's attachments = %+v, %v; want node-1 granted at epoch 1", as, err)
	}
	as, err = s.Attachments(fixtureB)
	if err != nil || len(as) != 1 || as[0].Node != "node-2" || as[0].State != StateFenced || as[0].Epoch != 2 {
		t.Fatalf("pvc-b's attachments = %+v, %v; want node-2 fenced at epoch 2", as, err)
	}
	if err := s.WriteAt(fixtureA, "node-1", 1, 0, []byte("v1")); err != nil {
		t.Fatalf("write under the fixture's grant: %v", err)
	}
	if fs, err := s.FailedVolumes(); err != nil || len(fs) != 0 {
		t.Fatalf("FailedVolumes = %+v, %v; a v1 file has none", fs, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := recordedVersion(t, dir); v != "1" {
		t.Fatalf("recorded format version %q after opening, want 1", v)
	}
}

func recordedVersion(t *testing.T, dir string) string {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, dbFile), 0o600, nil)
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

// TestStore_Open_NewerFormatRefused: a datapath.db of a format newer than
// this binary knows is refused with a message naming the file, its version
// and the highest supported one, and the file is left as it was.
func TestStore_Open_NewerFormatRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	mustCreate(t, s, "pvc-1", 1<<20, AccessRWO)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if v := recordedVersion(t, dir); v != "1" {
		t.Fatalf("a new datapath.db records format version %q, want 1", v)
	}
	path := filepath.Join(dir, dbFile)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(boltformat.MetaBucket)).Put([]byte(boltformat.VersionKey), []byte("3")) // 2 is the format under a control group
	})
	if err != nil || db.Close() != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	_, err = Open(dir, Options{Capacity: 1 << 30})
	if !errors.Is(err, boltformat.ErrTooNew) {
		t.Fatalf("Open of a version 3 datapath.db: %v; want ErrTooNew", err)
	}
	for _, want := range []string{path, "version 3", "versions up to 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("the refused open changed datapath.db")
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, volumesDir)); len(entries) != 1 {
		t.Errorf("the refused open touched the volumes directory: %v", entries)
	}
}
