package boltformat

import (
	"errors"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// The bucket and key that hold a file's format version.
const (
	MetaBucket = "meta"
	VersionKey = "formatVersion"
)

// Legacy is the version of a file that records none: the format written
// before versions were recorded.
const Legacy = 1

var (
	// ErrTooNew: the file's format is newer than this binary knows.
	ErrTooNew = errors.New("on-disk format newer than this binary knows")
	// ErrBadVersion: the recorded version is not a version at all, or there
	// is no migration from it.
	ErrBadVersion = errors.New("bad on-disk format version")
)

// Format is one kind of file's format as this binary knows it.
type Format struct {
	// File names the file in messages (its path).
	File string
	// Current is the version this binary writes, 1 or more.
	Current uint64
	// Migrate[v] turns a file of version v into version v+1, for every v
	// from Legacy up to Current-1. It runs in Check's transaction.
	Migrate map[uint64]func(*bolt.Tx) error
}

// Check brings the file open in tx to f.Current (see the package doc) and
// returns the version it found. tx must be writable. On an error, the caller
// rolls tx back, and the file is as it was.
func (f Format) Check(tx *bolt.Tx) (found uint64, err error) {
	if f.Current < Legacy {
		return 0, fmt.Errorf("%w: %s: this binary's version %d is below %d", ErrBadVersion, f.File, f.Current, Legacy)
	}
	found, recorded, err := f.read(tx)
	if err != nil {
		return 0, err
	}
	if !recorded && isNew(tx) {
		return f.Current, f.write(tx)
	}
	if found > f.Current {
		return found, fmt.Errorf("%w: %s has on-disk format version %d, and this binary supports versions up to %d: "+
			"a newer Vigil wrote it; run that version or a later one against it (it cannot be downgraded)",
			ErrTooNew, f.File, found, f.Current)
	}
	for v := found; v < f.Current; v++ {
		m := f.Migrate[v]
		if m == nil {
			return found, fmt.Errorf("%w: %s has on-disk format version %d, and this binary has no migration from it to version %d",
				ErrBadVersion, f.File, v, v+1)
		}
		if err := m(tx); err != nil {
			return found, fmt.Errorf("%s: migrate the on-disk format from version %d to %d: %w", f.File, v, v+1, err)
		}
	}
	if recorded && found == f.Current {
		return found, nil
	}
	return found, f.write(tx)
}

// read returns the recorded version, or Legacy and false when there is none.
func (f Format) read(tx *bolt.Tx) (uint64, bool, error) {
	b := tx.Bucket([]byte(MetaBucket))
	if b == nil || b.Get([]byte(VersionKey)) == nil {
		return Legacy, false, nil
	}
	raw := b.Get([]byte(VersionKey))
	v, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil || v < Legacy {
		return 0, false, fmt.Errorf("%w: %s records on-disk format version %q; a version is a whole number from %d",
			ErrBadVersion, f.File, raw, Legacy)
	}
	return v, true, nil
}

func (f Format) write(tx *bolt.Tx) error {
	b, err := tx.CreateBucketIfNotExists([]byte(MetaBucket))
	if err != nil {
		return fmt.Errorf("%s: meta bucket: %w", f.File, err)
	}
	if err := b.Put([]byte(VersionKey), []byte(strconv.FormatUint(f.Current, 10))); err != nil {
		return fmt.Errorf("%s: record on-disk format version %d: %w", f.File, f.Current, err)
	}
	return nil
}

// isNew reports whether the file holds no bucket at all: it was just created.
func isNew(tx *bolt.Tx) bool {
	empty := true
	_ = tx.ForEach(func([]byte, *bolt.Bucket) error {
		empty = false
		return errStop
	})
	return empty
}

var errStop = errors.New("stop")

// Version reads the version recorded in the file open in tx (named file in
// errors): Legacy and false when it records none.
func Version(tx *bolt.Tx, file string) (v uint64, recorded bool, err error) {
	return Format{File: file}.read(tx)
}
