package raftstate

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
)

const vol3 = "vol-0000000000000003"

// TestFSM_AbandonFile: a file a volume names is not abandoned (refused,
// nothing changed); an unnamed one is recorded, again without error, and
// from then on a create of its id is refused, also after a snapshot and
// its restore. A snapshot without abandoned files reads as before them.
func TestFSM_AbandonFile(t *testing.T) {
	f := populated(t)
	before := snapBytes(t, f)
	if bytes.Contains(before, []byte(`"abandoned"`)) {
		t.Fatalf("a snapshot without abandoned files names them: %s", before)
	}
	res := apply(t, f, Command{Op: OpAbandonFile, VolumeID: vol1, Server: "s1"})
	if !errors.Is(res.err, datapath.ErrAlreadyExists) || !strings.Contains(res.err.Error(), `volume "pv-1"'s, held by server s1; its data file is not abandoned`) {
		t.Fatalf("abandon the file of a volume: %v; want ErrAlreadyExists naming the volume", res.err)
	}
	if after := snapBytes(t, f); !bytes.Equal(before, after) {
		t.Fatal("a refused abandon changed the state")
	}
	for range 2 {
		if res := apply(t, f, Command{Op: OpAbandonFile, VolumeID: vol3, Server: "s2"}); res.err != nil {
			t.Fatalf("abandon an unnamed file: %v", res.err)
		}
	}
	create := Command{Op: OpCreateVolume, VolumeID: vol3, Name: "pv-3", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s2"}
	checkRefused := func(f *FSM) {
		t.Helper()
		res := apply(t, f, create)
		if !errors.Is(res.err, datapath.ErrNotFound) || !strings.Contains(res.err.Error(), "removed by server s2 as abandoned") {
			t.Fatalf("create of an abandoned file's id: %v; want ErrNotFound saying it was removed as abandoned", res.err)
		}
		if _, _, named := f.VolumeTable(vol3); named {
			t.Fatal("the refused create made the volume")
		}
	}
	checkRefused(f)
	data := snapBytes(t, f)
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if again := snapBytes(t, g); !bytes.Equal(again, data) {
		t.Fatalf("restored state encodes differently:\n%s\n%s", data, again)
	}
	checkRefused(g)
	other := create
	other.VolumeID = "vol-0000000000000004"
	if res := apply(t, g, other); res.err != nil {
		t.Fatalf("a create of the name under a new id: %v", res.err)
	}
}

// TestFSM_AbandonFile_BadInput: malformed abandon entries and snapshots are
// refused by name, the state unchanged.
func TestFSM_AbandonFile_BadInput(t *testing.T) {
	for _, c := range []struct {
		name string
		cmd  Command
		want string
	}{
		{"bad id", Command{Op: OpAbandonFile, VolumeID: "../x", Server: "s1"}, "is not of the form vol-"},
		{"no server", Command{Op: OpAbandonFile, VolumeID: vol3}, "server id is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := populated(t)
			before := snapBytes(t, f)
			res := apply(t, f, c.cmd)
			if !errors.Is(res.err, ErrBadCommand) || !strings.Contains(res.err.Error(), c.want) {
				t.Fatalf("err %v, want ErrBadCommand containing %q", res.err, c.want)
			}
			if after := snapBytes(t, f); !bytes.Equal(before, after) {
				t.Fatal("a bad entry changed the state")
			}
		})
	}
	f := populated(t)
	if res := apply(t, f, Command{Op: OpAbandonFile, VolumeID: vol3, Server: "s2"}); res.err != nil {
		t.Fatal(res.err)
	}
	good := string(snapBytes(t, f))
	for _, c := range []struct{ name, doc, want string }{
		{"named and abandoned", strings.Replace(good, `"id":"`+vol3+`"`, `"id":"`+vol1+`"`, 1), "also listed as an abandoned file"},
		{"bad server", strings.Replace(good, `"server":"s2"}]}`, `"server":""}]}`, 1), "abandoned file: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.doc == good {
				t.Fatal("the damage did not apply")
			}
			err := NewFSM().Restore(io.NopCloser(strings.NewReader(c.doc)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}
