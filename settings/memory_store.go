package settings

import (
	"context"
	"maps"
	"slices"
	"sync"
)

// memoryStore is the in-memory twin of the persistent stores, for tests.
type memoryStore struct {
	mu       sync.Mutex
	values   map[string]string
	history  []ChangeRecord // oldest first, at most HistoryLimit
	closed   bool
	watchers watchers
}

// NewMemoryStore returns an empty Store that lives in memory. It behaves like the
// persistent stores (the conformance suite proves it) except that nothing survives
// the process.
func NewMemoryStore() Store {
	return &memoryStore{values: make(map[string]string)}
}

func (m *memoryStore) Get(_ context.Context, name string) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return "", false, ErrClosed
	}
	v, ok := m.values[name]
	return v, ok, nil
}

func (m *memoryStore) Set(_ context.Context, name, value string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if old, ok := m.values[name]; ok && old == value {
		return nil
	}
	m.values[name] = value
	// Broadcast under the lock so watchers see changes in the order they happened.
	m.watchers.broadcast(StoreEvent{Name: name, Value: value})
	return nil
}

func (m *memoryStore) Delete(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if _, ok := m.values[name]; !ok {
		return nil
	}
	delete(m.values, name)
	m.watchers.broadcast(StoreEvent{Name: name, Deleted: true})
	return nil
}

func (m *memoryStore) List(context.Context) (map[string]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	return maps.Clone(m.values), nil
}

func (m *memoryStore) Watch(ctx context.Context) (<-chan StoreEvent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	q, err := m.watchers.add(ctx)
	if err != nil {
		return nil, err
	}
	return q.out, nil
}

func (m *memoryStore) Update(_ context.Context, fn UpdateFunc) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	values := maps.Clone(m.values)
	records, err := fn(values, newestIn(m.history))
	if err != nil {
		return err
	}
	events := diff(m.values, values)
	m.values = values
	m.history = append(m.history, records...)
	if over := len(m.history) - HistoryLimit; over > 0 {
		m.history = slices.Delete(m.history, 0, over)
	}
	for _, ev := range events {
		m.watchers.broadcast(ev)
	}
	return nil
}

func (m *memoryStore) History(_ context.Context, limit int) ([]ChangeRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	return newestFirst(m.history, limit), nil
}

func (m *memoryStore) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.watchers.closeAll()
	return nil
}
