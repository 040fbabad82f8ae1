package wire

import (
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
