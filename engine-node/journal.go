package enginenode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/vigil-storage/vigil/internal/boltformat"
)

// Phase is where a stage or publish stands. A record is written in its
// in-progress phase before the first side effect, so a process killed half-way
// leaves a record that recovery can roll back.
type Phase string

const (
	// PhaseStaging: stage began; the FUSE disk, loop device or mount may exist.
	PhaseStaging Phase = "staging"
	// PhaseStaged: the volume is served at its staging path.
	PhaseStaged Phase = "staged"
	// PhaseUnstaging: unstage began; some layers may be gone.
	PhaseUnstaging Phase = "unstaging"
	// PhasePublishing: the bind mount may or may not exist yet.
	PhasePublishing Phase = "publishing"
	// PhasePublished: the target path is bind-mounted.
	PhasePublished Phase = "published"
)

// StageRecord is what the journal knows about one staged volume.
type StageRecord struct {
	VolumeID    string   `json:"volumeID"`
	StagingPath string   `json:"stagingPath"`
	Block       bool     `json:"block"`
	FsType      string   `json:"fsType,omitempty"`
	MountFlags  []string `json:"mountFlags,omitempty"`
	// ReadOnly: staged for a reader mode; the filesystem is mounted
	// read-only and never formatted. Absent in older records: read-write.
	ReadOnly   bool      `json:"readOnly,omitempty"`
	Epoch      uint64    `json:"epoch"`
	Size       int64     `json:"size"`
	DiskDir    string    `json:"diskDir"`
	LoopDevice string    `json:"loopDevice,omitempty"`
	Phase      Phase     `json:"phase"`
	Updated    time.Time `json:"updated"`
	// Boot is the boot id of the run that last wrote the record; "" in a
	// record written before the journal kept it (of the journal's boot).
	Boot string `json:"boot,omitempty"`
}

// PublishRecord is what the journal knows about one published target path.
type PublishRecord struct {
	VolumeID     string    `json:"volumeID"`
	TargetPath   string    `json:"targetPath"`
	StagingPath  string    `json:"stagingPath"`
	Block        bool      `json:"block"`
	Readonly     bool      `json:"readonly"`
	PodUID       string    `json:"podUID,omitempty"`
	PodName      string    `json:"podName,omitempty"`
	PodNamespace string    `json:"podNamespace,omitempty"`
	Phase        Phase     `json:"phase"`
	Updated      time.Time `json:"updated"`
	// Boot: as StageRecord.Boot.
	Boot string `json:"boot,omitempty"`
}

var (
	bucketMeta      = []byte("meta")
	bucketStages    = []byte("stages")
	bucketPublishes = []byte("publishes")
	keyBootID       = []byte("bootID")
)

// JournalFile is the journal's file name inside the state directory.
const JournalFile = "journal.db"

// Journal is the node's bbolt journal of stages and publishes.
type Journal struct {
	db   *bolt.DB
	boot string // this run's boot id, written into every record
}

// OpenJournal opens (creating) the journal in stateDir for a run in boot
// bootID. It reports the boot id recorded before, "" for a new journal: a
// different value means the node rebooted since that boot id was recorded.
//
// A new journal records bootID at once. After a reboot the recorded boot id
// stays until RecordBoot, which the caller calls once nothing of the earlier
// boots is left in the journal: a cleanup after a reboot that fails is
// retried by the next start, which sees the reboot again.
func OpenJournal(stateDir, bootID string) (*Journal, string, error) {
	if bootID == "" {
		return nil, "", fmt.Errorf("open journal in %s: %w", stateDir, ErrEmptyBootID)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, "", fmt.Errorf("open journal: %w", err)
	}
	path := filepath.Join(stateDir, JournalFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, "", fmt.Errorf("open journal %s: %w", path, err)
	}
	var previous string
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := journalFormat(path).Check(tx); err != nil {
			return err
		}
		for _, b := range [][]byte{bucketMeta, bucketStages, bucketPublishes} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		previous = string(meta.Get(keyBootID))
		if previous == "" {
			return meta.Put(keyBootID, []byte(bootID))
		}
		return nil
	})
	if errors.Is(err, boltformat.ErrTooNew) || errors.Is(err, boltformat.ErrBadVersion) {
		db.Close()
		return nil, "", fmt.Errorf("open journal: %w", err)
	}
	if err != nil {
		db.Close()
		return nil, "", fmt.Errorf("open journal %s: %w", path, err)
	}
	return &Journal{db: db, boot: bootID}, previous, nil
}

// journalFormatVersion is the journal's on-disk format: the buckets meta
// (bootID, formatVersion), stages (volume id -> StageRecord as JSON) and
// publishes (target path -> PublishRecord as JSON). A journal from before
// versions were recorded is version 1 too; a newer one is refused at
// OpenJournal, naming the file, its version and the highest this binary
// supports (internal/boltformat).
const journalFormatVersion = 1

func journalFormat(path string) boltformat.Format {
	return boltformat.Format{File: path, Current: journalFormatVersion}
}

// RecordBoot records this run's boot id as the journal's: from now on a start
// in the same boot is a restart, not a reboot.
func (j *Journal) RecordBoot() error {
	err := j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyBootID, []byte(j.boot)) })
	if err != nil {
		return fmt.Errorf("journal: record boot id %s: %w", j.boot, err)
	}
	return nil
}

// RecordedBoot is the boot id the journal holds (see OpenJournal).
func (j *Journal) RecordedBoot() (string, error) {
	var id string
	err := j.db.View(func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bucketMeta).Get(keyBootID))
		return nil
	})
	return id, err
}

// Close closes the journal.
func (j *Journal) Close() error { return j.db.Close() }

// PutStage writes r, keyed by volume id, as a record of this boot.
func (j *Journal) PutStage(r StageRecord) error {
	r.Updated, r.Boot = time.Now().UTC(), j.boot
	return j.put(bucketStages, r.VolumeID, r)
}

// PutPublish writes r, keyed by target path, as a record of this boot.
func (j *Journal) PutPublish(r PublishRecord) error {
	r.Updated, r.Boot = time.Now().UTC(), j.boot
	return j.put(bucketPublishes, r.TargetPath, r)
}

// Stage returns the record of volumeID and whether there is one.
func (j *Journal) Stage(volumeID string) (StageRecord, bool, error) {
	var r StageRecord
	ok, err := j.get(bucketStages, volumeID, &r)
	return r, ok, err
}

// Publish returns the record of targetPath and whether there is one.
func (j *Journal) Publish(targetPath string) (PublishRecord, bool, error) {
	var r PublishRecord
	ok, err := j.get(bucketPublishes, targetPath, &r)
	return r, ok, err
}

// DeleteStage forgets volumeID's stage.
func (j *Journal) DeleteStage(volumeID string) error { return j.del(bucketStages, volumeID) }

// DeletePublish forgets targetPath's publish.
func (j *Journal) DeletePublish(targetPath string) error { return j.del(bucketPublishes, targetPath) }

// Stages lists every stage record, by volume id.
func (j *Journal) Stages() ([]StageRecord, error) {
	var out []StageRecord
	err := j.each(bucketStages, func(v []byte) error {
		var r StageRecord
		if err := json.Unmarshal(v, &r); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// Publishes lists every publish record, by target path.
func (j *Journal) Publishes() ([]PublishRecord, error) {
	var out []PublishRecord
	err := j.each(bucketPublishes, func(v []byte) error {
		var r PublishRecord
		if err := json.Unmarshal(v, &r); err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// PublishesOf lists the publish records of volumeID.
func (j *Journal) PublishesOf(volumeID string) ([]PublishRecord, error) {
	all, err := j.Publishes()
	if err != nil {
		return nil, err
	}
	var out []PublishRecord
	for _, r := range all {
		if r.VolumeID == volumeID {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].TargetPath < out[b].TargetPath })
	return out, nil
}

func (j *Journal) put(bucket []byte, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	err = j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Put([]byte(key), data) })
	if err != nil {
		return fmt.Errorf("journal: write %s %q: %w", bucket, key, err)
	}
	return nil
}

func (j *Journal) get(bucket []byte, key string, v any) (bool, error) {
	var data []byte
	err := j.db.View(func(tx *bolt.Tx) error {
		if d := tx.Bucket(bucket).Get([]byte(key)); d != nil {
			data = append([]byte(nil), d...)
		}
		return nil
	})
	if err != nil || data == nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("journal: read %s %q: %w", bucket, key, err)
	}
	return true, nil
}

func (j *Journal) del(bucket []byte, key string) error {
	err := j.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucket).Delete([]byte(key)) })
	if err != nil {
		return fmt.Errorf("journal: delete %s %q: %w", bucket, key, err)
	}
	return nil
}

func (j *Journal) each(bucket []byte, fn func(v []byte) error) error {
	return j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(_, v []byte) error { return fn(v) })
	})
}

// ReadBootID reads the boot id from path (normally /proc/sys/kernel/random/boot_id).
func ReadBootID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	id := string(bytes.TrimSpace(b))
	if id == "" {
		return "", fmt.Errorf("read boot id from %s: %w", path, ErrEmptyBootID)
	}
	return id, nil
}
