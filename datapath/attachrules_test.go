package datapath

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// TestAttachTable is the specification of the attachment table's rules,
// shared by Store and the replicated control state: for each table and
// operation, the step decided, or the refusal.
func TestAttachTable(t *testing.T) {
	granted := func(e uint64, use GrantUse) AttachRow { return AttachRow{Epoch: e, State: StateGranted, Use: use} }
	fenced := func(e uint64) AttachRow { return AttachRow{Epoch: e, State: StateFenced} }
	released := func(e uint64, use GrantUse) AttachRow { return AttachRow{Epoch: e, State: StateReleased, Use: use} }
	table := func(mode AccessMode, epoch uint64, rows map[string]AttachRow) AttachTable {
		return AttachTable{VolumeID: "vol-0000000000000001", Access: mode, Epoch: epoch, Rows: rows}
	}
	none := map[string]AttachRow{}
	cases := []struct {
		name    string
		table   AttachTable
		op      string // grant, fence, fence-if-live, release
		node    string
		use     GrantUse
		want    AttachStep
		wantErr error
		errText string
	}{
		{name: "grant on a new volume", table: table(AccessRWO, 0, none), op: "grant", node: "n1", use: UseReadWrite,
			want: AttachStep{Node: "n1", Epoch: 1, Row: granted(1, UseReadWrite), Changed: true}},
		{name: "grant again keeps the epoch", table: table(AccessRWO, 3, map[string]AttachRow{"n1": granted(3, UseReadWrite)}), op: "grant", node: "n1", use: UseReadWrite,
			want: AttachStep{Node: "n1", Epoch: 3, Row: granted(3, UseReadWrite), WasLive: true}},
		{name: "legacy row is read-write", table: table(AccessRWO, 3, map[string]AttachRow{"n1": granted(3, "")}), op: "grant", node: "n1", use: UseReadWrite,
			want: AttachStep{Node: "n1", Epoch: 3, Row: granted(3, ""), WasLive: true}},
		{name: "new use in place", table: table(AccessRWO, 3, map[string]AttachRow{"n1": granted(3, UseReadWrite)}), op: "grant", node: "n1", use: UseReadOnly,
			want: AttachStep{Node: "n1", Epoch: 3, Row: granted(3, UseReadOnly), Changed: true, WasLive: true}},
		{name: "rwo second node refused", table: table(AccessRWO, 3, map[string]AttachRow{"n1": granted(3, UseReadWrite)}), op: "grant", node: "n2", use: UseReadWrite,
			wantErr: ErrAttachedElsewhere, errText: "it is RWO and node n1 holds a live grant (epoch 3)"},
		{name: "rwo after fence", table: table(AccessRWO, 4, map[string]AttachRow{"n1": fenced(4)}), op: "grant", node: "n2", use: UseFilesystemWriter,
			want: AttachStep{Node: "n2", Epoch: 5, Row: granted(5, UseFilesystemWriter), Changed: true}},
		{name: "rwo regrant after release", table: table(AccessRWO, 4, map[string]AttachRow{"n1": released(4, UseReadWrite)}), op: "grant", node: "n1", use: UseReadWrite,
			want: AttachStep{Node: "n1", Epoch: 5, Row: granted(5, UseReadWrite), Changed: true}},
		{name: "rwx second block writer", table: table(AccessRWX, 1, map[string]AttachRow{"n1": granted(1, UseReadWrite)}), op: "grant", node: "n2", use: UseReadWrite,
			want: AttachStep{Node: "n2", Epoch: 2, Row: granted(2, UseReadWrite), Changed: true}},
		{name: "rwx second fs writer refused", table: table(AccessRWX, 1, map[string]AttachRow{"n1": granted(1, UseFilesystemWriter)}), op: "grant", node: "n2", use: UseFilesystemWriter,
			wantErr: ErrAttachedElsewhere, errText: "volumeMode: Block"},
		{name: "use change checked like a grant", table: table(AccessRWX, 2, map[string]AttachRow{"n1": granted(1, UseReadWrite), "n2": granted(2, UseReadOnly)}), op: "grant", node: "n2", use: UseFilesystemWriter,
			wantErr: ErrAttachedElsewhere, errText: "node n1 holds a live rw grant"},
		{name: "bad use", table: table(AccessRWO, 0, none), op: "grant", node: "n1", use: "rw-everything",
			wantErr: ErrInvalidArgument, errText: `grant use "rw-everything": allowed are`},
		{name: "bad node", table: table(AccessRWO, 0, none), op: "grant", node: "n 1", use: UseReadWrite,
			wantErr: ErrInvalidArgument, errText: "white space"},
		{name: "fence a live grant", table: table(AccessRWO, 3, map[string]AttachRow{"n1": granted(3, UseReadWrite)}), op: "fence", node: "n1",
			want: AttachStep{Node: "n1", Epoch: 4, Row: fenced(4), Changed: true, WasLive: true}},
		{name: "fence a node without a row", table: table(AccessRWO, 3, none), op: "fence", node: "n9",
			want: AttachStep{Node: "n9", Epoch: 4, Row: fenced(4), Changed: true}},
		{name: "fence twice moves again", table: table(AccessRWO, 4, map[string]AttachRow{"n1": fenced(4)}), op: "fence", node: "n1",
			want: AttachStep{Node: "n1", Epoch: 5, Row: fenced(5), Changed: true}},
		{name: "fence-if-live of a live grant", table: table(AccessRWO, 3, map[string]AttachRow{"n1": granted(3, UseReadWrite)}), op: "fence-if-live", node: "n1",
			want: AttachStep{Node: "n1", Epoch: 4, Row: fenced(4), Changed: true, WasLive: true}},
		{name: "fence-if-live of a fenced node", table: table(AccessRWO, 4, map[string]AttachRow{"n1": fenced(4)}), op: "fence-if-live", node: "n1",
			want: AttachStep{Node: "n1", Epoch: 4, Row: fenced(4)}},
		{name: "fence-if-live of an unknown node", table: table(AccessRWO, 4, none), op: "fence-if-live", node: "n1",
			want: AttachStep{Node: "n1", Epoch: 4}},
		{name: "release a live grant keeps epoch and use", table: table(AccessRWO, 3, map[string]AttachRow{"n1": granted(3, UseReadOnly)}), op: "release", node: "n1",
			want: AttachStep{Node: "n1", Epoch: 3, Row: released(3, UseReadOnly), Changed: true, WasLive: true}},
		{name: "release of a fenced node changes nothing", table: table(AccessRWO, 4, map[string]AttachRow{"n1": fenced(4)}), op: "release", node: "n1",
			want: AttachStep{Node: "n1", Epoch: 4, Row: fenced(4)}},
		{name: "release bad node", table: table(AccessRWO, 4, none), op: "release", node: "",
			wantErr: ErrInvalidArgument, errText: "node is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.table
			before.Rows = maps.Clone(c.table.Rows)
			var (
				got AttachStep
				err error
			)
			switch c.op {
			case "grant":
				got, err = c.table.Grant(c.node, c.use)
			case "fence":
				got, err = c.table.Fence(c.node)
			case "fence-if-live":
				got, err = c.table.FenceIfLive(c.node)
			case "release":
				got, err = c.table.Release(c.node)
			}
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.errText) {
					t.Fatalf("%s %s: err %v, want %v containing %q", c.op, c.node, err, c.wantErr, c.errText)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s %s: %v", c.op, c.node, err)
			}
			if got != c.want {
				t.Fatalf("%s %s:\n got %+v\nwant %+v", c.op, c.node, got, c.want)
			}
			if !reflect.DeepEqual(c.table, before) {
				t.Fatalf("the decision changed its input table: %+v", c.table)
			}
			after := c.table.With(got)
			if after.Epoch < c.table.Epoch {
				t.Fatalf("epoch went back: %d -> %d", c.table.Epoch, after.Epoch)
			}
			if got.Changed && after.Rows[c.node] != got.Row {
				t.Fatalf("With did not record the row: %+v", after.Rows)
			}
		})
	}
}

func TestAttachTable_CheckDelete(t *testing.T) {
	tb := AttachTable{VolumeID: "vol-0000000000000001", Access: AccessRWX, Epoch: 3, Rows: map[string]AttachRow{
		"n1": {Epoch: 1, State: StateReleased}, "n2": {Epoch: 2, State: StateFenced}}}
	if err := tb.CheckDelete(); err != nil {
		t.Fatalf("no live grant: %v", err)
	}
	tb.Rows["n3"] = AttachRow{Epoch: 3, State: StateGranted}
	err := tb.CheckDelete()
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "node n3 holds a live grant (epoch 3)") {
		t.Fatalf("live grant: %v", err)
	}
}
