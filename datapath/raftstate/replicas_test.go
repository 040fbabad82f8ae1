package raftstate

import (
	"bytes"
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// replicated is a state with four members and vol1 on s1, s2, s3, all in
// sync at member epoch 1, granted to n1 at epoch 1.
func replicated(t *testing.T) *FSM {
	f := NewFSM()
	for _, c := range []Command{
		{Op: OpAddServer, Member: member("s1")},
		{Op: OpAddServer, Member: member("s2")},
		{Op: OpAddServer, Member: member("s3")},
		{Op: OpAddServer, Member: &Server{ID: "s4", RaftAddress: "127.0.0.1:7004"}},
		{Op: OpCreateVolume, VolumeID: vol1, Name: "pv-1", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1", Replicas: []string{"s1", "s2", "s3"}},
		{Op: OpGrant, VolumeID: vol1, Node: "n1", Use: datapath.UseReadWrite},
	} {
		if res := apply(t, f, c); res.err != nil {
			t.Fatalf("%s: %v", c.Op, res.err)
		}
	}
	return f
}

// TestFSM_ReplicaSet_CommittedChanges is the specification of the replica
// commands in the state machine, one after another: the replica set and
// member epoch after each, and what each refuses with the state unchanged.
func TestFSM_ReplicaSet_CommittedChanges(t *testing.T) {
	f := replicated(t)
	out := func(replica string, at uint64) Command {
		return Command{Op: OpReplicaOutOfSync, VolumeID: vol1, Replica: replica, MemberEpoch: at}
	}
	steps := []struct {
		name             string
		cmd              Command
		wantErr          error
		errText          string
		replicas, inSync string // after the step
		memberEpoch      uint64
	}{
		{name: "created in sync", cmd: Command{Op: OpFenceNode, Node: "n9"}, replicas: "s1 s2 s3", inSync: "s1 s2 s3", memberEpoch: 1},
		{name: "out of sync", cmd: out("s3", 1), replicas: "s1 s2 s3", inSync: "s1 s2", memberEpoch: 2},
		{name: "stale member epoch", cmd: out("s2", 1), wantErr: datapath.ErrStaleMemberEpoch,
			errText: "asked at member epoch 1; the volume is at member epoch 2", replicas: "s1 s2 s3", inSync: "s1 s2", memberEpoch: 2},
		{name: "below the quorum", cmd: out("s2", 2), wantErr: datapath.ErrReplicaQuorum,
			errText: "1 of 3 replicas would stay in sync, and at least 2 must", replicas: "s1 s2 s3", inSync: "s1 s2", memberEpoch: 2},
		{name: "the holder", cmd: out("s1", 2), wantErr: datapath.ErrInvalidArgument, errText: "is its holder", replicas: "s1 s2 s3", inSync: "s1 s2", memberEpoch: 2},
		{name: "unknown volume", cmd: Command{Op: OpReplicaOutOfSync, VolumeID: vol2, Replica: "s2"}, wantErr: datapath.ErrNotFound,
			replicas: "s1 s2 s3", inSync: "s1 s2", memberEpoch: 2},
		{name: "a server that is no replica", cmd: Command{Op: OpReplicaInSync, VolumeID: vol1, Replica: "s4", MemberEpoch: 2},
			wantErr: datapath.ErrInvalidArgument, errText: "server s4 is not one of its replicas", replicas: "s1 s2 s3", inSync: "s1 s2", memberEpoch: 2},
		{name: "back in sync", cmd: Command{Op: OpReplicaInSync, VolumeID: vol1, Replica: "s3", MemberEpoch: 2}, replicas: "s1 s2 s3", inSync: "s1 s2 s3", memberEpoch: 3},
		{name: "replace with a server that is no member", cmd: Command{Op: OpReplaceReplica, VolumeID: vol1, Replica: "s3", With: "s9", MemberEpoch: 3},
			wantErr: datapath.ErrInvalidArgument, errText: `replica on server "s9", which is not a member`, replicas: "s1 s2 s3", inSync: "s1 s2 s3", memberEpoch: 3},
		{name: "replace with a replica's server", cmd: Command{Op: OpReplaceReplica, VolumeID: vol1, Replica: "s3", With: "s2", MemberEpoch: 3},
			wantErr: datapath.ErrInvalidArgument, errText: "s2 already holds a replica", replicas: "s1 s2 s3", inSync: "s1 s2 s3", memberEpoch: 3},
		{name: "replace", cmd: Command{Op: OpReplaceReplica, VolumeID: vol1, Replica: "s3", With: "s4", MemberEpoch: 3}, replicas: "s1 s2 s4", inSync: "s1 s2", memberEpoch: 4},
		{name: "remove a server with a replica", cmd: Command{Op: OpRemoveServer, Member: &Server{ID: "s2"}}, wantErr: datapath.ErrInUse,
			errText: "server s2 holds the data of 1 volumes (" + vol1 + ")", replicas: "s1 s2 s4", inSync: "s1 s2", memberEpoch: 4},
		{name: "remove the replaced server", cmd: Command{Op: OpRemoveServer, Member: &Server{ID: "s3"}}, replicas: "s1 s2 s4", inSync: "s1 s2", memberEpoch: 4},
		{name: "the writer at its epoch", cmd: Command{Op: OpReplicaInSync, VolumeID: vol1, Replica: "s4", MemberEpoch: 4}, replicas: "s1 s2 s4", inSync: "s1 s2 s4", memberEpoch: 5},
		{name: "asked by the live writer", cmd: Command{Op: OpReplicaOutOfSync, VolumeID: vol1, Replica: "s4", MemberEpoch: 5, Node: "n1", Epoch: 1},
			replicas: "s1 s2 s4", inSync: "s1 s2", memberEpoch: 6},
		{name: "fence the writer", cmd: Command{Op: OpFence, VolumeID: vol1, Node: "n1"}, replicas: "s1 s2 s4", inSync: "s1 s2", memberEpoch: 6},
		{name: "asked by the fenced writer", cmd: Command{Op: OpReplicaOutOfSync, VolumeID: vol1, Replica: "s2", MemberEpoch: 6, Node: "n1", Epoch: 1},
			wantErr: datapath.ErrFenced, errText: "node n1 at epoch 1 holds no live grant at that epoch (the volume is at epoch 2)", replicas: "s1 s2 s4", inSync: "s1 s2", memberEpoch: 6},
	}
	for _, s := range steps {
		before := snapBytes(t, f)
		s.cmd.At = t0
		res := apply(t, f, s.cmd)
		if s.wantErr != nil {
			if !errors.Is(res.err, s.wantErr) || !strings.Contains(res.err.Error(), s.errText) {
				t.Fatalf("%s: err %v, want %v containing %q", s.name, res.err, s.wantErr, s.errText)
			}
			if after := snapBytes(t, f); !bytes.Equal(before, after) {
				t.Fatalf("%s: a refused change changed the state", s.name)
			}
		} else if res.err != nil {
			t.Fatalf("%s: %v", s.name, res.err)
		}
		v, err := f.Volume(vol1)
		if err != nil {
			t.Fatal(err)
		}
		set := v.ReplicaSet()
		if got := strings.Join(set.Replicas, " "); got != s.replicas {
			t.Fatalf("%s: replicas %q, want %q", s.name, got, s.replicas)
		}
		if got := strings.Join(set.InSync, " "); got != s.inSync {
			t.Fatalf("%s: in sync %q, want %q", s.name, got, s.inSync)
		}
		if set.MemberEpoch != s.memberEpoch {
			t.Fatalf("%s: member epoch %d, want %d", s.name, set.MemberEpoch, s.memberEpoch)
		}
	}
}

// TestFSM_ReplicaSet_BadInputChangesNothing: replica commands and creates
// with bad replicas are refused with a clear error, the state unchanged.
func TestFSM_ReplicaSet_BadInputChangesNothing(t *testing.T) {
	create := func(replicas ...string) Command {
		return Command{Op: OpCreateVolume, At: t0, VolumeID: vol2, Name: "pv-2", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1", Replicas: replicas}
	}
	cases := []struct {
		name    string
		cmd     Command
		wantErr error
		want    string
	}{
		{"create with a server twice", create("s1", "s2", "s2"), ErrBadCommand, "lists server s2 twice among its replicas (s1, s2, s2)"},
		{"create with six", create("s1", "s2", "s3", "s4", "s5", "s6"), ErrBadCommand, "has 6 replicas; 1 to 5 are allowed"},
		{"create with the holder not first", create("s2", "s1"), ErrBadCommand, "its first replica s2 must be its server s1"},
		{"create on a server that is no member", create("s1", "s2", "s9"), datapath.ErrInvalidArgument, `replica on server "s9", which is not a member`},
		{"create again with another count", Command{Op: OpCreateVolume, At: t0, VolumeID: vol2, Name: "pv-1", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1"},
			datapath.ErrAlreadyExists, "with 3 replicas; asked for 1"},
		{"out of sync without a replica", Command{Op: OpReplicaOutOfSync, At: t0, VolumeID: vol1}, ErrBadCommand, "server id is empty"},
		{"replace without a server", Command{Op: OpReplaceReplica, At: t0, VolumeID: vol1, Replica: "s2"}, ErrBadCommand, "server id is empty"},
		{"in sync with a replacement", Command{Op: OpReplicaInSync, At: t0, VolumeID: vol1, Replica: "s2", With: "s4"}, ErrBadCommand, "names no replacement server"},
		{"in sync with a writer", Command{Op: OpReplicaInSync, At: t0, VolumeID: vol1, Replica: "s2", Node: "n1"}, ErrBadCommand, "only replica-out-of-sync carries a writer"},
		{"out of sync with a bad node", Command{Op: OpReplicaOutOfSync, At: t0, VolumeID: vol1, Replica: "s2", Node: "n 1"}, ErrBadCommand, "white space"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := replicated(t)
			before := snapBytes(t, f)
			data, err := c.cmd.encode()
			if err != nil {
				t.Fatal(err)
			}
			res := applyData(f, data)
			if !errors.Is(res.err, c.wantErr) || !strings.Contains(res.err.Error(), c.want) {
				t.Fatalf("err %v, want %v containing %q", res.err, c.wantErr, c.want)
			}
			if after := snapBytes(t, f); !bytes.Equal(before, after) {
				t.Fatal("a bad command changed the state")
			}
		})
	}
}

// TestFSM_ReplicaSet_SnapshotRoundTrip: a snapshot keeps the replica set
// and member epoch, and the member epoch goes on from it.
func TestFSM_ReplicaSet_SnapshotRoundTrip(t *testing.T) {
	f := replicated(t)
	for _, c := range []Command{
		{Op: OpReplicaOutOfSync, VolumeID: vol1, Replica: "s3", MemberEpoch: 1},
		{Op: OpReplaceReplica, VolumeID: vol1, Replica: "s3", With: "s4", MemberEpoch: 2},
	} {
		if res := apply(t, f, c); res.err != nil {
			t.Fatal(res.err)
		}
	}
	data := snapBytes(t, f)
	if !bytes.Contains(data, []byte(`"replicas":["s1","s2","s4"],"inSync":["s1","s2"],"memberEpoch":3`)) {
		t.Fatalf("the snapshot does not record the replica set: %s", data)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if again := snapBytes(t, g); !bytes.Equal(again, data) {
		t.Fatalf("restored state encodes differently:\n%s\n%s", data, again)
	}
	if !reflect.DeepEqual(f.Volumes(), g.Volumes()) {
		t.Fatalf("restored volumes differ:\n%+v\n%+v", f.Volumes(), g.Volumes())
	}
	next := Command{Op: OpReplicaInSync, VolumeID: vol1, Replica: "s4", MemberEpoch: 3}
	a, b := apply(t, f, next), apply(t, g, next)
	if a.err != nil || b.err != nil || b.volume.MemberEpoch != 4 || !reflect.DeepEqual(a.volume, b.volume) {
		t.Fatalf("after restore: %+v %v, original %+v %v; want member epoch 4 on both", b.volume, b.err, a.volume, a.err)
	}

	good := string(data)
	for _, c := range []struct{ name, doc, want string }{
		{"in sync below the quorum", strings.Replace(good, `"inSync":["s1","s2"]`, `"inSync":["s1"]`, 1), "1 of 3 replicas in sync; at least 2 must be"},
		{"a replica twice", strings.Replace(good, `"replicas":["s1","s2","s4"]`, `"replicas":["s1","s2","s2"]`, 1), "lists server s2 twice"},
		{"in sync without replicas", strings.Replace(good, `"replicas":["s1","s2","s4"],`, ``, 1), "without replicas"},
	} {
		if c.doc == good {
			t.Fatalf("%s: the damage did not apply", c.name)
		}
		h := replicated(t)
		before := snapBytes(t, h)
		if err := h.Restore(io.NopCloser(strings.NewReader(c.doc))); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: err %v, want %q", c.name, err, c.want)
		}
		if !bytes.Equal(before, snapBytes(t, h)) {
			t.Fatalf("%s: a refused snapshot changed the state", c.name)
		}
	}
}

// TestFSM_ReleaseBeforeReplicaSets_LoadsUnchanged: a snapshot and log
// entries written by the release before replica sets (testdata/
// release-single-copy, made with that release's code) load as they did:
// every volume one copy on its server, in sync, member epoch 0, and the
// snapshot encodes again to the same bytes.
func TestFSM_ReleaseBeforeReplicaSets_LoadsUnchanged(t *testing.T) {
	snap, err := os.ReadFile("testdata/release-single-copy/snapshot.json")
	if err != nil {
		t.Fatal(err)
	}
	f := NewFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if again := snapBytes(t, f); !bytes.Equal(again, snap) {
		t.Fatalf("the release's snapshot encodes differently now:\n%s\n%s", snap, again)
	}
	checkSingleCopies(t, f, 2)

	log, err := os.ReadFile("testdata/release-single-copy/log")
	if err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	for _, entry := range bytes.Split(bytes.TrimSuffix(log, []byte("\n")), []byte("\n")) {
		if res := applyData(g, entry); res.err != nil {
			t.Fatalf("entry %q: %v", entry, res.err)
		}
	}
	checkSingleCopies(t, g, 1)
	if v, _ := g.Volume(vol1); v.Epoch != 2 {
		t.Fatalf("epoch %d after the log's grant and fence, want 2", v.Epoch)
	}
}

func checkSingleCopies(t *testing.T, f *FSM, n int) {
	t.Helper()
	vols := f.Volumes()
	if len(vols) != n {
		t.Fatalf("%d volumes, want %d", len(vols), n)
	}
	for _, v := range vols {
		want := datapath.SingleCopy(v.ID, v.Server)
		if set := v.ReplicaSet(); !reflect.DeepEqual(set, want) || v.Replicas != nil {
			t.Fatalf("volume %s: replica set %+v (recorded %v), want %+v", v.ID, set, v.Replicas, want)
		}
	}
}

// TestGroup_MemberEpochsNeverGoBack takes replicas out of sync and back
// through the group while its leader is killed, past a snapshot that the
// restarted server catches up from, and across a restart of every server:
// every acknowledged member epoch is one above the one before, a change
// asked at an older one is refused, and every server ends with the last.
func TestGroup_MemberEpochsNeverGoBack(t *testing.T) {
	c := newTestCluster(t, 3)
	var v Volume
	if err := c.retry(3*time.Second, func(g *Group) (err error) {
		v, err = g.CreateReplicatedVolume(bg, vol1, "pv-1", 1<<20, datapath.AccessRWO, []string{"s1", "s2", "s3"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if v.MemberEpoch != 1 {
		t.Fatalf("created at member epoch %d; want 1, so a client that does not fan writes out is refused", v.MemberEpoch)
	}
	last := v.MemberEpoch
	// change i: s2 out, s2 in, s3 out, s3 in, again and again.
	change := func(i int) {
		t.Helper()
		rep := []string{"s2", "s3"}[i%4/2]
		err := c.retry(5*time.Second, func(g *Group) (err error) {
			if i%2 == 0 {
				v, err = g.MarkReplicaOutOfSync(bg, vol1, rep, last, "", 0)
			} else {
				v, err = g.MarkReplicaInSync(bg, vol1, rep, last)
			}
			return err
		})
		if errors.Is(err, datapath.ErrStaleMemberEpoch) { // a try of unknown outcome was committed
			err = c.retry(5*time.Second, func(g *Group) (err error) { v, err = g.Volume(bg, vol1); return err })
		}
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if v.MemberEpoch != last+1 {
			t.Fatalf("change %d: member epoch %d, want %d", i, v.MemberEpoch, last+1)
		}
		last = v.MemberEpoch
	}
	change(0)
	l := c.waitLeader(time.Second)
	killedAt := c.group(l).raft.LastIndex()
	c.kill(l)
	n := 1
	for ; n < 1+3*int(testTiming.SnapshotThreshold); n++ { // past a snapshot and its trailing log
		change(n)
	}
	nl := c.waitLeader(time.Second)
	if err := c.group(nl).raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatalf("snapshot on the leader: %v", err)
	}
	if first, _ := c.group(nl).store.FirstIndex(); first <= killedAt+1 {
		t.Fatalf("the leader's log still starts at %d, after the killed server's %d: it would not need a snapshot", first, killedAt)
	}
	c.start(l)
	c.waitLocal(l, vol1, 5*time.Second, func(got Volume, _ []datapath.Attachment) bool { return got.MemberEpoch == last })

	for i := range c.ids {
		c.kill(i)
	}
	for i := range c.ids {
		c.start(i)
	}
	c.waitLeader(5 * time.Second)
	err := c.retry(5*time.Second, func(g *Group) error {
		_, err := g.MarkReplicaOutOfSync(bg, vol1, "s2", last-1, "", 0)
		return err
	})
	if !errors.Is(err, datapath.ErrStaleMemberEpoch) {
		t.Fatalf("a change at member epoch %d after a restart of every server: %v; want ErrStaleMemberEpoch", last-1, err)
	}
	change(n)
	for i := range c.ids {
		c.waitLocal(i, vol1, 5*time.Second, func(got Volume, _ []datapath.Attachment) bool { return got.MemberEpoch == last })
	}
}
