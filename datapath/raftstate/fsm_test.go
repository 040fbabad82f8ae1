package raftstate

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

var t0 = time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)

const (
	vol1 = "vol-0000000000000001"
	vol2 = "vol-0000000000000002"
)

// applyData applies one raw entry at the next index.
func applyData(f *FSM, data []byte) result {
	res, _ := f.Apply(&raft.Log{Type: raft.LogCommand, Data: data}).(result)
	return res
}

func apply(t *testing.T, f *FSM, c Command) result {
	t.Helper()
	if c.At.IsZero() {
		c.At = t0
	}
	data, err := c.encode()
	if err != nil {
		t.Fatal(err)
	}
	return applyData(f, data)
}

// snapBytes is the FSM's state as its snapshot encodes it.
func snapBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string      { return "mem" }
func (*memSink) Cancel() error   { return nil }
func (*memSink) Close() error    { return nil }
func (s *memSink) Bytes() []byte { return s.Buffer.Bytes() }

func member(id string) *Server {
	return &Server{ID: id, RaftAddress: "127.0.0.1:" + map[string]string{"s1": "7001", "s2": "7002", "s3": "7003"}[id], Node: "node-" + id}
}

// TestFSM_Apply is the state machine's specification, one command after
// another: what each returns and what the volume's epoch is after it.
func TestFSM_Apply(t *testing.T) {
	f := NewFSM()
	steps := []struct {
		name      string
		cmd       Command
		wantEpoch uint64 // the result's epoch
		wantErr   error
		errText   string
		volEpoch  uint64 // vol1's epoch after the step
	}{
		{name: "create before any member", cmd: Command{Op: OpCreateVolume, VolumeID: vol1, Name: "pv-1", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1"},
			wantErr: datapath.ErrInvalidArgument, errText: `placed on server "s1", which is not a member; members are none`},
		{name: "add member", cmd: Command{Op: OpAddServer, Member: member("s1")}},
		{name: "same raft address, other id", cmd: Command{Op: OpAddServer, Member: &Server{ID: "s9", RaftAddress: "127.0.0.1:7001"}},
			wantErr: datapath.ErrInvalidArgument, errText: "already server s1's"},
		{name: "create", cmd: Command{Op: OpCreateVolume, VolumeID: vol1, Name: "pv-1", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1"}},
		{name: "create again is the same volume", cmd: Command{Op: OpCreateVolume, VolumeID: vol2, Name: "pv-1", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1"}},
		{name: "create again differently", cmd: Command{Op: OpCreateVolume, VolumeID: vol2, Name: "pv-1", Size: 2 << 20, Access: datapath.AccessRWO, Server: "s1"},
			wantErr: datapath.ErrAlreadyExists, errText: "asked for 2097152 bytes"},
		{name: "id taken", cmd: Command{Op: OpCreateVolume, VolumeID: vol1, Name: "pv-2", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1"},
			wantErr: datapath.ErrInvalidArgument, errText: "is taken by volume"},
		{name: "grant n1", cmd: Command{Op: OpGrant, VolumeID: vol1, Node: "n1", Use: datapath.UseReadWrite}, wantEpoch: 1, volEpoch: 1},
		{name: "grant n1 again", cmd: Command{Op: OpGrant, VolumeID: vol1, Node: "n1", Use: datapath.UseReadWrite}, wantEpoch: 1, volEpoch: 1},
		{name: "grant n2 refused", cmd: Command{Op: OpGrant, VolumeID: vol1, Node: "n2", Use: datapath.UseReadWrite},
			wantErr: datapath.ErrAttachedElsewhere, errText: "node n1 holds a live grant (epoch 1)", volEpoch: 1},
		{name: "delete refused", cmd: Command{Op: OpDeleteVolume, VolumeID: vol1}, wantErr: datapath.ErrInUse, volEpoch: 1},
		{name: "remove the data's server refused", cmd: Command{Op: OpRemoveServer, Member: &Server{ID: "s1"}},
			wantErr: datapath.ErrInUse, errText: "holds the data of 1 volumes (" + vol1 + ")", volEpoch: 1},
		{name: "fence n1", cmd: Command{Op: OpFence, VolumeID: vol1, Node: "n1"}, wantEpoch: 2, volEpoch: 2},
		{name: "grant n2", cmd: Command{Op: OpGrant, VolumeID: vol1, Node: "n2", Use: datapath.UseFilesystemWriter}, wantEpoch: 3, volEpoch: 3},
		{name: "release n2", cmd: Command{Op: OpRelease, VolumeID: vol1, Node: "n2"}, wantEpoch: 3, volEpoch: 3},
		{name: "release n2 again", cmd: Command{Op: OpRelease, VolumeID: vol1, Node: "n2"}, wantEpoch: 3, volEpoch: 3},
		{name: "grant unknown volume", cmd: Command{Op: OpGrant, VolumeID: vol2, Node: "n2", Use: datapath.UseReadWrite}, wantErr: datapath.ErrNotFound, volEpoch: 3},
		{name: "fence-node n3: nothing live", cmd: Command{Op: OpFenceNode, Node: "n3"}, volEpoch: 3},
	}
	for _, s := range steps {
		res := apply(t, f, s.cmd)
		if s.wantErr != nil {
			if !errors.Is(res.err, s.wantErr) || !strings.Contains(res.err.Error(), s.errText) {
				t.Fatalf("%s: err %v, want %v containing %q", s.name, res.err, s.wantErr, s.errText)
			}
		} else if res.err != nil {
			t.Fatalf("%s: %v", s.name, res.err)
		}
		if res.epoch != s.wantEpoch {
			t.Fatalf("%s: epoch %d, want %d", s.name, res.epoch, s.wantEpoch)
		}
		if v, err := f.Volume(vol1); err == nil && v.Epoch != s.volEpoch {
			t.Fatalf("%s: volume epoch %d, want %d", s.name, v.Epoch, s.volEpoch)
		}
	}
	att, _ := f.Attachments(vol1)
	want := []datapath.Attachment{
		{VolumeID: vol1, Node: "n1", Epoch: 2, State: datapath.StateFenced, Use: datapath.UseReadWrite, Updated: t0},
		{VolumeID: vol1, Node: "n2", Epoch: 3, State: datapath.StateReleased, Use: datapath.UseFilesystemWriter, Updated: t0},
	}
	if !reflect.DeepEqual(att, want) {
		t.Fatalf("attachments:\n got %+v\nwant %+v", att, want)
	}
	if res := apply(t, f, Command{Op: OpDeleteVolume, VolumeID: vol1}); res.err != nil {
		t.Fatalf("delete without live grant: %v", res.err)
	}
	if len(f.Volumes()) != 0 {
		t.Fatalf("volume left after delete: %+v", f.Volumes())
	}
	if res := apply(t, f, Command{Op: OpDeleteVolume, VolumeID: vol1}); res.err != nil {
		t.Fatalf("delete of an unknown id: %v", res.err)
	}
}

func TestFSM_FenceNode_OnlyLiveGrantsInOneEntry(t *testing.T) {
	f := NewFSM()
	apply(t, f, Command{Op: OpAddServer, Member: member("s1")})
	for i, id := range []string{vol1, vol2, "vol-0000000000000003"} {
		if res := apply(t, f, Command{Op: OpCreateVolume, VolumeID: id, Name: "pv-" + id, Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1"}); res.err != nil {
			t.Fatal(res.err)
		}
		if i < 2 {
			apply(t, f, Command{Op: OpGrant, VolumeID: id, Node: "n1", Use: datapath.UseReadWrite})
		}
	}
	apply(t, f, Command{Op: OpRelease, VolumeID: vol2, Node: "n1"})
	res := apply(t, f, Command{Op: OpFenceNode, Node: "n1"})
	want := []datapath.FencedVolume{{VolumeID: vol1, Epoch: 2}}
	if res.err != nil || !reflect.DeepEqual(res.fenced, want) {
		t.Fatalf("fence-node: %+v %v, want %+v", res.fenced, res.err, want)
	}
	if res := apply(t, f, Command{Op: OpFenceNode, Node: "n1"}); len(res.fenced) != 0 {
		t.Fatalf("second fence-node fenced again: %+v", res.fenced)
	}
}

func TestFSM_Leave_SettleAndRunOut(t *testing.T) {
	f := NewFSM()
	apply(t, f, Command{Op: OpLeave, At: t0, Node: "n1", Until: t0.Add(time.Minute)})
	apply(t, f, Command{Op: OpClearLeave, At: t0.Add(datapath.LeaveSettle / 2), Node: "n1"})
	if l := f.Leaves(); len(l) != 1 || !l[0].Until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("a heartbeat within the settle time cleared the leave: %+v", l)
	}
	apply(t, f, Command{Op: OpClearLeave, At: t0.Add(datapath.LeaveSettle), Node: "n1"})
	if l := f.Leaves(); len(l) != 0 {
		t.Fatalf("a heartbeat after the settle time left the leave: %+v", l)
	}
	apply(t, f, Command{Op: OpLeave, At: t0, Node: "n2", Until: t0.Add(time.Second)})
	apply(t, f, Command{Op: OpLeave, At: t0.Add(2 * time.Second), Node: "n3", Until: t0.Add(time.Minute)})
	if l := f.Leaves(); len(l) != 1 || l[0].Node != "n3" {
		t.Fatalf("a leave that ran out is still kept: %+v", l)
	}
}

// populated is a state with a member, two volumes, rows of every state and
// a leave.
func populated(t *testing.T) *FSM {
	f := NewFSM()
	for _, c := range []Command{
		{Op: OpAddServer, Member: member("s1")},
		{Op: OpAddServer, Member: member("s2")},
		{Op: OpCreateVolume, VolumeID: vol1, Name: "pv-1", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1"},
		{Op: OpCreateVolume, VolumeID: vol2, Name: "pv-2", Size: 2 << 20, Access: datapath.AccessRWX, Server: "s2"},
		{Op: OpGrant, VolumeID: vol1, Node: "n1", Use: datapath.UseReadWrite},
		{Op: OpFence, VolumeID: vol1, Node: "n1"},
		{Op: OpGrant, VolumeID: vol1, Node: "n2", Use: datapath.UseFilesystemWriter},
		{Op: OpGrant, VolumeID: vol2, Node: "n1", Use: datapath.UseReadOnly},
		{Op: OpGrant, VolumeID: vol2, Node: "n3", Use: datapath.UseReadWrite},
		{Op: OpRelease, VolumeID: vol2, Node: "n3"},
		{Op: OpLeave, Node: "n4", Until: t0.Add(time.Minute)},
	} {
		if res := apply(t, f, c); res.err != nil {
			t.Fatalf("%s: %v", c.Op, res.err)
		}
	}
	return f
}

// TestFSM_SnapshotRestore_RoundTrip: a restored state reads the same,
// encodes to the same bytes, and goes on from the same epochs.
func TestFSM_SnapshotRestore_RoundTrip(t *testing.T) {
	f := populated(t)
	data := snapBytes(t, f)
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if again := snapBytes(t, g); !bytes.Equal(again, data) {
		t.Fatalf("restored state encodes differently:\n%s\n%s", data, again)
	}
	for _, id := range []string{vol1, vol2} {
		a, _ := f.Attachments(id)
		b, _ := g.Attachments(id)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: attachments %+v, restored %+v", id, a, b)
		}
	}
	if !reflect.DeepEqual(f.Volumes(), g.Volumes()) || !reflect.DeepEqual(f.Servers(), g.Servers()) || !reflect.DeepEqual(f.Leaves(), g.Leaves()) {
		t.Fatalf("restored state differs:\n%+v\n%+v", f.Volumes(), g.Volumes())
	}
	next := Command{Op: OpFence, VolumeID: vol1, Node: "n2"}
	if a, b := apply(t, f, next), apply(t, g, next); a.epoch != 4 || b.epoch != 4 {
		t.Fatalf("fence after restore: epoch %d (original %d), want 4: epochs must go on, not start over", b.epoch, a.epoch)
	}
}

func TestFSM_Restore_DamagedSnapshotRefused(t *testing.T) {
	good := string(snapBytes(t, populated(t)))
	cases := []struct{ name, doc, want string }{
		{"not json", "{", "restore snapshot"},
		{"newer version", strings.Replace(good, `"version":1`, `"version":2`, 1), "format version 2"},
		{"unknown field", strings.Replace(good, `"version":1`, `"version":1,"extra":1`, 1), "unknown field"},
		{"row above epoch", strings.Replace(good, `"node":"n2","epoch":3`, `"node":"n2","epoch":9`, 1), "epoch 9 above the volume's 3"},
		{"bad state", strings.Replace(good, `"state":"released"`, `"state":"gone"`, 1), `unknown state "gone"`},
		{"duplicate volume", strings.Replace(good, `"id":"`+vol2+`"`, `"id":"`+vol1+`"`, 1), "appears twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.doc == good {
				t.Fatal("the damage did not apply: the test's snapshot changed shape")
			}
			f := populated(t)
			before := snapBytes(t, f)
			err := f.Restore(io.NopCloser(strings.NewReader(c.doc)))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			if after := snapBytes(t, f); !bytes.Equal(before, after) {
				t.Fatal("a refused snapshot changed the state")
			}
		})
	}
}

// TestFSM_Apply_BadInputChangesNothing: an entry that is not a well-formed
// command gets a clear error as its result on every server, and the state
// stays as it was.
func TestFSM_Apply_BadInputChangesNothing(t *testing.T) {
	enc := func(c Command) []byte { d, _ := c.encode(); return d }
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "empty entry"},
		{"newer encoding", append([]byte{2}, `{"op":"grant"}`...), "encoding version 2; this server knows version 1 only"},
		{"garbage", append([]byte{1}, "\x00\xff garbage"...), "bad command: invalid character"},
		{"unknown op", enc(Command{Op: "format-disk", At: t0}), `unknown op "format-disk"; known are create-volume, delete-volume, grant`},
		{"unknown field", append([]byte{1}, `{"op":"fence","at":"2026-11-29T01:00:00Z","volumeID":"`+vol1+`","node":"n1","force":true}`...), `unknown field "force"`},
		{"trailing data", append(enc(Command{Op: OpFence, At: t0, VolumeID: vol1, Node: "n1"}), `{}`...), "data after the command"},
		{"no time", enc(Command{Op: OpFence, VolumeID: vol1, Node: "n1"}), "fence command without a time"},
		{"grant without use", enc(Command{Op: OpGrant, At: t0, VolumeID: vol1, Node: "n1"}), `grant use ""`},
		{"fence bad volume id", enc(Command{Op: OpFence, At: t0, VolumeID: "../etc", Node: "n1"}), "is not of the form vol-"},
		{"fence bad node", enc(Command{Op: OpFence, At: t0, VolumeID: vol1, Node: "n 1"}), "white space"},
		{"create bad size", enc(Command{Op: OpCreateVolume, At: t0, VolumeID: vol2, Name: "x", Size: -1, Access: datapath.AccessRWO, Server: "s1"}), "volume size -1 bytes"},
		{"leave ends before it starts", enc(Command{Op: OpLeave, At: t0, Node: "n1", Until: t0}), "not after the command's time"},
		{"add-server bad address", enc(Command{Op: OpAddServer, At: t0, Member: &Server{ID: "s4", RaftAddress: "nowhere"}}), `raft address of server s4 "nowhere"`},
		{"remove-server without member", enc(Command{Op: OpRemoveServer, At: t0}), "remove-server without a member"},
		{"oversize", append([]byte{1}, make([]byte, maxCommand)...), "at most 16384 are allowed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := populated(t)
			before := snapBytes(t, f)
			res := applyData(f, c.data)
			if !errors.Is(res.err, ErrBadCommand) || !strings.Contains(res.err.Error(), c.want) {
				t.Fatalf("err %v, want ErrBadCommand containing %q", res.err, c.want)
			}
			if after := snapBytes(t, f); !bytes.Equal(before, after) {
				t.Fatal("a bad entry changed the state")
			}
		})
	}
}
