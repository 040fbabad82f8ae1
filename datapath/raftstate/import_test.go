package raftstate

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// importCmd is an import of vol1 onto s1 at epoch 3: n1 fenced at 2, n2
// granted at 3 as a filesystem writer.
func importCmd() Command {
	return Command{Op: OpImportVolume, VolumeID: vol1, Name: "pvc-a", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1",
		Created: t0.Add(-time.Hour), Epoch: 3, Rows: []ImportRow{
			{Node: "n1", Epoch: 2, State: datapath.StateFenced, Updated: t0.Add(-time.Hour)},
			{Node: "n2", Epoch: 3, State: datapath.StateGranted, Use: datapath.UseFilesystemWriter, Updated: t0.Add(-time.Hour)},
		}}
}

// TestFSM_ImportVolume_EpochsKeptOnceAndBadRowsRefused: an imported volume
// keeps its epoch and table, and the rules go on from them; importing it
// again changes nothing; an import with a bad row, a taken name or a server
// that is not a member changes nothing and says what was wrong; the
// observer hears of the imported volume.
func TestFSM_ImportVolume_EpochsKeptOnceAndBadRowsRefused(t *testing.T) {
	f := NewFSM()
	var heard []string
	f.OnApplied(func(ids []string) { heard = append(heard, ids...) })
	if res := apply(t, f, Command{Op: OpAddServer, Member: &Server{ID: "s1", RaftAddress: "10.0.0.1:9601"}}); res.err != nil {
		t.Fatal(res.err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Command)
		want string
	}{
		{"row above the volume's epoch", func(c *Command) { c.Rows[1].Epoch = 4 }, "epoch 4 above the volume's 3"},
		{"node twice", func(c *Command) { c.Rows[1].Node = "n1" }, "node n1 has two rows"},
		{"unknown state", func(c *Command) { c.Rows[0].State = "lost" }, `state "lost"`},
		{"no creation time", func(c *Command) { c.Created = time.Time{} }, "no creation time"},
		{"not a member", func(c *Command) { c.Server = "s9" }, "not a member"},
	} {
		c := importCmd()
		tc.edit(&c)
		before := snapBytes(t, f)
		res := apply(t, f, c)
		if res.err == nil || !strings.Contains(res.err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming %q", tc.name, res.err, tc.want)
		}
		if after := snapBytes(t, f); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: the refused import changed the state", tc.name)
		}
	}
	if res := apply(t, f, importCmd()); res.err != nil || res.volume.Epoch != 3 {
		t.Fatalf("import: %+v", res)
	}
	before := snapBytes(t, f)
	if res := apply(t, f, importCmd()); res.err != nil || !reflect.DeepEqual(before, snapBytes(t, f)) {
		t.Fatalf("import again: %v, or the state changed", res.err)
	}
	other := importCmd()
	other.VolumeID = vol2
	if res := apply(t, f, other); !errors.Is(res.err, datapath.ErrAlreadyExists) {
		t.Fatalf("import another id under a taken name: %v, want ErrAlreadyExists", res.err)
	}
	rows, _ := f.Attachments(vol1)
	if len(rows) != 2 || rows[0].Epoch != 2 || rows[0].State != datapath.StateFenced || rows[1].Use != datapath.UseFilesystemWriter {
		t.Fatalf("imported table: %+v", rows)
	}
	if res := apply(t, f, Command{Op: OpGrant, VolumeID: vol1, Node: "n3", Use: datapath.UseReadWrite}); !errors.Is(res.err, datapath.ErrAttachedElsewhere) {
		t.Fatalf("grant next to the imported live grant: %v, want ErrAttachedElsewhere", res.err)
	}
	if res := apply(t, f, Command{Op: OpFence, VolumeID: vol1, Node: "n2"}); res.err != nil || res.epoch != 4 {
		t.Fatalf("fence after the import: %+v; want epoch 4", res)
	}
	if !reflect.DeepEqual(heard, []string{vol1, vol1, vol1}) {
		t.Fatalf("observer heard %v; want the import, the import again and the fence", heard)
	}
}
