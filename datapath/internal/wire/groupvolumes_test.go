package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestGroupVolumeList_RoundTrip: a list encodes and decodes back to itself,
// and a truncated one is refused as malformed.
func TestGroupVolumeList_RoundTrip(t *testing.T) {
	in := &GroupVolumeList{Items: []GroupVolume{
		{ID: "vol-0123456789abcdef", Name: "pvc-1", Server: "datapath-1", Epoch: 6},
		{ID: "vol-fedcba9876543210", Name: "pvc-2", Epoch: 1 << 40},
	}}
	b := in.MarshalAppend(nil)
	var out GroupVolumeList
	if err := out.Unmarshal(b); err != nil || !reflect.DeepEqual(&out, in) {
		t.Fatalf("round trip: %+v, %v; want %+v", out, err, in)
	}
	if err := new(GroupVolumeList).Unmarshal(b[:len(b)-1]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v; want ErrMalformed", err)
	}
}

// TestGroupVolumeList_Replicas: the replica sets follow the items only
// when asked (WithReplicas), so an answer to a client from before is the
// bytes it decodes; an answer of a server from before decodes with none;
// a garbled section is refused as malformed.
func TestGroupVolumeList_Replicas(t *testing.T) {
	items := []GroupVolume{
		{ID: "vol-0123456789abcdef", Name: "pvc-1", Server: "s1", Epoch: 6},
		{ID: "vol-fedcba9876543210", Name: "pvc-2", Server: "s1", Epoch: 2, Replicas: []string{"s1", "s2", "s3"}, InSync: []string{"s1", "s3"}, MemberEpoch: 4},
	}
	with := &GroupVolumeList{Items: items, WithReplicas: true}
	b := with.MarshalAppend(nil)
	var out GroupVolumeList
	if err := out.Unmarshal(b); err != nil || !reflect.DeepEqual(&out, with) {
		t.Fatalf("round trip: %+v, %v; want %+v", out, err, with)
	}

	without := (&GroupVolumeList{Items: items}).MarshalAppend(nil)
	var bare []GroupVolume
	for _, v := range items {
		bare = append(bare, GroupVolume{ID: v.ID, Name: v.Name, Server: v.Server, Epoch: v.Epoch})
	}
	if old := (&GroupVolumeList{Items: bare}).MarshalAppend(nil); !reflect.DeepEqual(without, old) {
		t.Fatalf("an answer not asking for replicas differs from the one before replica sets:\n%x\n%x", without, old)
	}
	out = GroupVolumeList{}
	if err := out.Unmarshal(without); err != nil || out.WithReplicas || !reflect.DeepEqual(out.Items, bare) {
		t.Fatalf("an answer without replicas: %+v, %v; want the items, no replica sets", out, err)
	}

	for name, bad := range map[string][]byte{
		"truncated":   b[:len(b)-1],
		"count":       append(bytes.Clone(without), 0, 0xff, 0xff, 0xff, 0x0f),
		"varint":      append(bytes.Clone(without), 0x80),
		"extra bytes": append(bytes.Clone(b), 0),
	} {
		if err := new(GroupVolumeList).Unmarshal(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v; want ErrMalformed", name, err)
		}
	}
}
