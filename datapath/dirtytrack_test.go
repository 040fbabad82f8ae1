package datapath

import (
	"slices"
	"testing"
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
			if got := decideDirty("a", c.old, c.cur, c.have); !slices.Equal(got, c.want) {
				t.Errorf("decideDirty = %v, want %v", got, c.want)
			}
		})
	}
	// self out of sync (b's view): it keeps no map, and drops those it had.
	b := set
	if got := decideDirty("b", b(5, "a", "b", "c"), b(6, "a", "c"), nil); got != nil {
		t.Errorf("self taken out: %v, want no map", got)
	}
	if got, want := decideDirty("b", b(5, "a", "b"), b(6, "a"), map[string]dirtyHave{"c": {Through: 5}}), []dirtyAction{{"c", dirtyDrop}}; !slices.Equal(got, want) {
		t.Errorf("self taken out with a map of c: %v, want %v", got, want)
	}
	if got, want := decideDirty("b", b(5, "a", "c"), b(6, "a", "b", "c"), nil), []dirtyAction(nil); !slices.Equal(got, want) {
		t.Errorf("self back in sync, all in sync: %v, want %v", got, want)
	}
	if got, want := decideDirty("c", b(5, "a"), b(6, "a", "c"), nil), []dirtyAction{{"b", dirtyStartAll}}; !slices.Equal(got, want) {
		t.Errorf("self back in sync while b is out: %v, want %v (it cannot name what b missed while it was out itself)", got, want)
	}
}
