package enginenode

import (
	"context"
	"fmt"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// The datapath acknowledges a write once it is in its machine's page cache;
// a flush makes the writes acknowledged before it durable. A power cut of the
// datapath's machine loses the acknowledged writes no flush covered, and a
// restarted datapath answers the next flush "done" for its own, empty, page
// cache: the file system above would take that flush as covering what was
// lost (ext4's journal then has a hole, and replay stops there at the next
// mount). So the backend keeps every acknowledged write until a flush by the
// same machine boot covers it (unflushed), notes with each answer the boot id
// of the datapath's machine (datapath.WithBootRecorder), and when an answer
// comes from another boot than the kept writes', it sends them again before
// anything else: requests in flight finish first, new ones wait (b.io), and
// since only the latest content of each range is kept, nothing newer is
// overwritten. Then the read is read again, the flush flushed again. A
// datapath process restart keeps the boot id and costs nothing.

// call runs one request through retry, under b.io for reading, with a boot
// recorder; ack, when not nil, records a successful answer in the kept writes
// while b.io is still held. It returns the boot id of the answer when kept
// writes of another boot are waiting to be sent again (call replay), else "".
func (b *volumeBackend) call(ctx context.Context, op func(context.Context) error, ack func(boot string)) (string, error) {
	if b.unfl == nil {
		return "", b.retry(ctx, op)
	}
	b.io.RLock()
	defer b.io.RUnlock()
	boot := ""
	err := b.retry(datapath.WithBootRecorder(ctx, &boot), op)
	if err != nil {
		return "", err
	}
	b.noteBoot(boot)
	if ack != nil {
		ack(boot)
	}
	if b.unfl.stale(boot) {
		return boot, nil
	}
	return "", nil
}

// noteBoot logs once per volume that the datapath reports no boot id (one
// from before boot ids): its power cut cannot be told from a restart.
func (b *volumeBackend) noteBoot(boot string) {
	if boot == "" && b.noBoot.CompareAndSwap(false, true) {
		b.log.Warn("the datapath reports no boot id (an older release): acknowledged writes it loses in a power cut of its machine "+
			"cannot be detected or sent again; upgrade the datapath", "volume", b.volumeID)
	}
}

// flush flushes the volume; a flush answered by another machine boot than
// kept writes it should cover sends them again and flushes again.
func (b *volumeBackend) flush(ctx context.Context) error {
	op := func(ctx context.Context) error { return b.dp.Flush(ctx, b.volumeID, b.node, b.epoch) }
	if b.unfl == nil {
		return b.retry(ctx, op)
	}
	for {
		b.io.RLock()
		upTo := b.unfl.last()
		boot := ""
		err := b.retry(datapath.WithBootRecorder(ctx, &boot), op)
		stale := false
		if err == nil {
			b.noteBoot(boot)
			stale = b.unfl.flushed(upTo, boot)
		}
		b.io.RUnlock()
		if err != nil || !stale {
			return err
		}
		if err := b.replay(ctx, boot); err != nil {
			return err
		}
	}
}

// replay sends again, holding every other request of the volume back, each
// kept write that the machine boot boot (the one that just answered) did not
// acknowledge, oldest first. A write answered by yet another boot (a second
// power cut meanwhile) starts it over for that boot. Its error (fenced, the
// datapath gone past the timeout) fails the request that called it; the
// writes stay kept.
func (b *volumeBackend) replay(ctx context.Context, boot string) error {
	b.io.Lock()
	defer b.io.Unlock()
	start := time.Now()
	var sent, bytes int64
	from := map[string]bool{}
	for {
		ws := b.unfl.pending(boot)
		if len(ws) == 0 {
			break
		}
		if sent == 0 {
			held, _ := b.unfl.size()
			b.log.Warn("the datapath's machine rebooted since it acknowledged writes no flush covered: sending them again before anything else",
				"volume", b.volumeID, "boot", boot, "writes", len(ws), "keptBytes", held)
		}
		again := ""
		for _, w := range ws {
			got := ""
			err := b.retry(datapath.WithBootRecorder(ctx, &got), func(ctx context.Context) error {
				return b.dp.WriteAt(ctx, b.volumeID, b.node, b.epoch, w.Off, w.Data)
			})
			if err != nil {
				return fmt.Errorf("send again %d writes acknowledged before the datapath's machine rebooted: %w", len(ws), err)
			}
			from[w.Boot] = true
			sent++
			bytes += int64(len(w.Data))
			b.unfl.resent(w, got)
			if got != boot {
				again = got
				break
			}
		}
		if again == "" {
			break
		}
		boot = again
	}
	if sent > 0 {
		b.metrics.replays.Inc()
		b.metrics.replayedBytes.Add(float64(bytes))
		b.log.Warn("sent again the writes the datapath's machine lost", "volume", b.volumeID, "boot", boot,
			"writes", sent, "bytes", bytes, "lostBoots", len(from), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// keepWithinBudget flushes the volume when its kept writes exceed the
// volume's budget, or the writes kept by every volume of the node exceed the
// node's, one flush at a time (the writers past the budget wait for it), so
// the engine's memory stays bounded whatever the file system's flush rate and
// however many volumes the node stages. Past the node's budget the writer
// flushes its own volume, which holds at least the write just made: each
// volume that goes on writing so pays for its share.
func (b *volumeBackend) keepWithinBudget(ctx context.Context) error {
	if b.nodeBudget != nil {
		defer func() { b.metrics.unflushedBytes.Set(float64(b.nodeBudget.held.Load())) }()
	}
	if b.unfl == nil || !b.overBudget() {
		return nil
	}
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	if !b.overBudget() {
		return nil
	}
	b.metrics.budgetFlushes.Inc()
	return b.flush(ctx)
}

func (b *volumeBackend) overBudget() bool {
	held, entries := b.unfl.size()
	if held > b.budget {
		return true
	}
	return b.nodeBudget != nil && entries > 0 && b.nodeBudget.held.Load() > b.nodeBudget.limit
}
