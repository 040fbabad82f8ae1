package enginenode

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-storage/vigil/datapath"
)

// machineDatapath is a datapath on a machine with a page cache: a write is
// acknowledged once cached, a flush makes the cache durable, and reboot
// drops the cache and gives the machine a new boot id, as a power cut does.
// Every answer carries the boot id.
type machineDatapath struct {
	mu      sync.Mutex
	boot    string
	boots   int
	durable []byte
	cache   map[int64][]byte // write offset -> data, applied in order at a flush
	order   []int64
	// onWrite, if set, runs before each write is applied (outside mu).
	onWrite func(off int64, p []byte)
	writes  int
	flushes int
}

func newMachine(size int) *machineDatapath {
	return &machineDatapath{boot: "boot-1", boots: 1, durable: make([]byte, size), cache: map[int64][]byte{}}
}

func (m *machineDatapath) reboot() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.boots++
	m.boot = fmt.Sprintf("boot-%d", m.boots)
	m.cache, m.order = map[int64][]byte{}, nil
}

// view is what a read sees: durable data with the cache over it.
func (m *machineDatapath) view() []byte {
	out := bytes.Clone(m.durable)
	for _, off := range m.order {
		if p, ok := m.cache[off]; ok {
			copy(out[off:], p)
		}
	}
	return out
}

func (m *machineDatapath) ReadAt(ctx context.Context, _, _ string, _ uint64, off int64, n int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	datapath.RecordBoot(ctx, m.boot)
	return m.view()[off : off+int64(n)], nil
}

func (m *machineDatapath) WriteAt(ctx context.Context, _, _ string, _ uint64, off int64, p []byte) error {
	if m.onWrite != nil {
		m.onWrite(off, p)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Written over the view, so overlapping writes keep their order.
	v := m.view()
	copy(v[off:], p)
	m.cache = map[int64][]byte{0: v}
	m.order = []int64{0}
	m.writes++
	datapath.RecordBoot(ctx, m.boot)
	return nil
}

func (m *machineDatapath) Flush(ctx context.Context, _, _ string, _ uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.durable = m.view()
	m.cache, m.order = map[int64][]byte{}, nil
	m.flushes++
	datapath.RecordBoot(ctx, m.boot)
	return nil
}

func (m *machineDatapath) GetVolume(context.Context, string) (datapath.Volume, error) {
	return datapath.Volume{}, nil
}

// durableAfterAnotherCut is what survives one more power cut.
func (m *machineDatapath) durableAfterAnotherCut() []byte {
	m.reboot()
	m.mu.Lock()
	defer m.mu.Unlock()
	return bytes.Clone(m.durable)
}

func block(i int, b byte) []byte { return bytes.Repeat([]byte{b + byte(i)}, 4096) }

// TestVolumeBackend_Replay_FlushAfterAPowerCutLosesNothing: writes are
// acknowledged, the datapath's machine loses its page cache (new boot id),
// and the next flush succeeds with every acknowledged write durable, also
// those the file system never flushed before the cut; nothing newer is
// overwritten.
func TestVolumeBackend_Replay_FlushAfterAPowerCutLosesNothing(t *testing.T) {
	ctx := context.Background()
	dp := newMachine(64 << 10)
	m := NewMetrics(nil)
	b := newVolumeBackend(dp, "vol-1", "node-a", 2, 30*time.Second, m).keepUnflushed(DefaultUnflushedBudget, nil)
	want := make([]byte, 64<<10)
	write := func(i int, c byte) {
		t.Helper()
		p := block(i, c)
		if err := b.WriteAt(ctx, int64(i)*4096, p); err != nil {
			t.Fatal(err)
		}
		copy(want[i*4096:], p)
	}
	for i := range 8 {
		write(i, 'a')
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 4; i < 12; i++ {
		write(i, 'A') // acknowledged, not flushed
	}
	dp.reboot()
	write(5, '0') // newer than the kept write of block 5: never overwritten by it
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := dp.durableAfterAnotherCut(); !bytes.Equal(got, want) {
		t.Fatalf("after a flush that succeeded and another cut, the volume differs from what was acknowledged and flushed (first difference at byte %d)", firstDiff(got, want))
	}
	if n := testutil.ToFloat64(m.replays); n != 1 {
		t.Fatalf("%v replays, want 1", n)
	}
	if held, n := b.unfl.size(); held != 0 || n != 0 {
		t.Fatalf("after the flush %d bytes in %d writes are still kept", held, n)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A read answered by a rebooted machine is read again after the writes it
// lost are sent again: it never returns what was there before them.
func TestVolumeBackend_Replay_ReadNeverSeesALostWrite(t *testing.T) {
	ctx := context.Background()
	dp := newMachine(16 << 10)
	b := newVolumeBackend(dp, "vol-1", "node-a", 2, 30*time.Second, NewMetrics(nil)).keepUnflushed(DefaultUnflushedBudget, nil)
	if err := b.WriteAt(ctx, 4096, block(0, 'x')); err != nil {
		t.Fatal(err)
	}
	dp.reboot()
	got, err := b.ReadAt(ctx, 4096, 4096)
	if err != nil || !bytes.Equal(got, block(0, 'x')) {
		t.Fatalf("read after the cut: %q..., %v; want the acknowledged write", got[:8], err)
	}
}

// While a replay runs, the volume's other requests wait: a write of a range
// being sent again reaches the datapath only after the replay, so the older
// content never lands over it.
func TestVolumeBackend_Replay_HoldsConcurrentWritesBack(t *testing.T) {
	ctx := context.Background()
	dp := newMachine(16 << 10)
	b := newVolumeBackend(dp, "vol-1", "node-a", 2, 30*time.Second, NewMetrics(nil)).keepUnflushed(DefaultUnflushedBudget, nil)
	if err := b.WriteAt(ctx, 0, block(0, 'o')); err != nil {
		t.Fatal(err)
	}
	dp.reboot()
	replaying, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	dp.onWrite = func(off int64, p []byte) {
		if p[0] == 'o' {
			once.Do(func() { close(replaying); <-release })
		}
	}
	flushed := make(chan error, 1)
	go func() { flushed <- b.Flush(ctx) }()
	select { // the flush met the new boot and sends block 0 again
	case <-replaying:
	case err := <-flushed:
		t.Fatalf("the flush after the cut ended (%v) without sending the lost write again", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no replay within 10 s of a flush after the cut")
	}
	newer := make(chan error, 1)
	go func() { newer <- b.WriteAt(ctx, 0, block(0, 'n')) }()
	select {
	case err := <-newer:
		t.Fatalf("a write went out during the replay (%v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := <-newer; err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := dp.durableAfterAnotherCut(); !bytes.Equal(got[:4096], block(0, 'n')) {
		t.Fatalf("block 0 holds %q..., want the newer write", got[:8])
	}
}

// A second power cut during the replay starts it over for the newest boot.
func TestVolumeBackend_Replay_SecondCutMidReplay(t *testing.T) {
	ctx := context.Background()
	dp := newMachine(64 << 10)
	b := newVolumeBackend(dp, "vol-1", "node-a", 2, 30*time.Second, NewMetrics(nil)).keepUnflushed(DefaultUnflushedBudget, nil)
	want := make([]byte, 64<<10)
	for i := range 8 {
		if err := b.WriteAt(ctx, int64(i)*4096, block(i, 'a')); err != nil {
			t.Fatal(err)
		}
		copy(want[i*4096:], block(i, 'a'))
	}
	dp.reboot()
	var once sync.Once
	dp.onWrite = func(off int64, _ []byte) {
		if off == 3*4096 {
			once.Do(dp.reboot) // the fourth write sent again meets yet another boot
		}
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := dp.durableAfterAnotherCut(); !bytes.Equal(got, want) {
		t.Fatalf("after two cuts and a flush, the volume differs at byte %d", firstDiff(got, want))
	}
}

// Past the budget a write flushes the volume first, so the memory kept stays
// bounded; what was flushed is dropped.
func TestVolumeBackend_Budget_FlushesAndDrops(t *testing.T) {
	ctx := context.Background()
	dp := newMachine(8 << 20)
	m := NewMetrics(nil)
	const budget = 1 << 20
	b := newVolumeBackend(dp, "vol-1", "node-a", 2, 30*time.Second, m).keepUnflushed(budget, nil)
	p := bytes.Repeat([]byte{7}, 256<<10)
	for i := range 24 {
		if err := b.WriteAt(ctx, int64(i)*int64(len(p)), p); err != nil {
			t.Fatal(err)
		}
		if held, _ := b.unfl.size(); held > budget {
			t.Fatalf("after write %d: %d bytes kept, budget %d", i, held, budget)
		}
	}
	if n := testutil.ToFloat64(m.budgetFlushes); n < 4 || dp.flushes < 4 {
		t.Fatalf("%v budget flushes (%d flushes) for 6 MiB written with a 1 MiB budget; want at least 4", n, dp.flushes)
	}
}

// The node's budget bounds what all its volumes keep together, though each
// stays within its own: past it, the volume written to flushes, and a volume
// whose stack is gone stops counting.
func TestVolumeBackend_NodeBudget_BoundsEveryVolumeTogether(t *testing.T) {
	ctx := context.Background()
	dp := newMachine(8 << 20)
	m := NewMetrics(nil)
	node := &nodeBudget{limit: 1 << 20}
	vols := []*volumeBackend{
		newVolumeBackend(dp, "vol-1", "node-a", 2, 30*time.Second, m).keepUnflushed(maxUnflushedBudget, node),
		newVolumeBackend(dp, "vol-2", "node-a", 2, 30*time.Second, m).keepUnflushed(maxUnflushedBudget, node),
	}
	p := bytes.Repeat([]byte{7}, 192<<10)
	for i := range 24 {
		b := vols[i%2]
		if err := b.WriteAt(ctx, int64(i)*int64(len(p)), p); err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, v := range vols {
			held, _ := v.unfl.size()
			sum += held
		}
		if got := node.held.Load(); got != sum || got > node.limit {
			t.Fatalf("after write %d: the node counts %d bytes, its volumes hold %d, budget %d", i, got, sum, node.limit)
		}
		if got := testutil.ToFloat64(m.unflushedBytes); got != float64(node.held.Load()) {
			t.Fatalf("after write %d: vigil_engine_unflushed_bytes %v, want %d", i, got, node.held.Load())
		}
	}
	if n := testutil.ToFloat64(m.budgetFlushes); n < 4 {
		t.Fatalf("%v budget flushes for 4.5 MiB written to two volumes with a 1 MiB node budget; want at least 4", n)
	}
	if err := vols[0].WriteAt(ctx, 0, p); err != nil {
		t.Fatal(err)
	}
	if node.held.Load() == 0 {
		t.Fatal("a write kept nothing against the node's budget")
	}
	for _, v := range vols {
		v.discardKept()
	}
	if got := node.held.Load(); got != 0 {
		t.Fatalf("after both stacks went, the node still counts %d bytes", got)
	}
}
