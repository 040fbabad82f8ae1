package raftstate

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// force is a force-replicas command of vol1 asked at member epoch at.
func force(at uint64, replicas ...string) Command {
	return Command{Op: OpForceReplicas, VolumeID: vol1, Replicas: replicas, MemberEpoch: at, By: "controller token (line 1 of tokens)", Reason: "s2 and s3 burnt down"}
}

// TestFSM_ForceReplicas_Refusals: every refusal of a force, each with a
// clear error and the state unchanged, on replicated's vol1 (s1 s2 s3 in
// sync) with s3 out of sync at member epoch 2.
func TestFSM_ForceReplicas_Refusals(t *testing.T) {
	long := force(2, "s1")
	long.Reason = strings.Repeat("x", MaxForceReason+1)
	blank := force(2, "s1")
	blank.Reason = " \t"
	nobody := force(2, "s1")
	nobody.By = ""
	unknown := force(2, "s1")
	unknown.VolumeID = vol2
	cases := []struct {
		name    string
		cmd     Command
		wantErr error
		want    string
	}{
		{"unknown volume", unknown, datapath.ErrNotFound, "volume " + vol2},
		{"a server that is no replica", force(2, "s4"), datapath.ErrInvalidArgument, "server s4 is not one of its replicas (s1, s2, s3)"},
		{"a server that is no member", force(2, "s9"), datapath.ErrInvalidArgument, `replica on server "s9", which is not a member`},
		{"no replica", force(2), ErrBadCommand, "names no replica"},
		{"a replica twice", force(2, "s1", "s1"), ErrBadCommand, "names server s1 twice"},
		{"every replica", force(2, "s1", "s2", "s3"), datapath.ErrInvalidArgument, "names all 3 of its replicas"},
		{"out of sync next to in sync", force(2, "s2", "s3"), datapath.ErrInvalidArgument, "names out-of-sync replicas next to in-sync ones"},
		{"empty reason", blank, ErrBadCommand, "a force needs a reason"},
		{"long reason", long, ErrBadCommand, "the reason is 257 bytes; at most 256 are allowed"},
		{"nobody asked", nobody, ErrBadCommand, "says nobody asked for it"},
		{"stale member epoch", force(1, "s1"), datapath.ErrStaleMemberEpoch, "asked at member epoch 1; the volume is at member epoch 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := replicated(t)
			if res := apply(t, f, Command{Op: OpReplicaOutOfSync, VolumeID: vol1, Replica: "s3", MemberEpoch: 1}); res.err != nil {
				t.Fatal(res.err)
			}
			before := snapBytes(t, f)
			res := apply(t, f, c.cmd)
			if !errors.Is(res.err, c.wantErr) || !strings.Contains(res.err.Error(), c.want) {
				t.Fatalf("err %v, want %v containing %q", res.err, c.wantErr, c.want)
			}
			if after := snapBytes(t, f); !bytes.Equal(before, after) {
				t.Fatal("a refused force changed the state")
			}
		})
	}
}

// TestFSM_ForceReplicas_SingleCopyRefused: a volume of one replica has
// nothing to force.
func TestFSM_ForceReplicas_SingleCopyRefused(t *testing.T) {
	f := replicated(t)
	if res := apply(t, f, Command{Op: OpCreateVolume, VolumeID: vol2, Name: "pv-2", Size: 1 << 20, Access: datapath.AccessRWO, Server: "s1"}); res.err != nil {
		t.Fatal(res.err)
	}
	before := snapBytes(t, f)
	c := force(0, "s1")
	c.VolumeID = vol2
	res := apply(t, f, c)
	if !errors.Is(res.err, datapath.ErrInvalidArgument) || !strings.Contains(res.err.Error(), "it has one replica (s1); there is nothing to force") {
		t.Fatalf("err %v", res.err)
	}
	if !bytes.Equal(before, snapBytes(t, f)) {
		t.Fatal("a refused force changed the state")
	}
}

// TestFSM_ForceReplicas_Change is the specification of a force: the forced
// replicas become the whole set, in sync, the holder moves to a forced one
// when it was not, the member epoch moves on by one, the audit is kept with
// the command's time (never the state machine's clock), and the ordinary
// rules go on from the new set.
func TestFSM_ForceReplicas_Change(t *testing.T) {
	at := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	cases := []struct {
		name           string
		forced         []string
		holder, inSync string
	}{
		{"the holder alone", []string{"s1"}, "s1", "s1"},
		{"another alone: it becomes the holder", []string{"s3"}, "s3", "s3"},
		{"two, listed out of order", []string{"s3", "s2"}, "s2", "s2 s3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := replicated(t)
			cmd := force(1, c.forced...)
			cmd.At = at
			res := apply(t, f, cmd)
			if res.err != nil {
				t.Fatal(res.err)
			}
			set := res.volume.ReplicaSet()
			if set.Holder != c.holder || res.volume.Server != c.holder || strings.Join(set.Replicas, " ") != c.inSync ||
				strings.Join(set.InSync, " ") != c.inSync || set.MemberEpoch != 2 {
				t.Fatalf("after the force: %+v (server %s); want holder %s, replicas and in sync %q, member epoch 2", set, res.volume.Server, c.holder, c.inSync)
			}
			a, ok := f.Forced(vol1)
			want := ForceAudit{By: cmd.By, At: at, Reason: cmd.Reason, Forced: strings.Fields(c.inSync),
				ReplicasBefore: []string{"s1", "s2", "s3"}, InSyncBefore: []string{"s1", "s2", "s3"}, MemberEpoch: 2}
			if !ok || !reflect.DeepEqual(a, want) {
				t.Fatalf("audit %+v %v, want %+v", a, ok, want)
			}
			again := apply(t, f, force(2, c.forced[0]))
			if len(c.forced) == 1 && !strings.Contains(again.err.Error(), "one replica") {
				t.Fatalf("forcing again a set of one: %v", again.err)
			}
		})
	}
}

// TestFSM_ForceReplicas_SnapshotRoundTrip: a snapshot keeps the forced set
// and its audit, and the member epoch goes on from it; a damaged audit is
// refused.
func TestFSM_ForceReplicas_SnapshotRoundTrip(t *testing.T) {
	f := replicated(t)
	if res := apply(t, f, force(1, "s2", "s3")); res.err != nil {
		t.Fatal(res.err)
	}
	data := snapBytes(t, f)
	if !bytes.Contains(data, []byte(`"forced":{"by":"controller token (line 1 of tokens)"`)) {
		t.Fatalf("the snapshot does not record the force: %s", data)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if again := snapBytes(t, g); !bytes.Equal(again, data) {
		t.Fatalf("restored state encodes differently:\n%s\n%s", data, again)
	}
	a, _ := f.Forced(vol1)
	if b, ok := g.Forced(vol1); !ok || !reflect.DeepEqual(a, b) || !reflect.DeepEqual(f.Volumes(), g.Volumes()) {
		t.Fatalf("restored audit %+v, want %+v", b, a)
	}
	next := Command{Op: OpReplicaOutOfSync, VolumeID: vol1, Replica: "s3", MemberEpoch: 2}
	if res := apply(t, g, next); !errors.Is(res.err, datapath.ErrReplicaQuorum) {
		t.Fatalf("out of sync below the floor of the forced set of 2: %v", res.err)
	}
	if res := apply(t, g, Command{Op: OpReplicaInSync, VolumeID: vol1, Replica: "s1", MemberEpoch: 2}); !errors.Is(res.err, datapath.ErrInvalidArgument) {
		t.Fatalf("a server that left the set is no replica any more: %v", res.err)
	}
	for name, bad := range map[string]string{
		"no reason":       `"reason":""`,
		"epoch above":     `"memberEpoch":9}`,
		"nobody asked it": `"by":""`,
	} {
		var old string
		switch name {
		case "no reason":
			old = `"reason":"s2 and s3 burnt down"`
		case "epoch above":
			old = `"memberEpoch":2}`
		default:
			old = `"by":"controller token (line 1 of tokens)"`
		}
		damaged := bytes.Replace(data, []byte(old), []byte(bad), 1)
		if bytes.Equal(damaged, data) {
			t.Fatalf("%s: nothing replaced", name)
		}
		if err := NewFSM().Restore(io.NopCloser(bytes.NewReader(damaged))); err == nil || !strings.Contains(err.Error(), "forced") {
			t.Fatalf("%s: restore: %v", name, err)
		}
	}
}
