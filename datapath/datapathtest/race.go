package datapathtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// RaceFence races writers against a fence and fails t if any write lands in
// the data file at imgPath after fence returns, if a write that started after
// the fence was acknowledged, or if an acknowledged write is missing. write must
// return an error satisfying errors.Is(err, datapath.datapath.ErrFenced) once fenced.
func RaceFence(t *testing.T, imgPath string, write func(off int64, p []byte) error, fence func() error) {
	t.Helper()
	RaceFenceBlocks(t, imgPath, 4096, write, fence)
}

// RaceFenceBlocks is RaceFence with writes of bs bytes (a multiple of 8); the
// volume must hold 128 blocks.
func RaceFenceBlocks(t *testing.T, imgPath string, bs int, write func(off int64, p []byte) error, fence func() error) {
	t.Helper()
	const writers, blocks = 8, 16
	var (
		fenced   atomic.Bool
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		lastAck  = map[int64]uint64{} // offset -> counter of the last acknowledged write
		lateAcks int
	)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := make([]byte, bs)
			for n := uint64(1); !stop.Load(); n++ {
				off := int64((w*blocks + int(n)%blocks) * bs)
				for i := 0; i < bs; i += 8 {
					binary.LittleEndian.PutUint64(buf[i:], n)
				}
				startedAfterFence := fenced.Load()
				err := write(off, buf)
				switch {
				case err == nil:
					mu.Lock()
					lastAck[off] = n
					if startedAfterFence {
						lateAcks++
					}
					mu.Unlock()
				case !errors.Is(err, datapath.ErrFenced):
					t.Errorf("write: %v", err)
					return
				}
			}
		}(w)
	}
	// Let the writers get going (a loaded machine may take a while), then fence
	// with writes in flight.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mu.Lock()
		started := len(lastAck) >= writers
		mu.Unlock()
		if started {
			break
		}
	}
	time.Sleep(10 * time.Millisecond)
	if err := fence(); err != nil {
		t.Fatal(err)
	}
	fenced.Store(true)
	atFence, err := os.ReadFile(imgPath)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	after, _ := os.ReadFile(imgPath)
	if !bytes.Equal(atFence, after) {
		t.Fatal("the data file changed after Fence returned: a write landed after the fence")
	}
	if lateAcks != 0 {
		t.Fatalf("%d writes that started after Fence returned were acknowledged", lateAcks)
	}
	if len(lastAck) == 0 {
		t.Fatal("no write succeeded before the fence; the race did not happen")
	}
	for off, n := range lastAck {
		if got := binary.LittleEndian.Uint64(after[off:]); got != n {
			t.Fatalf("block at %d holds counter %d, the last acknowledged write was %d", off, got, n)
		}
	}
}
