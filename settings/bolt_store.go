package settings

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// DefaultBoltLockTimeout is how long a bolt store operation waits for another
// process holding the file before it fails with ErrStoreUnavailable.
const DefaultBoltLockTimeout = 5 * time.Second

var (
	settingsBucket = []byte("settings")
	// historyBucket holds the change records: keys are the bucket's sequence
	// numbers (8 bytes, big-endian, so in commit order), values JSON.
	historyBucket = []byte("history")
)

// errNoChange rolls back an Update that changed nothing, so the file is not
// written (and its watchers are not woken) for nothing.
var errNoChange = errors.New("no change")

// boltStore keeps settings in one bbolt file. bbolt holds an exclusive flock while
// a database is open for writing, so the file is opened per operation (with a lock
// timeout) and closed again: any number of processes can share it, their writes
// serialized by the lock. Within a process, a per-file RWMutex spares goroutines
// the lock's retry loop.
type boltStore struct {
	path        string
	lockTimeout time.Duration
	local       *sync.RWMutex

	mu       sync.Mutex
	closed   bool
	wakes    map[chan struct{}]struct{}
	watchers watchers
	wg       sync.WaitGroup
}

// BoltOption configures OpenBolt.
type BoltOption func(*boltStore)

// WithLockTimeout sets how long an operation waits for the file's lock held by
// another process; DefaultBoltLockTimeout otherwise.
func WithLockTimeout(d time.Duration) BoltOption {
	return func(b *boltStore) { b.lockTimeout = d }
}

// fileLocks maps an absolute path to the RWMutex all bolt stores of this process
// over that file share.
var fileLocks sync.Map

// OpenBolt opens (creating it and its directory if needed) the bolt file at path.
// It checks that the file is a usable bolt database, then releases it: the file
// is opened again for each operation, so other processes can use it meanwhile.
func OpenBolt(path string, opts ...BoltOption) (Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("settings file %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("settings file %s: %w", abs, err)
	}
	lock, _ := fileLocks.LoadOrStore(abs, new(sync.RWMutex))
	b := &boltStore{path: abs, lockTimeout: DefaultBoltLockTimeout, local: lock.(*sync.RWMutex),
		wakes: make(map[chan struct{}]struct{})}
	for _, o := range opts {
		o(b)
	}
	err = b.update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(settingsBucket)
		return err
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// open opens the file for one operation; the caller closes it.
func (b *boltStore) open(readOnly bool) (*bolt.DB, error) {
	db, err := bolt.Open(b.path, 0o600, &bolt.Options{Timeout: b.lockTimeout, ReadOnly: readOnly})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("settings file %s: locked by another process for more than %s: %w", b.path, b.lockTimeout, ErrStoreUnavailable)
	}
	if err != nil {
		return nil, fmt.Errorf("settings file %s: %w", b.path, err)
	}
	return db, nil
}

func (b *boltStore) checkOpen() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	return nil
}

func (b *boltStore) update(fn func(*bolt.Tx) error) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	b.local.Lock()
	defer b.local.Unlock()
	db, err := b.open(false)
	if err != nil {
		return err
	}
	if err := db.Update(fn); err != nil {
		_ = db.Close()
		return fmt.Errorf("settings file %s: %w", b.path, err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("settings file %s: %w", b.path, err)
	}
	return nil
}

func (b *boltStore) view(fn func(*bolt.Bucket) error) error {
	return b.viewTx(func(tx *bolt.Tx) error {
		bk := tx.Bucket(settingsBucket)
		if bk == nil {
			return fmt.Errorf("settings file %s: no %q bucket: not a settings file", b.path, settingsBucket)
		}
		return fn(bk)
	})
}

func (b *boltStore) viewTx(fn func(*bolt.Tx) error) error {
	if err := b.checkOpen(); err != nil {
		return err
	}
	b.local.RLock()
	defer b.local.RUnlock()
	db, err := b.open(true)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(fn)
}

func (b *boltStore) Get(_ context.Context, name string) (string, bool, error) {
	var (
		v  string
		ok bool
	)
	err := b.view(func(bk *bolt.Bucket) error {
		raw := bk.Get([]byte(name))
		v, ok = string(raw), raw != nil
		return nil
	})
	return v, ok, err
}

func (b *boltStore) Set(_ context.Context, name, value string) error {
	changed := false
	err := b.update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(settingsBucket)
		if err != nil {
			return err
		}
		if old := bk.Get([]byte(name)); old != nil && string(old) == value {
			return nil
		}
		changed = true
		return bk.Put([]byte(name), []byte(value))
	})
	if changed {
		b.wakeAll()
	}
	return err
}

func (b *boltStore) Delete(_ context.Context, name string) error {
	changed := false
	err := b.update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(settingsBucket)
		if err != nil {
			return err
		}
		if bk.Get([]byte(name)) == nil {
			return nil
		}
		changed = true
		return bk.Delete([]byte(name))
	})
	if changed {
		b.wakeAll()
	}
	return err
}

func (b *boltStore) List(context.Context) (map[string]string, error) {
	out := make(map[string]string)
	err := b.view(func(bk *bolt.Bucket) error {
		return bk.ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Update is one bbolt write transaction: the values and the records commit
// together or not at all.
func (b *boltStore) Update(_ context.Context, fn UpdateFunc) error {
	var fnErr error
	changed := false
	err := b.update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucketIfNotExists(settingsBucket)
		if err != nil {
			return err
		}
		hb, err := tx.CreateBucketIfNotExists(historyBucket)
		if err != nil {
			return err
		}
		before := make(map[string]string)
		if err := bk.ForEach(func(k, v []byte) error { before[string(k)] = string(v); return nil }); err != nil {
			return err
		}
		values := maps.Clone(before)
		records, err := fn(values, boltNewest(hb))
		if err != nil {
			fnErr = err
			return err
		}
		events := diff(before, values)
		if len(events) == 0 && len(records) == 0 {
			return errNoChange
		}
		for _, ev := range events {
			if ev.Deleted {
				err = bk.Delete([]byte(ev.Name))
			} else {
				err = bk.Put([]byte(ev.Name), []byte(ev.Value))
			}
			if err != nil {
				return err
			}
		}
		changed = len(events) > 0
		return appendHistory(hb, records)
	})
	switch {
	case fnErr != nil:
		return fnErr
	case errors.Is(err, errNoChange):
		return nil
	case changed:
		b.wakeAll()
	}
	return err
}

// appendHistory adds records to hb and drops the oldest beyond HistoryLimit.
func appendHistory(hb *bolt.Bucket, records []ChangeRecord) error {
	for _, r := range records {
		seq, err := hb.NextSequence()
		if err != nil {
			return err
		}
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if err := hb.Put(binary.BigEndian.AppendUint64(nil, seq), data); err != nil {
			return err
		}
	}
	c := hb.Cursor()
	first, _ := c.First()
	last, _ := c.Last()
	if len(first) != 8 || len(last) != 8 {
		return nil // empty, or not keys this store wrote
	}
	lo, hi := binary.BigEndian.Uint64(first), binary.BigEndian.Uint64(last)
	for seq := lo; hi-seq+1 > HistoryLimit; seq++ { // keys are consecutive
		if err := hb.Delete(binary.BigEndian.AppendUint64(nil, seq)); err != nil {
			return err
		}
	}
	return nil
}

// boltNewest searches hb from its newest record back; a record that does not
// decode is skipped.
func boltNewest(hb *bolt.Bucket) func(func(ChangeRecord) bool) (ChangeRecord, bool) {
	return func(match func(ChangeRecord) bool) (ChangeRecord, bool) {
		c := hb.Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			var r ChangeRecord
			if json.Unmarshal(v, &r) == nil && match(r) {
				return r, true
			}
		}
		return ChangeRecord{}, false
	}
}

func (b *boltStore) History(_ context.Context, limit int) ([]ChangeRecord, error) {
	var out []ChangeRecord
	err := b.viewTx(func(tx *bolt.Tx) error {
		hb := tx.Bucket(historyBucket)
		if hb == nil {
			return nil // written before the history existed, or never changed
		}
		c := hb.Cursor()
		for k, v := c.Last(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Prev() {
			var r ChangeRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("settings file %s: history record %x: %w", b.path, k, err)
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Watch follows the file with fsnotify (writes by any process) and is woken
// directly by this store's own writes; after each wake it reads the file and
// reports the differences from what it saw before.
func (b *boltStore) Watch(ctx context.Context) (<-chan StoreEvent, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch settings file %s: %w", b.path, err)
	}
	if err := fw.Add(filepath.Dir(b.path)); err != nil {
		_ = fw.Close()
		return nil, fmt.Errorf("watch settings file %s: %w", b.path, err)
	}
	// The baseline is read after the watch is in place: no change falls between.
	seen, err := b.List(ctx)
	if err != nil {
		_ = fw.Close()
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		_ = fw.Close()
		return nil, ErrClosed
	}
	q, err := b.watchers.add(ctx)
	if err != nil {
		_ = fw.Close()
		return nil, err
	}
	wake := make(chan struct{}, 1)
	b.wakes[wake] = struct{}{}
	b.wg.Go(func() {
		defer b.dropWake(wake)
		defer fw.Close()
		b.follow(ctx, fw, wake, q, seen)
	})
	return q.out, nil
}

func (b *boltStore) follow(ctx context.Context, fw *fsnotify.Watcher, wake chan struct{}, q *queue[StoreEvent], seen map[string]string) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wake:
			if !ok {
				return // the store was closed
			}
		case ev, ok := <-fw.Events:
			if !ok {
				return
			}
			if filepath.Clean(ev.Name) != b.path {
				continue
			}
		case _, ok := <-fw.Errors:
			if !ok {
				return
			}
		}
		now, err := b.List(ctx)
		if err != nil {
			continue // locked or closing; the next event retries
		}
		for _, ev := range diff(seen, now) {
			q.push(ev)
		}
		seen = now
	}
}

// diff returns the events that turn before into after, in name order.
func diff(before, after map[string]string) []StoreEvent {
	var out []StoreEvent
	for _, name := range sortedKeys(before, after) {
		old, had := before[name]
		v, has := after[name]
		switch {
		case has && (!had || old != v):
			out = append(out, StoreEvent{Name: name, Value: v})
		case had && !has:
			out = append(out, StoreEvent{Name: name, Deleted: true})
		}
	}
	return out
}

func sortedKeys(ms ...map[string]string) []string {
	all := make(map[string]string)
	for _, m := range ms {
		maps.Copy(all, m)
	}
	return sortedNames(all)
}

func (b *boltStore) wakeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for w := range b.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

func (b *boltStore) dropWake(w chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.wakes, w)
}

// Close ends the watches; the file itself is already closed between operations.
func (b *boltStore) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for w := range b.wakes {
		close(w)
	}
	b.wakes = nil
	b.mu.Unlock()
	b.wg.Wait()
	b.watchers.closeAll()
	return nil
}
