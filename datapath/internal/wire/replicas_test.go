package wire

import (
	"errors"
	"reflect"
	"testing"
)

// TestMarkOutOfSync_RoundTrip: the request and its answer encode and decode
// back to themselves, and a truncated one is malformed.
func TestMarkOutOfSync_RoundTrip(t *testing.T) {
	for _, in := range []Message{
		&MarkOutOfSyncRequest{VolumeID: "vol-0123456789abcdef", Replica: "datapath-2", MemberEpoch: 3, Node: "node-1", Epoch: 7},
		&MarkOutOfSyncRequest{VolumeID: "vol-0123456789abcdef", Replica: "datapath-2"},
		&ReplicaSetAnswer{Holder: "datapath-0", Replicas: []string{"datapath-0", "datapath-1", "datapath-2"}, InSync: []string{"datapath-0", "datapath-1"}, MemberEpoch: 4},
		&DirtyRegionsRequest{VolumeID: "vol-0123456789abcdef", Replica: "datapath-2", Node: "node-1", Epoch: 7, From: 4096},
		&DirtyRegionsRequest{VolumeID: "vol-0123456789abcdef", Replica: "datapath-2"},
		&DirtyRegionsAnswer{Since: 3, MemberEpoch: 5, All: true, Bytes: 1 << 30, Ranges: []DirtyRange{{0, 1 << 30}}},
		&DirtyRegionsAnswer{Since: 3, MemberEpoch: 5, Bytes: 4096, Ranges: []DirtyRange{{4096, 4096}}, Next: 1 << 20},
	} {
		b := in.MarshalAppend(nil)
		out := reflect.New(reflect.TypeOf(in).Elem()).Interface().(Message)
		if err := out.Unmarshal(b); err != nil || !reflect.DeepEqual(in, out) {
			t.Errorf("%T: decoded %+v, %v; want %+v", in, out, err, in)
		}
		if err := out.Unmarshal(b[:len(b)-1]); !errors.Is(err, ErrMalformed) {
			t.Errorf("%T truncated: %v; want ErrMalformed", in, err)
		}
	}
}
