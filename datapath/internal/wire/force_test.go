package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestGroupVolumeList_Forced: the forced section follows the replica sets
// only when asked (WithForced), so an answer without it is the bytes a
// client from before forces decodes; it round-trips; a truncated one is
// refused as malformed.
func TestGroupVolumeList_Forced(t *testing.T) {
	items := []GroupVolume{
		{ID: "vol-0123456789abcdef", Name: "pvc-1", Server: "s1", Epoch: 6},
		{ID: "vol-fedcba9876543210", Name: "pvc-2", Server: "s2", Epoch: 2, Replicas: []string{"s2"}, InSync: []string{"s2"}, MemberEpoch: 5,
			Forced: &ForceRecord{By: "the controller (ctl)", Reason: "lost s1 and s3", AtUnix: 1_800_000_000_000_000_000, Forced: []string{"s2"},
				ReplicasBefore: []string{"s1", "s2", "s3"}, InSyncBefore: []string{"s1", "s2"}, MemberEpoch: 5}},
	}
	with := &GroupVolumeList{Items: items, WithReplicas: true, WithForced: true}
	b := with.MarshalAppend(nil)
	var out GroupVolumeList
	if err := out.Unmarshal(b); err != nil || !reflect.DeepEqual(&out, with) {
		t.Fatalf("round trip: %+v, %v; want %+v", out, err, with)
	}
	if err := new(GroupVolumeList).Unmarshal(b[:len(b)-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v; want ErrMalformed", err)
	}
	without := &GroupVolumeList{Items: items, WithReplicas: true}
	plain := &GroupVolumeList{Items: []GroupVolume{items[0], items[1]}, WithReplicas: true}
	plain.Items[1].Forced = nil
	if !bytes.Equal(without.MarshalAppend(nil), plain.MarshalAppend(nil)) {
		t.Fatal("an answer without the forced section carries a force")
	}
	out = GroupVolumeList{}
	if err := out.Unmarshal(without.MarshalAppend(nil)); err != nil || out.WithForced || out.Items[1].Forced != nil {
		t.Fatalf("without the section: %+v, %v", out, err)
	}
}

// TestForceReplicas_RoundTrip: the request and the report encode and
// decode back to themselves.
func TestForceReplicas_RoundTrip(t *testing.T) {
	req := &ForceReplicasRequest{VolumeID: "vol-0123456789abcdef", Replicas: []string{"s1", "s2"}, MemberEpoch: 3, Reason: "lost s3", DryRun: true}
	var r ForceReplicasRequest
	if err := r.Unmarshal(req.MarshalAppend(nil)); err != nil || !reflect.DeepEqual(&r, req) {
		t.Fatalf("request: %+v, %v", r, err)
	}
	rep := &ForceReplicasReport{VolumeID: "vol-0123456789abcdef", Name: "pvc", Holder: "s3", Replicas: []string{"s1", "s2", "s3"}, InSync: []string{"s3"},
		MemberEpoch: 3, Unreachable: []string{"s3"}, NewHolder: "s1", Forced: []string{"s1"}, NewMemberEpoch: 4, Done: true}
	var p ForceReplicasReport
	if err := p.Unmarshal(rep.MarshalAppend(nil)); err != nil || !reflect.DeepEqual(&p, rep) {
		t.Fatalf("report: %+v, %v", p, err)
	}
}
