package datapath

import "testing"

// TestMovedAwayKeep is the rule for the data file of a replica the group
// moved away: removed only when a volume of the applied state has its id,
// its replica set does not name this server, it is not open for I/O, no
// create, delete or prepare of it is in flight, and this server has caught
// up; each other case names why it is kept.
func TestMovedAwayKeep(t *testing.T) {
	gone := replicaFile{Known: true, CaughtUp: true}
	with := func(f func(*replicaFile)) replicaFile { c := gone; f(&c); return c }
	for _, tc := range []struct {
		name string
		f    replicaFile
		want string
	}{
		{"moved away, caught up: removed", gone, ""},
		{"no volume has the id", with(func(f *replicaFile) { f.Known = false }), "no volume of the group has its id (the abandoned-file sweep's to remove)"},
		{"the set names this server", with(func(f *replicaFile) { f.Named = true }), "the volume's replica set names this server"},
		{"open for I/O", with(func(f *replicaFile) { f.Open = true }), "the volume is open here for I/O"},
		{"a file operation in flight", with(func(f *replicaFile) { f.Busy = true }), "a create, delete or prepare of its id is in flight here"},
		{"not caught up", with(func(f *replicaFile) { f.CaughtUp = false }), "this server has not caught up with the group's log since it started, and a later change may name it again"},
		{"named and not caught up: named first", with(func(f *replicaFile) { f.Named, f.CaughtUp = true, false }), "the volume's replica set names this server"},
		{"open and not caught up: open first", with(func(f *replicaFile) { f.Open, f.CaughtUp = true, false }), "the volume is open here for I/O"},
	} {
		if got := movedAwayKeep(tc.f); got != tc.want {
			t.Errorf("%s: movedAwayKeep(%+v) = %q; want %q", tc.name, tc.f, got, tc.want)
		}
	}
}
