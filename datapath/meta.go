package datapath

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/vigil-storage/vigil/internal/boltformat"
)

// bbolt layout (datapath.db in the data directory):
//
//	volumes/<id>          -> volumeRecord (JSON)
//	names/<name>          -> <id>
//	attachments/<id>/<node> -> attachmentRecord (JSON)
//	leaving/<node>        -> leaveRecord (JSON)
//	failed/<id>           -> failureRecord (JSON): the volume's flush failed (failure.go)
//	meta/formatVersion    -> the on-disk format version, "1" (internal/boltformat)
//
// This layout is format version 1. A file from before versions were recorded
// is version 1 too (it has no failed bucket: no volume of it is failed). A
// datapath.db of a newer version is refused at Open, naming the file, its
// version and the highest this binary supports; docs/architecture.md says how
// a format change is migrated.
//
// Every Grant, Fence, Release, Create, Delete and Leave is one bbolt
// transaction (possibly shared with others, commit.go), synced before the call
// returns, so epochs, fences and announced stops survive a crash.
var (
	bucketVolumes     = []byte("volumes")
	bucketNames       = []byte("names")
	bucketAttachments = []byte("attachments")
	bucketLeaving     = []byte("leaving")
	bucketFailed      = []byte("failed")
)

// leaveRecord is a graceful stop a node announced (Leave).
type leaveRecord struct {
	// Until is when the announcement runs out.
	Until time.Time `json:"until"`
	// Announced is when the server received it.
	Announced time.Time `json:"announced"`
}

type volumeRecord struct {
	ID      string     `json:"id"`
	Name    string     `json:"name"`
	Size    int64      `json:"size"`
	Access  AccessMode `json:"access"`
	Created time.Time  `json:"created"`
	// Epoch is the highest epoch ever issued for the volume.
	Epoch uint64 `json:"epoch"`
}

func (r *volumeRecord) volume() Volume {
	return Volume{ID: r.ID, Name: r.Name, Size: r.Size, Access: r.Access, Created: r.Created}
}

type attachmentRecord struct {
	Epoch   uint64          `json:"epoch"`
	State   AttachmentState `json:"state"`
	Updated time.Time       `json:"updated"`
	// Use is what the grant allows. Records written before uses existed have
	// none, which means UseReadWrite (use()).
	Use GrantUse `json:"use,omitempty"`
}

// use is the record's grant use; an empty one, from a record written before
// uses existed, is read-write.
func (a attachmentRecord) use() GrantUse { return a.row().GrantedUse() }

// row is the record as the attachment rules see it (attachrules.go).
func (a attachmentRecord) row() AttachRow {
	return AttachRow{Epoch: a.Epoch, State: a.State, Use: a.Use}
}

// formatVersion is the on-disk format a Store without a Control writes
// (see above).
const formatVersion = 1

// controlledFormatVersion is datapath.db's format under a Control: the
// volumes, names, attachments and leaving buckets are gone (the control
// group holds what they held, imported from version 1 at the first Open
// with a Control); meta and failed remain. A binary that knows version 1
// only refuses it, so the release before cannot serve stale epochs from it.
const controlledFormatVersion = 2

// dbFormat is datapath.db's format at path for a Store without a Control.
func dbFormat(path string) boltformat.Format {
	return boltformat.Format{File: path, Current: formatVersion}
}

// controlledFormat is datapath.db's format under a Control; version 1 is
// migrated by dropping the buckets the control group took over (after they
// were imported).
func controlledFormat(path string) boltformat.Format {
	return boltformat.Format{File: path, Current: controlledFormatVersion, Migrate: map[uint64]func(*bolt.Tx) error{1: dropControlBuckets}}
}

func dropControlBuckets(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketVolumes, bucketNames, bucketAttachments, bucketLeaving} {
		if err := tx.DeleteBucket(b); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return fmt.Errorf("drop bucket %s: %w", b, err)
		}
	}
	return nil
}

// initBuckets checks the file's format version, before anything else
// touches it, then creates the buckets a new file lacks. A file whose
// control state moved to a control group is refused by name.
func initBuckets(db *bolt.DB) error {
	return db.Update(func(tx *bolt.Tx) error {
		if v, _, err := boltformat.Version(tx, db.Path()); err == nil && v == controlledFormatVersion {
			return fmt.Errorf("%w: %s has format version %d: its volumes, attachment tables and epochs are in the control group "+
				"(the raft directory), so the store must be opened with it (vigil-datapath serve does)", boltformat.ErrTooNew, db.Path(), v)
		}
		if _, err := dbFormat(db.Path()).Check(tx); err != nil {
			return err
		}
		for _, b := range [][]byte{bucketVolumes, bucketNames, bucketAttachments, bucketLeaving, bucketFailed} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		return nil
	})
}

// readV1 reads what a version 1 datapath.db holds for the control group:
// every volume with its table, and the announced stops. A new file holds
// none.
func readV1(db *bolt.DB) ([]loadedVolume, map[string]leaveRecord, error) {
	var (
		v1     bool
		leaves = map[string]leaveRecord{}
	)
	err := db.View(func(tx *bolt.Tx) error {
		v, _, err := boltformat.Version(tx, db.Path())
		if err != nil || v != 1 || tx.Bucket(bucketVolumes) == nil {
			return err
		}
		v1 = true
		if b := tx.Bucket(bucketLeaving); b != nil {
			return b.ForEach(func(k, v []byte) error {
				var r leaveRecord
				if err := json.Unmarshal(v, &r); err == nil { // an undecodable one is dropped, as a start of version 1 did
					leaves[string(k)] = r
				}
				return nil
			})
		}
		return nil
	})
	if err != nil || !v1 {
		return nil, nil, err
	}
	loaded, err := loadAll(db)
	if err != nil {
		return nil, nil, fmt.Errorf("%s is damaged: %w", db.Path(), err)
	}
	return loaded, leaves, nil
}

// readFailures reads the failed bucket (format 2).
func readFailures(db *bolt.DB) (map[string]*failureRecord, error) {
	out := map[string]*failureRecord{}
	err := db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketFailed).ForEach(func(k, v []byte) error {
			f := new(failureRecord)
			if err := json.Unmarshal(v, f); err != nil {
				return fmt.Errorf("failure of volume %s: %w", k, err)
			}
			out[string(k)] = f
			return nil
		})
	})
	return out, err
}

func putJSON(b *bolt.Bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), data)
}

// putVolume stores the volume record and its name index.
func putVolume(tx *bolt.Tx, r volumeRecord) error {
	if err := putJSON(tx.Bucket(bucketVolumes), r.ID, r); err != nil {
		return fmt.Errorf("store volume %s: %w", r.ID, err)
	}
	return tx.Bucket(bucketNames).Put([]byte(r.Name), []byte(r.ID))
}

// putAttachment stores one attachment row and the volume record (whose epoch
// may have moved) in the caller's transaction.
func putAttachment(tx *bolt.Tx, r volumeRecord, node string, a attachmentRecord) error {
	if err := putJSON(tx.Bucket(bucketVolumes), r.ID, r); err != nil {
		return fmt.Errorf("store volume %s: %w", r.ID, err)
	}
	b, err := tx.Bucket(bucketAttachments).CreateBucketIfNotExists([]byte(r.ID))
	if err != nil {
		return fmt.Errorf("attachments of volume %s: %w", r.ID, err)
	}
	if err := putJSON(b, node, a); err != nil {
		return fmt.Errorf("store attachment %s/%s: %w", r.ID, node, err)
	}
	return nil
}

func putFailure(tx *bolt.Tx, id string, f failureRecord) error {
	if err := putJSON(tx.Bucket(bucketFailed), id, f); err != nil {
		return fmt.Errorf("store failure of volume %s: %w", id, err)
	}
	return nil
}

func deleteFailure(tx *bolt.Tx, id string) error { return tx.Bucket(bucketFailed).Delete([]byte(id)) }

func deleteVolume(tx *bolt.Tx, r volumeRecord) error {
	if err := tx.Bucket(bucketVolumes).Delete([]byte(r.ID)); err != nil {
		return err
	}
	if err := deleteFailure(tx, r.ID); err != nil {
		return err
	}
	if err := tx.Bucket(bucketNames).Delete([]byte(r.Name)); err != nil {
		return err
	}
	err := tx.Bucket(bucketAttachments).DeleteBucket([]byte(r.ID))
	if err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
		return err
	}
	return nil
}

// loadedVolume is a volume as read back at startup.
type loadedVolume struct {
	rec    volumeRecord
	attach map[string]attachmentRecord
	failed *failureRecord
}

func loadAll(db *bolt.DB) ([]loadedVolume, error) {
	var out []loadedVolume
	err := db.View(func(tx *bolt.Tx) error {
		att, failed := tx.Bucket(bucketAttachments), tx.Bucket(bucketFailed)
		return tx.Bucket(bucketVolumes).ForEach(func(k, v []byte) error {
			lv := loadedVolume{attach: map[string]attachmentRecord{}}
			if err := json.Unmarshal(v, &lv.rec); err != nil {
				return fmt.Errorf("volume record %s: %w", k, err)
			}
			if lv.rec.ID != string(k) {
				return fmt.Errorf("volume record under key %s has id %s", k, lv.rec.ID)
			}
			if b := att.Bucket(k); b != nil {
				err := b.ForEach(func(node, v []byte) error {
					var a attachmentRecord
					if err := json.Unmarshal(v, &a); err != nil {
						return fmt.Errorf("attachment %s/%s: %w", k, node, err)
					}
					if a.Epoch > lv.rec.Epoch {
						return fmt.Errorf("attachment %s/%s has epoch %d above the volume's %d", k, node, a.Epoch, lv.rec.Epoch)
					}
					lv.attach[string(node)] = a
					return nil
				})
				if err != nil {
					return err
				}
			}
			if failed == nil { // a file from before versions were recorded
				out = append(out, lv)
				return nil
			}
			if v := failed.Get(k); v != nil {
				lv.failed = new(failureRecord)
				if err := json.Unmarshal(v, lv.failed); err != nil {
					return fmt.Errorf("failure of volume %s: %w", k, err)
				}
			}
			out = append(out, lv)
			return nil
		})
	})
	return out, err
}
