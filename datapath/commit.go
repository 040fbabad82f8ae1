package datapath

import (
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"
)

// groupCommit commits bbolt updates with group commit: an update that arrives
// while a commit is running waits for it and then goes, together with every
// other update that arrived meanwhile, into the next transaction. A lone
// update is committed at once (no batching delay, unlike bolt.DB.Batch), and a
// node that dies holding many volumes is fenced from all of them in a few
// fsyncs instead of one pair per volume.
type groupCommit struct {
	db      *bolt.DB
	mu      sync.Mutex
	pending []*commitReq
	running bool
	// txs counts the transactions committed (benchmarks report it per call).
	txs atomic.Int64
}

type commitReq struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// update runs fn in a committed, synced transaction, possibly shared with other
// callers' functions. fn may run more than once (if a shared transaction fails,
// each function is retried alone), so it must only write.
func (g *groupCommit) update(fn func(*bolt.Tx) error) error {
	req := &commitReq{fn: fn, done: make(chan error, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, req)
	if g.running {
		g.mu.Unlock()
		return <-req.done
	}
	g.running = true
	g.mu.Unlock()
	// This caller leads: commit batches until none is left.
	for {
		g.mu.Lock()
		batch := g.pending
		g.pending = nil
		if len(batch) == 0 {
			g.running = false
			g.mu.Unlock()
			break
		}
		g.mu.Unlock()
		g.commit(batch)
	}
	return <-req.done
}

func (g *groupCommit) commit(batch []*commitReq) {
	g.txs.Add(1)
	err := g.db.Update(func(tx *bolt.Tx) error {
		for _, r := range batch {
			if err := r.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(batch) == 1 {
		for _, r := range batch {
			r.done <- err
		}
		return
	}
	// One function failed the shared transaction: give each its own.
	for _, r := range batch {
		g.txs.Add(1)
		r.done <- g.db.Update(r.fn)
	}
}
