package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestClient_Group_ReplicatedWrite_MissedWritesAreInTheDirtyMaps: 32
// writers of one engine write a volume of three copies, each write to its
// own 4 KiB region; the server of a non-holder replica is stopped under
// the writes, or before they start. Every write started after the stop was
// missed by that replica and acknowledged without it, so each must be in
// the dirty-region map that both replicas still in sync keep of it, the
// writes in flight when the change that took it out committed included
// (taken at the old member epoch, before the maps started, they are there
// only because the engine sent them again at the new one). Under the
// writes, only the few writes started between the stop and the commit
// are such; before them, every writer's first write is.
func TestClient_Group_ReplicatedWrite_MissedWritesAreInTheDirtyMaps(t *testing.T) {
	t.Run("stopped under the writes", func(t *testing.T) { missedWritesInTheMaps(t, false) })
	t.Run("stopped before the writes", func(t *testing.T) { missedWritesInTheMaps(t, true) })
}

func missedWritesInTheMaps(t *testing.T, stopFirst bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const size, writers, after = 64 << 20, 32, 10
	r := startReplicas(t, ctx, datapathtest.StartGroup(t, 3), "pvc-dirty", size, 3)
	victim := r.ids[1]
	if r.at[victim].Group.IsLeader() {
		victim = r.ids[2]
	}
	c := r.engine(t, ctx, client.WithReplicaDeadline(500*time.Millisecond))
	var (
		mu      sync.Mutex
		stopped time.Time
		missed  []int64 // offsets of the acknowledged writes started after the stop
		wg      sync.WaitGroup
		errs    = make(chan error, writers)
	)
	stop := func() {
		r.at[victim].Stop()
		mu.Lock()
		stopped = time.Now()
		mu.Unlock()
	}
	if stopFirst {
		stop()
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for i, post := 0, 0; post < after; i++ {
				off := int64(i*writers+w) * 4096
				if off >= size {
					errs <- fmt.Errorf("writer %d ran out of regions before %d writes after the stop", w, after)
					return
				}
				mu.Lock()
				afterStop := !stopped.IsZero()
				mu.Unlock()
				if err := c.WriteAt(ctx, r.vol, "n1", r.epoch, off, buf); err != nil {
					errs <- fmt.Errorf("writer %d, write %d at %d: %w", w, i, off, err)
					return
				}
				if afterStop {
					post++
					mu.Lock()
					missed = append(missed, off)
					mu.Unlock()
				}
			}
		}()
	}
	if !stopFirst {
		time.Sleep(300 * time.Millisecond)
		stop()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	in, m := memberOf(t, ctx, r.ctl, r.vol)
	if m != 2 || len(in) != 2 {
		t.Fatalf("in sync %v at member epoch %d; want %s out of sync at member epoch 2", in, m, victim)
	}
	for _, id := range in {
		waitMember(t, r.at[id], r.vol, 2)
		d, err := c.DirtyRegions(ctx, r.at[id].Addr, r.vol, victim, "n1", r.epoch)
		if err != nil {
			t.Fatalf("dirty regions of %s at %s: %v", victim, id, err)
		}
		if d.All || d.Since != 2 {
			t.Fatalf("the map of %s at %s: all dirty %v, since member epoch %d; want an empty map started at 2 (else this test proves nothing)", victim, id, d.All, d.Since)
		}
		var absent []int64
		for _, off := range missed {
			if !inRanges(d.Ranges, off, 4096) {
				absent = append(absent, off)
			}
		}
		if len(absent) > 0 {
			t.Errorf("the map of %s at %s lacks %d of the %d writes acknowledged without it, at offsets %v (map: %v)", victim, id, len(absent), len(missed), absent, d.Ranges)
		}
	}
	t.Logf("%d writes started after the stop, acknowledged without the stopped replica", len(missed))
}

// inRanges says whether [off, off+n) lies within one of ranges.
func inRanges(ranges []datapath.DirtyRange, off, n int64) bool {
	for _, r := range ranges {
		if r.Off <= off && off+n <= r.Off+r.Len {
			return true
		}
	}
	return false
}
