package datapath

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// provisionRound is how many volumes one round of the benchmark below creates
// or deletes at once.
const provisionRound = 50

// BenchmarkStore_IOWhileProvisioning measures what provisioning costs the
// volumes already in use: one node writes 4 KiB and flushes, again and again,
// on its volume while 50 other volumes are created (create) or deleted
// (delete) at once, on the test's disk; idle is the same writer alone for
// 30 ms a round, the floor the others compare with. It reports the longest and the 99th
// percentile latency of one write plus its flush over every round (max-io-ms,
// p99-io-ms), and how many of them a round saw (io/round). Each operation of
// a round is timed whole, so a write that waited for provisioning counts with
// its wait.
func BenchmarkStore_IOWhileProvisioning(b *testing.B) {
	for _, op := range []string{"idle", "create", "delete"} {
		b.Run(op, func(b *testing.B) { benchIOWhileProvisioning(b, op) })
	}
}

func benchIOWhileProvisioning(b *testing.B, op string) {
	deleting := op == "delete"
	s := openTest(b, b.TempDir())
	w := mustCreate(b, s, "busy", 16<<20, AccessRWO)
	epoch := mustGrant(b, s, w.ID, "writer")
	var lat []time.Duration
	round := 0
	for b.Loop() {
		b.StopTimer()
		names := make([]string, provisionRound)
		ids := make([]string, provisionRound)
		for i := range names {
			names[i] = fmt.Sprintf("pvc-%d-%02d", round, i)
			if deleting {
				ids[i] = mustCreate(b, s, names[i], 4<<20, AccessRWO).ID
			}
		}
		round++
		stop, done := make(chan struct{}), make(chan []time.Duration)
		go func() { done <- writeUntil(b, s, w.ID, epoch, stop) }()
		b.StartTimer()
		var wg sync.WaitGroup
		if op == "idle" {
			time.Sleep(30 * time.Millisecond)
			names = nil
		}
		for i := range names {
			wg.Go(func() {
				if deleting {
					if err := s.DeleteVolume(ids[i]); err != nil {
						b.Errorf("DeleteVolume(%s): %v", ids[i], err)
					}
					return
				}
				v, err := s.CreateVolume(names[i], 4<<20, AccessRWO)
				if err != nil {
					b.Errorf("CreateVolume(%s): %v", names[i], err)
				}
				ids[i] = v.ID
			})
		}
		wg.Wait()
		b.StopTimer()
		close(stop)
		lat = append(lat, <-done...)
		if op == "create" {
			for _, id := range ids {
				if id == "" {
					continue
				}
				if err := s.DeleteVolume(id); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StartTimer()
	}
	if len(lat) == 0 {
		b.Fatal("no write finished during provisioning")
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)-1]), "max-io-ms")
	b.ReportMetric(ms(lat[(len(lat)-1)*99/100]), "p99-io-ms")
	b.ReportMetric(float64(len(lat))/float64(round), "io/round")
}

// writeUntil writes 4 KiB and flushes, at successive offsets, until stop is
// closed, and returns each write-and-flush's latency.
func writeUntil(b *testing.B, s *Store, id string, epoch uint64, stop <-chan struct{}) []time.Duration {
	buf := make([]byte, 4096)
	var out []time.Duration
	failed := false
	for off := int64(0); ; off = (off + 4096) % (16 << 20) {
		select {
		case <-stop:
			return out
		default:
		}
		start := time.Now()
		err := s.WriteAt(id, "writer", epoch, off, buf)
		if err == nil {
			err = s.Flush(id, "writer", epoch)
		}
		if err != nil && !failed {
			failed = true
			b.Errorf("write and flush at %d: %v", off, err)
		}
		out = append(out, time.Since(start))
	}
}
