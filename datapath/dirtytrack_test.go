package datapath

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// TestDecideDirty is the specification of which dirty-region maps a server
// keeps as it applies a volume's replica set, self being "a".
func TestDecideDirty(t *testing.T) {
	set := func(member uint64, inSync ...string) ReplicaSet {
		return ReplicaSet{VolumeID: "v", Holder: "a", Replicas: []string{"a", "b", "c"}, InSync: inSync, MemberEpoch: member}
	}
	var none ReplicaSet
	cases := []struct {
		name     string
		old, cur ReplicaSet
		have     map[string]dirtyHave
		want     []dirtyAction
	}{
		{"all in sync: no map", set(0, "a", "b", "c"), set(0, "a", "b", "c"), nil, nil},
		{"b taken out at the next epoch, a in sync: b starts empty", set(4, "a", "b", "c"), set(5, "a", "c"), nil,
			[]dirtyAction{{"b", dirtyStartClean}}},
		{"a grant or fence (same epoch): the map goes on", set(5, "a", "c"), set(5, "a", "c"), map[string]dirtyHave{"b": {Through: 5}}, nil},
		{"c leaves while b is out: b carried, c starts empty", set(5, "a", "c"), set(6, "a"), map[string]dirtyHave{"b": {Through: 5}},
			[]dirtyAction{{"b", dirtyCarry}, {"c", dirtyStartClean}}},
		{"b back in sync: its map goes", set(5, "a", "c"), set(6, "a", "b", "c"), map[string]dirtyHave{"b": {Through: 5}},
			[]dirtyAction{{"b", dirtyDrop}}},
		{"a jump of two epochs: b's map cannot be vouched for", set(5, "a", "c"), set(7, "a", "c"), map[string]dirtyHave{"b": {Through: 5}},
			[]dirtyAction{{"b", dirtyStartAll}}},
		{"b out and a jump of two: b starts all dirty", set(4, "a", "b", "c"), set(6, "a", "c"), nil,
			[]dirtyAction{{"b", dirtyStartAll}}},
		{"at start, a file kept through the applied epoch: kept", none, set(5, "a", "c"), map[string]dirtyHave{"b": {Through: 5}}, nil},
		{"at start, a file kept through an older epoch: all dirty", none, set(6, "a", "c"), map[string]dirtyHave{"b": {Through: 5}},
			[]dirtyAction{{"b", dirtyStartAll}}},
		{"at start, no file: all dirty", none, set(5, "a", "c"), nil, []dirtyAction{{"b", dirtyStartAll}}},
		{"at start, b in sync: a stale file goes", none, set(7, "a", "b", "c"), map[string]dirtyHave{"b": {Through: 5}},
			[]dirtyAction{{"b", dirtyDrop}}},
		{"a broken map starts anew, all dirty", set(5, "a", "c"), set(5, "a", "c"), map[string]dirtyHave{"b": {Through: 5, Broken: true}},
			[]dirtyAction{{"b", dirtyStartAll}}},
		{"replaced: the old replica's map goes, the new copy's is all dirty", set(5, "a", "c"),
			ReplicaSet{VolumeID: "v", Holder: "a", Replicas: []string{"a", "d", "c"}, InSync: []string{"a", "c"}, MemberEpoch: 6},
			map[string]dirtyHave{"b": {Through: 5}}, []dirtyAction{{"b", dirtyDrop}, {"d", dirtyStartAll}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := decideDirty("a", c.old, c.cur, c.have, true); !slices.Equal(got, c.want) {
				t.Errorf("decideDirty = %v, want %v", got, c.want)
			}
		})
	}
	// self out of sync (b's view): it keeps no map, and drops those it had.
	b := set
	if got := decideDirty("b", b(5, "a", "b", "c"), b(6, "a", "c"), nil, true); got != nil {
		t.Errorf("self taken out: %v, want no map", got)
	}
	if got, want := decideDirty("b", b(5, "a", "b"), b(6, "a"), map[string]dirtyHave{"c": {Through: 5}}, true), []dirtyAction{{"c", dirtyDrop}}; !slices.Equal(got, want) {
		t.Errorf("self taken out with a map of c: %v, want %v", got, want)
	}
	if got, want := decideDirty("b", b(5, "a", "c"), b(6, "a", "b", "c"), nil, true), []dirtyAction(nil); !slices.Equal(got, want) {
		t.Errorf("self back in sync, all in sync: %v, want %v", got, want)
	}
	if got, want := decideDirty("a", set(4, "a", "b", "c"), set(5, "a", "c"), nil, false), []dirtyAction{{"b", dirtyStartAll}}; !slices.Equal(got, want) {
		t.Errorf("b taken out, replayed before this server caught up after a start: %v, want %v (it may have acknowledged writes after it in its earlier life)", got, want)
	}
	if got, want := decideDirty("c", b(5, "a"), b(6, "a", "c"), nil, true), []dirtyAction{{"b", dirtyStartAll}}; !slices.Equal(got, want) {
		t.Errorf("self back in sync while b is out: %v, want %v (it cannot name what b missed while it was out itself)", got, want)
	}
}

// TestStore_LoadDirty_AtStart: a server at start reads each replica's
// newest map file and removes the older ones; a torn one is removed and
// left out, so that decideDirty starts that replica's map all dirty
// ("at start, no file"), never clean.
func TestStore_LoadDirty_AtStart(t *testing.T) {
	dir := t.TempDir()
	vols := filepath.Join(dir, volumesDir)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(vols, 0o700))
	const id = "vol-00000000000000aa"
	mk := func(replica string, start uint64) *dirtyFile {
		d, err := createDirtyFile(dirtyPath(vols, id, replica, start), dirtyHeader{VolumeID: id, Replica: replica, Size: 1 << 20, Start: start, Through: start})
		must(err)
		must(d.mark(8192, 1))
		d.close()
		return d
	}
	old, cur, torn := mk("b", 3), mk("b", 12), mk("c", 12)
	b, err := os.ReadFile(torn.path)
	must(err)
	b[dirtyBlock+4] ^= 0xff
	must(os.WriteFile(torn.path, b, 0o600))
	s := &Store{dir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	got := s.loadDirty(id)
	defer func() {
		for _, d := range got {
			d.close()
		}
	}()
	if len(got) != 1 || got["b"] == nil || got["b"].path != cur.path || got["b"].hdr.Through != 12 || !got["b"].covers(8192, 1) {
		t.Fatalf("loaded %v; want b's map of start 12 alone, with its mark", got)
	}
	for _, p := range []string{old.path, torn.path} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s kept (%v); want it removed", filepath.Base(p), err)
		}
	}
	acts := decideDirty("a", ReplicaSet{}, ReplicaSet{VolumeID: id, Holder: "a", Replicas: []string{"a", "b", "c", "d", "e"}, InSync: []string{"a", "d", "e"}, MemberEpoch: 12},
		map[string]dirtyHave{"b": {Through: 12}}, false)
	if want := []dirtyAction{{"c", dirtyStartAll}}; !slices.Equal(acts, want) {
		t.Errorf("at start: %v; want b's map kept and c's all dirty: %v", acts, want)
	}
}

func TestDirtyPage(t *testing.T) {
	rs := []DirtyRange{{0, 8192}, {16384, 4096}, {65536, 4096}}
	type w = wire.DirtyRange
	r := func(off, n int64) w { return w{Off: off, Len: n} }
	cases := []struct {
		from int64
		max  int
		want []w
		next int64
	}{
		{0, 10, []w{r(0, 8192), r(16384, 4096), r(65536, 4096)}, 0},
		{0, 2, []w{r(0, 8192), r(16384, 4096)}, 65536},
		{65536, 2, []w{r(65536, 4096)}, 0},
		{4096, 1, []w{r(4096, 4096)}, 16384}, // a range that holds from is cut there
		{8192, 10, []w{r(16384, 4096), r(65536, 4096)}, 0},
		{1 << 20, 10, nil, 0},
	}
	for _, c := range cases {
		got, next := dirtyPage(rs, c.from, c.max)
		if !slices.Equal(got, c.want) || next != c.next {
			t.Errorf("dirtyPage(from %d, max %d) = %v, next %d; want %v, next %d", c.from, c.max, got, next, c.want, c.next)
		}
	}
}
