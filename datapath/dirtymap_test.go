package datapath

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

const rs = DirtyRegionSize

func TestDirtyMap_Mark(t *testing.T) {
	big := int64(3*DirtyChunkRegions) * rs
	cases := []struct {
		name    string
		size    int64
		marks   [][2]int64
		want    []DirtyRange
		count   int64
		changed [][]int // chunks each mark changed
	}{
		{"nothing", 10 * rs, nil, nil, 0, nil},
		{"empty write dirties nothing", 10 * rs, [][2]int64{{5 * rs, 0}}, nil, 0, [][]int{nil}},
		{"aligned 4 KiB write: one region", 10 * rs, [][2]int64{{3 * rs, rs}}, []DirtyRange{{3 * rs, rs}}, 1, [][]int{{0}}},
		{"one byte: its region", 10 * rs, [][2]int64{{3*rs + 7, 1}}, []DirtyRange{{3 * rs, rs}}, 1, [][]int{{0}}},
		{"unaligned 4 KiB write: two regions", 10 * rs, [][2]int64{{3*rs + 1, rs}}, []DirtyRange{{3 * rs, 2 * rs}}, 2, [][]int{{0}}},
		{"again: nothing changes", 10 * rs, [][2]int64{{rs, rs}, {rs + 10, 100}}, []DirtyRange{{rs, rs}}, 1, [][]int{{0}, nil}},
		{"adjacent writes join", 10 * rs, [][2]int64{{rs, rs}, {2 * rs, rs}}, []DirtyRange{{rs, 2 * rs}}, 2, [][]int{{0}, {0}}},
		{"apart stay apart", 10 * rs, [][2]int64{{0, rs}, {9 * rs, rs}}, []DirtyRange{{0, rs}, {9 * rs, rs}}, 2, [][]int{{0}, {0}}},
		{"short last region ends at the size", 2*rs + 100, [][2]int64{{2*rs + 50, 50}}, []DirtyRange{{2 * rs, 100}}, 1, [][]int{{0}}},
		{"across a chunk boundary", big, [][2]int64{{int64(DirtyChunkRegions)*rs - 1, 2}}, []DirtyRange{{int64(DirtyChunkRegions-1) * rs, 2 * rs}}, 2, [][]int{{0, 1}}},
		{"last chunk", big, [][2]int64{{big - rs, rs}}, []DirtyRange{{big - rs, rs}}, 1, [][]int{{2}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := NewDirtyMap(c.size)
			if err != nil {
				t.Fatal(err)
			}
			for i, mk := range c.marks {
				ch, err := m.Mark(mk[0], mk[1])
				if err != nil {
					t.Fatalf("Mark(%d, %d): %v", mk[0], mk[1], err)
				}
				if !slices.Equal(ch, c.changed[i]) {
					t.Errorf("Mark(%d, %d) changed chunks %v, want %v", mk[0], mk[1], ch, c.changed[i])
				}
				if !m.Covers(mk[0], mk[1]) {
					t.Errorf("Covers(%d, %d) false after its Mark", mk[0], mk[1])
				}
			}
			if got := m.Ranges(); !slices.Equal(got, c.want) {
				t.Errorf("Ranges = %v, want %v", got, c.want)
			}
			if got := m.Count(); got != c.count {
				t.Errorf("Count = %d, want %d", got, c.count)
			}
			var b int64
			for _, r := range c.want {
				b += r.Len
			}
			if got := m.Bytes(); got != b {
				t.Errorf("Bytes = %d, want %d", got, b)
			}
		})
	}
}

func TestDirtyMap_BadInput(t *testing.T) {
	for _, size := range []int64{0, -1} {
		if _, err := NewDirtyMap(size); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("NewDirtyMap(%d) = %v, want ErrInvalidArgument", size, err)
		}
	}
	m, _ := NewDirtyMap(10 * rs)
	for _, r := range [][2]int64{{-1, 1}, {0, -1}, {10*rs - 1, 2}, {10*rs + 1, 0}, {1, 1 << 62}} {
		if _, err := m.Mark(r[0], r[1]); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Mark(%d, %d) = %v, want ErrOutOfRange", r[0], r[1], err)
		}
		if m.Covers(r[0], r[1]) {
			t.Errorf("Covers(%d, %d) of a range outside the volume", r[0], r[1])
		}
	}
	if m.Count() != 0 {
		t.Errorf("a refused Mark changed the map: %v", m.Ranges())
	}
	o, _ := NewDirtyMap(11 * rs)
	if err := m.Union(o); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Union of maps of different sizes = %v, want ErrInvalidArgument", err)
	}
}

func TestDirtyMap_UnionAndAll(t *testing.T) {
	a, _ := NewDirtyMap(100 * rs)
	b, _ := NewDirtyMap(100 * rs)
	_, _ = a.Mark(0, rs)
	_, _ = b.Mark(rs, rs)
	_, _ = b.Mark(50*rs, 3*rs)
	if err := a.Union(b); err != nil {
		t.Fatal(err)
	}
	if got, want := a.Ranges(), []DirtyRange{{0, 2 * rs}, {50 * rs, 3 * rs}}; !slices.Equal(got, want) {
		t.Errorf("union = %v, want %v", got, want)
	}
	b.SetAll()
	if err := a.Union(b); err != nil || !a.All() || a.Count() != 100 || a.Bytes() != 100*rs {
		t.Errorf("union with an all-dirty map: all %v, count %d, bytes %d, err %v", a.All(), a.Count(), a.Bytes(), err)
	}
	if ch, _ := a.Mark(7, 9); ch != nil || !a.Covers(0, 100*rs) {
		t.Errorf("an all-dirty map: Mark changed %v, Covers everything %v", ch, a.Covers(0, 100*rs))
	}
}

// TestDirtyMap_SmallRandomWritesCopyBound measures the copy a delta resync
// would make against the bytes written while away: 4 KiB random writes
// aligned to 4 KiB (what a 4 KiB-block file system sends) copy at most what
// was written (1.0×, the design's bound is 1.1×); unaligned ones at most
// twice, the price of a region of 4 KiB.
func TestDirtyMap_SmallRandomWritesCopyBound(t *testing.T) {
	const size = 1 << 30
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, aligned := range []bool{true, false} {
		m, _ := NewDirtyMap(size)
		var written int64
		for range 20000 {
			off := rnd.Int64N(size - rs)
			if aligned {
				off &^= rs - 1
			}
			_, _ = m.Mark(off, rs)
			written += rs
		}
		ratio := float64(m.Bytes()) / float64(written)
		t.Logf("aligned %v: %d bytes written, %d to copy: %.3f×", aligned, written, m.Bytes(), ratio)
		if limit := map[bool]float64{true: 1.0, false: 2.0}[aligned]; ratio > limit {
			t.Errorf("aligned %v: copy is %.3f× the bytes written, want at most %.1f×", aligned, ratio, limit)
		}
	}
}

// model is a DirtyMap's specification: a plain set of regions.
func checkAgainstModel(t *testing.T, m *DirtyMap, model map[int64]bool, size int64) {
	t.Helper()
	var want []DirtyRange
	for r := int64(0); r*rs < size; r++ {
		if !model[r] {
			continue
		}
		off, n := r*rs, min(int64(rs), size-r*rs)
		if k := len(want) - 1; k >= 0 && want[k].Off+want[k].Len == off {
			want[k].Len += n
		} else {
			want = append(want, DirtyRange{off, n})
		}
	}
	if got := m.Ranges(); !slices.Equal(got, want) {
		t.Fatalf("Ranges = %v, want %v", got, want)
	}
	if int(m.Count()) != len(model) {
		t.Fatalf("Count = %d, want %d", m.Count(), len(model))
	}
}

// FuzzDirtyMap_MarkUnionPersist marks two maps from the fuzzer's bytes,
// checks each against a plain set of regions, their union, and that a map
// written through its file and read back is the same map.
func FuzzDirtyMap_MarkUnionPersist(f *testing.F) {
	f.Add(uint32(10*rs+5), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add(uint32(2*DirtyChunkRegions*rs), []byte{0xff, 0xff, 0xff, 0x01, 0, 0, 0, 0x10, 0x80, 0, 0, 0x20})
	f.Fuzz(func(t *testing.T, size32 uint32, ops []byte) {
		size := int64(size32%(3*DirtyChunkRegions*rs)) + 1
		if len(ops) > 600 {
			ops = ops[:600]
		}
		dir := t.TempDir()
		h := dirtyHeader{VolumeID: "vol-00000000000000aa", Replica: "s2", Size: size, Start: 3, Through: 3}
		df, err := createDirtyFile(dirtyPath(dir, h.VolumeID, h.Replica, h.Start), h)
		if err != nil {
			t.Fatal(err)
		}
		defer df.close()
		maps := [2]*DirtyMap{}
		models := [2]map[int64]bool{{}, {}}
		for i := range maps {
			maps[i], _ = NewDirtyMap(size)
		}
		for len(ops) >= 6 {
			which := int(ops[0] & 1)
			off := int64(binary.LittleEndian.Uint32(ops[1:5])) % size
			n := min(int64(ops[5])*97, size-off)
			ops = ops[6:]
			if _, err := maps[which].Mark(off, n); err != nil {
				t.Fatalf("Mark(%d, %d) of a volume of %d: %v", off, n, size, err)
			}
			if which == 0 {
				if err := df.mark(off, n); err != nil {
					t.Fatal(err)
				}
			}
			if first, last, ok := regionSpan(off, n); ok {
				for r := first; r <= last; r++ {
					models[which][r] = true
				}
			}
		}
		checkAgainstModel(t, maps[0], models[0], size)
		checkAgainstModel(t, maps[1], models[1], size)
		checkAgainstModel(t, df.snapshot(), models[0], size)
		back, err := openDirtyFile(df.path)
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		checkAgainstModel(t, back.m, models[0], size)
		back.close()
		u := maps[0].Clone()
		if err := u.Union(maps[1]); err != nil {
			t.Fatal(err)
		}
		for r := range models[1] {
			models[0][r] = true
		}
		checkAgainstModel(t, u, models[0], size)
	})
}

func newTestDirtyFile(t *testing.T, size int64) *dirtyFile {
	t.Helper()
	h := dirtyHeader{VolumeID: "vol-00000000000000aa", Replica: "server-2", Size: size, Start: 7, Through: 7}
	df, err := createDirtyFile(dirtyPath(t.TempDir(), h.VolumeID, h.Replica, h.Start), h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(df.close)
	return df
}

func TestDirtyFile_RoundTrip(t *testing.T) {
	df := newTestDirtyFile(t, 3*DirtyChunkRegions*rs)
	for _, r := range [][2]int64{{0, 1}, {5 * rs, 3 * rs}, {int64(2*DirtyChunkRegions) * rs, rs}} {
		if err := df.mark(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := df.setThrough(9); err != nil {
		t.Fatal(err)
	}
	back, err := openDirtyFile(df.path)
	if err != nil {
		t.Fatal(err)
	}
	defer back.close()
	if got, want := back.m.Ranges(), df.snapshot().Ranges(); !slices.Equal(got, want) {
		t.Errorf("read back %v, want %v", got, want)
	}
	if h := back.header(); h.VolumeID != "vol-00000000000000aa" || h.Replica != "server-2" || h.Start != 7 || h.Through != 9 || h.All {
		t.Errorf("header read back %+v", h)
	}
	id, replica, start, ok := parseDirtyName(filepath.Base(df.path))
	if !ok || id != "vol-00000000000000aa" || replica != "server-2" || start != 7 {
		t.Errorf("parseDirtyName(%s) = %s %s %d %v", filepath.Base(df.path), id, replica, start, ok)
	}
}

// TestDirtyFile_TornOrGarbledIsAllDirty: whatever is wrong with the file,
// reading it is ErrDirtyMapCorrupt (its caller then copies everything),
// never a map with fewer marks.
func TestDirtyFile_TornOrGarbledIsAllDirty(t *testing.T) {
	cases := map[string]func(b []byte) []byte{
		// The second mark of chunk 0 torn: its first sector (tag, sum, the
		// first mark's bit) new, its fourth (the second mark's bit) old.
		"torn chunk: new first sector, old fourth": func(b []byte) []byte {
			copy(b[dirtyBlock+3*512:dirtyBlock+4*512], make([]byte, 512))
			return b
		},
		"bit flipped in a chunk":  func(b []byte) []byte { b[dirtyBlock+100] ^= 0x10; return b },
		"chunk tag gone":          func(b []byte) []byte { b[dirtyBlock] = 'X'; return b },
		"bit flipped in a header": func(b []byte) []byte { b[33] ^= 1; return b },
		"newer version": func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[8:], dirtyVersion+1)
			return b
		},
		"truncated":      func(b []byte) []byte { return b[:len(b)-dirtyBlock] },
		"empty":          func(b []byte) []byte { return nil },
		"chunks swapped": func(b []byte) []byte { copy(b[2*dirtyBlock:], b[dirtyBlock:2*dirtyBlock]); return b },
	}
	for name, garble := range cases {
		t.Run(name, func(t *testing.T) {
			df := newTestDirtyFile(t, 3*DirtyChunkRegions*rs)
			if err := df.mark(0, rs); err != nil {
				t.Fatal(err)
			}
			if err := df.mark(int64(DirtyChunkRegions)*rs+rs, rs); err != nil {
				t.Fatal(err)
			}
			if err := df.mark(13000*rs, rs); err != nil { // chunk 0, its block's fourth sector
				t.Fatal(err)
			}
			b, err := os.ReadFile(df.path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(df.path, garble(b), 0o600); err != nil {
				t.Fatal(err)
			}
			back, err := openDirtyFile(df.path)
			if !errors.Is(err, ErrDirtyMapCorrupt) {
				if back != nil {
					back.close()
				}
				t.Fatalf("read of a garbled map = %v, want ErrDirtyMapCorrupt", err)
			}
			t.Log(err)
		})
	}
}

// TestDirtyFile_MarkIsOnDiskWhenItReturns reads the file after every mark:
// the region's bit is there, and a mark of regions already dirty writes and
// syncs nothing.
func TestDirtyFile_MarkIsOnDiskWhenItReturns(t *testing.T) {
	syncs := 0
	old := dirtySync
	dirtySync = func(f *os.File) error { syncs++; return old(f) }
	t.Cleanup(func() { dirtySync = old })
	df := newTestDirtyFile(t, 64*rs)
	rnd := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		off := rnd.Int64N(64 * rs)
		n := min(rnd.Int64N(3*rs), 64*rs-off)
		before, covered := syncs, df.covers(off, n)
		if err := df.mark(off, n); err != nil {
			t.Fatal(err)
		}
		if covered && syncs != before {
			t.Fatalf("mark %d of regions already dirty synced the file", i)
		}
		back, err := openDirtyFile(df.path)
		if err != nil {
			t.Fatal(err)
		}
		if !back.m.Covers(off, n) {
			t.Fatalf("mark %d (%d bytes at %d) returned but its regions are not in the file: %v", i, n, off, back.m.Ranges())
		}
		back.close()
	}
}

func TestDirtyFile_FailedSyncLatches(t *testing.T) {
	old := dirtySync
	t.Cleanup(func() { dirtySync = old })
	df := newTestDirtyFile(t, 64*rs)
	boom := errors.New("EIO")
	dirtySync = func(*os.File) error { return boom }
	if err := df.mark(0, rs); !errors.Is(err, boom) {
		t.Fatalf("mark with a failing sync = %v, want it", err)
	}
	dirtySync = old
	if err := df.mark(rs, rs); !errors.Is(err, boom) {
		t.Fatalf("mark after a failed sync = %v, want the latched failure", err)
	}
	if df.covers(0, rs) {
		t.Error("a mark whose sync failed shows as dirty")
	}
}
