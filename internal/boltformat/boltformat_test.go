package boltformat_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/vigil-storage/vigil/internal/boltformat"
)

// setup is what a file holds before Check: a version ("" for none) and
// whether it has data of its own (a bucket "data").
type setup struct {
	version string
	data    bool
}

func open(t *testing.T, s setup) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "x.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	err = db.Update(func(tx *bolt.Tx) error {
		if s.data {
			if _, err := tx.CreateBucket([]byte("data")); err != nil {
				return err
			}
		}
		if s.version != "" {
			b, err := tx.CreateBucketIfNotExists([]byte(boltformat.MetaBucket))
			if err != nil {
				return err
			}
			return b.Put([]byte(boltformat.VersionKey), []byte(s.version))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestFormat_Check is the specification: what Check does with each kind of
// file, for a binary that writes version 3 and migrates 1→2 and 2→3.
func TestFormat_Check(t *testing.T) {
	for _, tc := range []struct {
		name      string
		file      setup
		found     uint64
		err       error
		want      []string // words of the error
		migrated  string   // the migrations that ran, in order
		recorded  string   // the version recorded after Check
		unchanged bool
	}{
		{name: "new file", file: setup{}, found: 3, recorded: "3"},
		{name: "file from before versions", file: setup{data: true}, found: 1, migrated: "1→2 2→3 ", recorded: "3"},
		{name: "older version", file: setup{version: "2", data: true}, found: 2, migrated: "2→3 ", recorded: "3"},
		{name: "current version", file: setup{version: "3", data: true}, found: 3, recorded: "3"},
		{name: "newer version", file: setup{version: "4", data: true}, found: 4, err: boltformat.ErrTooNew,
			want: []string{"x.db", "version 4", "up to 3"}, recorded: "4"},
		{name: "not a number", file: setup{version: "v2", data: true}, err: boltformat.ErrBadVersion, want: []string{"x.db", `"v2"`}, recorded: "v2"},
		{name: "zero", file: setup{version: "0", data: true}, err: boltformat.ErrBadVersion, want: []string{`"0"`}, recorded: "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := open(t, tc.file)
			var migrated strings.Builder
			step := func(from string) func(*bolt.Tx) error {
				return func(*bolt.Tx) error { migrated.WriteString(from + " "); return nil }
			}
			f := boltformat.Format{File: db.Path(), Current: 3, Migrate: map[uint64]func(*bolt.Tx) error{1: step("1→2"), 2: step("2→3")}}
			var found uint64
			err := db.Update(func(tx *bolt.Tx) (err error) { found, err = f.Check(tx); return err })
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("Check: %v; want %v", err, tc.err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.err == nil && found != tc.found {
				t.Errorf("found version %d, want %d", found, tc.found)
			}
			if migrated.String() != tc.migrated {
				t.Errorf("migrations run %q, want %q", migrated.String(), tc.migrated)
			}
			var got string
			_ = db.View(func(tx *bolt.Tx) error {
				if b := tx.Bucket([]byte(boltformat.MetaBucket)); b != nil {
					got = string(b.Get([]byte(boltformat.VersionKey)))
				}
				return nil
			})
			if got != tc.recorded {
				t.Errorf("recorded version %q, want %q", got, tc.recorded)
			}
		})
	}
}

func TestFormat_Check_MissingOrFailedMigration(t *testing.T) {
	db := open(t, setup{version: "1", data: true})
	f := boltformat.Format{File: "x.db", Current: 3, Migrate: map[uint64]func(*bolt.Tx) error{
		1: func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("new")); return err },
	}}
	err := db.Update(func(tx *bolt.Tx) error { _, err := f.Check(tx); return err })
	if !errors.Is(err, boltformat.ErrBadVersion) || !strings.Contains(err.Error(), "no migration from it to version 3") {
		t.Fatalf("Check without a 2→3 migration: %v", err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("new")) != nil {
			t.Error("the 1→2 migration stayed although the transaction failed")
		}
		v, recorded, err := boltformat.Version(tx, "x.db")
		if v != 1 || !recorded || err != nil {
			t.Errorf("Version = %d, %v, %v; want 1 recorded", v, recorded, err)
		}
		return nil
	})
	f.Migrate[2] = func(*bolt.Tx) error { return errors.New("disk on fire") }
	err = db.Update(func(tx *bolt.Tx) error { _, err := f.Check(tx); return err })
	if err == nil || !strings.Contains(err.Error(), "from version 2 to 3: disk on fire") {
		t.Fatalf("failing migration: %v", err)
	}
}
