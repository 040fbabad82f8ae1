package enginenode

import (
	"cmp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
)

// DefaultUnflushedBudget is how many bytes of acknowledged, unflushed writes
// the engine keeps per volume (`run --unflushed-write-budget`) before it
// flushes the volume on its own.
const DefaultUnflushedBudget = 64 << 20

// DefaultUnflushedNodeBudget is how many bytes of acknowledged, unflushed
// writes the engine keeps for all its volumes together (`run
// --unflushed-write-node-budget`): past it, the next write to any volume
// flushes that volume first, so the engine's memory stays bounded however
// many volumes the node stages.
const DefaultUnflushedNodeBudget = 512 << 20

// The ranges of --unflushed-write-budget and --unflushed-write-node-budget.
const (
	minUnflushedBudget     = 1 << 20
	maxUnflushedBudget     = 1 << 30
	maxUnflushedNodeBudget = 16 << 30
)

// unflushed keeps a copy of every write the datapath acknowledged and no
// flush has covered yet, with the boot id of the datapath machine that
// acknowledged it: the latest content per byte range (a newer write trims or
// replaces what it overlaps), so that writes a rebooted datapath machine lost
// can be sent again without ever putting older bytes over newer ones. Each
// write gets a sequence number in the order of the acknowledgements; a flush
// drops the entries acknowledged before it was sent, by the machine boot that
// did the flush. It is safe for concurrent use.
type unflushed struct {
	mu    sync.Mutex
	seq   uint64         // the last sequence number given
	ext   []*unflExt     // sorted by off, never overlapping
	bytes int64          // the memory the entries hold (capacity of their buffers)
	boots map[string]int // entries per boot id
	node  *atomic.Int64  // the bytes every volume of the node holds; nil: not counted
}

// unflExt is one acknowledged write, or what newer writes left of it.
type unflExt struct {
	off  int64
	data []byte
	seq  uint64
	boot string
}

func (e *unflExt) end() int64 { return e.off + int64(len(e.data)) }

// replayWrite is one entry to send again (a copy of its header; the data is
// shared and never changed in place).
type replayWrite struct {
	Off  int64
	Data []byte
	Seq  uint64
	Boot string
}

// newUnflushed keeps a volume's writes; node, if not nil, counts the bytes
// held by every volume of the node.
func newUnflushed(node *atomic.Int64) *unflushed {
	return &unflushed{boots: map[string]int{}, node: node}
}

// add records that the machine boot boot acknowledged p at off: p is copied,
// and what older entries held of [off, off+len(p)) is dropped. It returns the
// bytes now held. An acknowledgement without a boot id (a datapath that
// reports none) only drops the older bytes: it cannot be protected.
func (u *unflushed) add(off int64, p []byte, boot string) int64 {
	var data []byte
	if boot != "" && len(p) > 0 {
		data = slices.Clone(p) // outside the lock: writers copy side by side
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seq++
	end := off + int64(len(p))
	// The first entry that ends after off; entries from there that start
	// before end overlap the write.
	i := sort.Search(len(u.ext), func(i int) bool { return u.ext[i].end() > off })
	j := i
	var keep []*unflExt
	for ; j < len(u.ext) && u.ext[j].off < end; j++ {
		e := u.ext[j]
		u.remove(e)
		if e.off < off {
			keep = append(keep, u.piece(e, e.off, off))
		}
		if e.end() > end {
			keep = append(keep, u.piece(e, end, e.end()))
		}
	}
	if data != nil {
		n := &unflExt{off: off, data: data, seq: u.seq, boot: boot}
		u.count(n)
		// keep is sorted by off; the new entry goes between its pieces.
		at := sort.Search(len(keep), func(k int) bool { return keep[k].off >= end })
		keep = slices.Insert(keep, at, n)
	}
	u.ext = slices.Replace(u.ext, i, j, keep...)
	return u.bytes
}

// piece is what is left of e in [from, to); its buffer is copied when the
// piece would keep more than twice its size alive.
func (u *unflushed) piece(e *unflExt, from, to int64) *unflExt {
	d := e.data[from-e.off : to-e.off : to-e.off]
	if cap(e.data) > 2*len(d) {
		d = slices.Clone(d)
	}
	p := &unflExt{off: from, data: d, seq: e.seq, boot: e.boot}
	u.count(p)
	return p
}

func (u *unflushed) count(e *unflExt) {
	u.grow(int64(cap(e.data)))
	u.boots[e.boot]++
}

func (u *unflushed) remove(e *unflExt) {
	u.grow(-int64(cap(e.data)))
	if u.boots[e.boot]--; u.boots[e.boot] == 0 {
		delete(u.boots, e.boot)
	}
}

func (u *unflushed) grow(n int64) {
	u.bytes += n
	if u.node != nil {
		u.node.Add(n)
	}
}

// discard drops every entry: the volume's stack is gone (unstaged, or its
// stage failed), and what it kept no longer counts against the node.
func (u *unflushed) discard() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.dropIf(func(*unflExt) bool { return true })
}

// last is the sequence number of the latest acknowledgement recorded: a flush
// sent after reading it covers every entry up to it.
func (u *unflushed) last() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seq
}

// flushed records that the machine boot boot completed a flush sent after
// the acknowledgement numbered upTo: the entries up to it acknowledged by the
// same boot are durable and dropped. It reports whether entries of another
// boot remain, which that flush did not cover: a reboot lost them (or they
// were sent to a newer boot this flush did not reach) and they must be sent
// again.
func (u *unflushed) flushed(upTo uint64, boot string) (stale bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if boot == "" {
		// A datapath without boot ids: nothing can be told apart, and
		// nothing is kept for it (add); older entries are dropped as before
		// there were boot ids.
		u.dropIf(func(e *unflExt) bool { return e.seq <= upTo })
		return false
	}
	u.dropIf(func(e *unflExt) bool { return e.seq <= upTo && e.boot == boot })
	return u.staleLocked(boot)
}

func (u *unflushed) dropIf(drop func(*unflExt) bool) {
	kept := u.ext[:0]
	for _, e := range u.ext {
		if drop(e) {
			u.remove(e)
		} else {
			kept = append(kept, e)
		}
	}
	clear(u.ext[len(kept):])
	u.ext = kept
}

// stale reports whether an entry was acknowledged by another machine boot
// than boot, the one that just answered: then it may be lost.
func (u *unflushed) stale(boot string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.staleLocked(boot)
}

func (u *unflushed) staleLocked(boot string) bool {
	if boot == "" {
		return false
	}
	n := len(u.boots)
	if u.boots[boot] > 0 {
		n--
	}
	return n > 0
}

// pending returns the entries not acknowledged by boot, oldest
// acknowledgement first.
func (u *unflushed) pending(boot string) []replayWrite {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []replayWrite
	for _, e := range u.ext {
		if e.boot != boot {
			out = append(out, replayWrite{Off: e.off, Data: e.data, Seq: e.seq, Boot: e.boot})
		}
	}
	slices.SortFunc(out, func(a, b replayWrite) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// resent records that boot acknowledged entry w again; false when a newer
// write replaced or trimmed it meanwhile (the caller holds writes back, so
// it should not happen).
func (u *unflushed) resent(w replayWrite, boot string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	i := sort.Search(len(u.ext), func(i int) bool { return u.ext[i].off >= w.Off })
	if i == len(u.ext) || u.ext[i].off != w.Off || u.ext[i].seq != w.Seq || len(u.ext[i].data) != len(w.Data) {
		return false
	}
	e := u.ext[i]
	u.remove(e)
	e.boot = boot
	u.count(e)
	return true
}

// size is the bytes held and the number of entries.
func (u *unflushed) size() (bytes int64, entries int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bytes, len(u.ext)
}
