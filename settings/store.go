package settings

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// Store persists raw setting values, one string per name, and the history of
// their changes. Stores do not validate: Settings parses every value it reads and
// refuses bad ones, because a store can be edited behind Vigil's back (a
// ConfigMap by kubectl, a bolt file by another process). Every method is safe for
// concurrent use.
//
// Implementations: NewMemoryStore (tests), OpenBolt (a file; the default),
// NewConfigMapStore (a Kubernetes ConfigMap). settings/settingstest holds the
// conformance suite they all pass.
type Store interface {
	// Get returns the value of name and whether it is set.
	Get(ctx context.Context, name string) (value string, ok bool, err error)
	// Set stores value under name.
	Set(ctx context.Context, name, value string) error
	// Delete removes name; deleting an absent name is not an error.
	Delete(ctx context.Context, name string) error
	// List returns every stored name and value.
	List(ctx context.Context) (map[string]string, error)
	// Watch reports changes made after it returns, by this process or another,
	// without polling, until ctx is done or the store is closed; then the channel
	// is closed. Events are never dropped and a slow reader never blocks writers.
	// Each event carries the value at the time the change was observed: several
	// quick writes to one name made by another process may arrive as one event
	// with the last value, never as a stale value.
	Watch(ctx context.Context) (<-chan StoreEvent, error)
	// Update runs fn on a copy of every stored value and then, unless fn returns
	// an error, stores what fn left in the map (changed and new names set,
	// missing names deleted) and appends the records fn returned to the
	// history, all at once: no reader, watcher or other process sees part of it.
	// fn may run more than once (a store that retries after a conflict) and
	// must have no effect outside its return values; its error is returned as
	// is and changes nothing. Watchers see one event per name changed.
	Update(ctx context.Context, fn UpdateFunc) error
	// History returns up to limit records (limit <= 0: all), newest first, in
	// the order Update committed them. A store keeps at most HistoryLimit
	// records; the oldest are dropped.
	History(ctx context.Context, limit int) ([]ChangeRecord, error)
	// Close releases the store; watches end. Closing twice is harmless.
	Close() error
}

// newestIn returns the newest record of records (oldest first) that match
// accepts.
func newestIn(records []ChangeRecord) func(func(ChangeRecord) bool) (ChangeRecord, bool) {
	return func(match func(ChangeRecord) bool) (ChangeRecord, bool) {
		for i := len(records) - 1; i >= 0; i-- {
			if match(records[i]) {
				return records[i], true
			}
		}
		return ChangeRecord{}, false
	}
}

// newestFirst returns up to limit (<= 0: all) of records (oldest first), newest
// first, as a new slice.
func newestFirst(records []ChangeRecord, limit int) []ChangeRecord {
	n := len(records)
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]ChangeRecord, 0, n)
	for i := len(records) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, records[i])
	}
	return out
}

// StoreEvent is one change seen by Store.Watch.
type StoreEvent struct {
	Name    string
	Value   string // the new value; "" when Deleted
	Deleted bool
}

// queue is an unbounded FIFO feeding a channel: push never blocks, the consumer
// sees every item in order. close ends the channel after pending items are
// delivered, or at once if done is closed (nobody is reading any more).
type queue[T any] struct {
	mu      sync.Mutex
	items   []T
	closed  bool
	wake    chan struct{}
	out     chan T
	done    <-chan struct{}
	stopped chan struct{}
}

func newQueue[T any](done <-chan struct{}) *queue[T] {
	q := &queue[T]{wake: make(chan struct{}, 1), out: make(chan T), done: done, stopped: make(chan struct{})}
	go q.run()
	return q
}

func (q *queue[T]) push(v T) {
	q.mu.Lock()
	if !q.closed {
		q.items = append(q.items, v)
	}
	q.mu.Unlock()
	q.signal()
}

func (q *queue[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *queue[T]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue[T]) run() {
	defer close(q.stopped)
	defer close(q.out)
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			closed := q.closed
			q.mu.Unlock()
			if closed {
				return
			}
			select {
			case <-q.wake:
				continue
			case <-q.done:
				return
			}
		}
		next := q.items[0]
		q.items = q.items[1:]
		q.mu.Unlock()
		select {
		case q.out <- next:
		case <-q.done:
			return
		}
	}
}

// watchers is the set of live watches of a store, each with its queue.
type watchers struct {
	mu     sync.Mutex
	set    map[*queue[StoreEvent]]struct{}
	closed bool
}

// add registers a watch that ends when ctx is done or the set is closed.
func (w *watchers) add(ctx context.Context) (*queue[StoreEvent], error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, ErrClosed
	}
	if w.set == nil {
		w.set = make(map[*queue[StoreEvent]]struct{})
	}
	q := newQueue[StoreEvent](ctx.Done())
	w.set[q] = struct{}{}
	context.AfterFunc(ctx, func() { w.remove(q) })
	return q, nil
}

func (w *watchers) remove(q *queue[StoreEvent]) {
	w.mu.Lock()
	delete(w.set, q)
	w.mu.Unlock()
	q.close()
}

func (w *watchers) broadcast(ev StoreEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for q := range w.set {
		q.push(ev)
	}
}

// closeAll ends every watch and refuses new ones.
func (w *watchers) closeAll() {
	w.mu.Lock()
	w.closed = true
	set := w.set
	w.set = nil
	w.mu.Unlock()
	for q := range set {
		q.close()
	}
}

// sortedNames returns the keys of m in order.
func sortedNames(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
