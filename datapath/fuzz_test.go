package datapath

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// fuzzVolumeID in a fuzz input stands for the id of the volume the harness
// creates (ids are random, the corpus is not).
const fuzzVolumeID = "vol-0123456789abcdef"

// FuzzServer_Request sends arbitrary bytes as the request of an arbitrary
// method through the real handler (authentication, decoding, validation,
// store). Every refusal must map to a known datapath error (never Internal),
// and a refused request must change nothing: volumes, attachment table and the
// data of the seeded volume stay as they were.
func FuzzServer_Request(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed.method, seed.data)
	}
	store, err := Open(f.TempDir(), Options{Capacity: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = store.Close() })
	srv, err := NewServer(store, "tok")
	if err != nil {
		f.Fatal(err)
	}
	vol, err := store.CreateVolume("fuzz-seeded", 64<<10, AccessRWO)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := store.Grant(vol.ID, "node-1"); err != nil {
		f.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(TokenMetadataKey, "Bearer tok"))
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		md := serviceDesc.Methods[int(method)%len(serviceDesc.Methods)]
		data = bytes.ReplaceAll(data, []byte(fuzzVolumeID), []byte(vol.ID))
		before := snapshot(t, store, vol.ID)
		dec := func(v any) error { return v.(*wire.Frame).Unmarshal(data) }
		_, err := md.Handler(srv, ctx, dec, nil)
		if err == nil {
			return
		}
		if c := status.Code(err); c == codes.Internal || c == codes.Unknown {
			t.Fatalf("%s: refusal is not a datapath error: %v", md.MethodName, err)
		}
		if FromStatus(err).(*RemoteError).Sentinel == nil {
			t.Fatalf("%s: refusal matches no sentinel: %v", md.MethodName, err)
		}
		if after := snapshot(t, store, vol.ID); after != before {
			t.Fatalf("%s: refused request (%v) changed the state:\n%s\n%s", md.MethodName, err, before, after)
		}
	})
}

// snapshot summarizes the store's state as a string.
func snapshot(t *testing.T, s *Store, seeded string) string {
	t.Helper()
	vs, err := s.ListVolumes()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, v := range vs {
		as, _ := s.Attachments(v.ID)
		fmt.Fprintf(&b, "%+v %+v\n", v, as)
	}
	// The fuzzer may legitimately fence and then delete the seeded volume.
	if data, err := os.ReadFile(s.DataFile(seeded)); err == nil {
		fmt.Fprintf(&b, "%x", sha256.Sum256(data))
	}
	return b.String()
}

type fuzzSeed struct {
	method uint8
	data   []byte
}

// methodIndex finds a method's position in serviceDesc.
func methodIndex(name string) uint8 {
	for i, m := range serviceDesc.Methods {
		if m.MethodName == name {
			return uint8(i)
		}
	}
	panic("no method " + name)
}

func fuzzSeeds() []fuzzSeed {
	io := wire.IOTarget{VolumeID: fuzzVolumeID, Node: "node-1", Epoch: 1}
	stale := wire.IOTarget{VolumeID: fuzzVolumeID, Node: "node-1", Epoch: 0}
	seeds := []struct {
		name string
		m    wire.Message
	}{
		{wire.MethodCreateVolume, &wire.CreateVolumeRequest{Name: "pvc-x", Size: 4096, Access: "rwo"}},
		{wire.MethodCreateVolume, &wire.CreateVolumeRequest{Name: "fuzz-seeded", Size: 1, Access: "rwx"}},
		{wire.MethodDeleteVolume, &wire.VolumeRef{ID: fuzzVolumeID}},
		{wire.MethodGetVolume, &wire.VolumeRef{ID: "../../etc/passwd"}},
		{wire.MethodListVolumes, &wire.Empty{}},
		{wire.MethodCapacity, &wire.Empty{}},
		{wire.MethodGrant, &wire.AttachRequest{VolumeID: fuzzVolumeID, Node: "node-2"}},
		{wire.MethodFence, &wire.AttachRequest{VolumeID: fuzzVolumeID, Node: ""}},
		{wire.MethodRelease, &wire.AttachRequest{VolumeID: fuzzVolumeID, Node: "node 1"}},
		{wire.MethodAttachments, &wire.VolumeRef{ID: fuzzVolumeID}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Offset: 0, Data: []byte("data")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: stale, Offset: 0, Data: []byte("zombie")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Offset: 64<<10 - 2, Data: []byte("past end")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Offset: -1, Data: []byte("x")}},
		{wire.MethodRead, &wire.ReadRequest{IOTarget: io, Offset: 0, Length: 1 << 30}},
		{wire.MethodFlush, &wire.FlushRequest{IOTarget: io}},
		{wire.MethodHeartbeat, &wire.NodeRef{Node: "node-1"}},
		{wire.MethodConnectivity, &wire.ConnectivityRequest{Node: "node-1", VolumeID: fuzzVolumeID, WithinNanos: -1}},
	}
	out := make([]fuzzSeed, 0, len(seeds)+1)
	for _, s := range seeds {
		out = append(out, fuzzSeed{methodIndex(s.name), s.m.MarshalAppend(nil)})
	}
	return append(out, fuzzSeed{methodIndex(wire.MethodWrite), []byte{0xff, 0xff, 0xff}})
}

func TestFuzzSeeds_CoverEveryMethod(t *testing.T) {
	seen := map[uint8]bool{}
	for _, s := range fuzzSeeds() {
		seen[s.method] = true
	}
	if len(seen) != len(serviceDesc.Methods) {
		t.Fatalf("seeds cover %d of %d methods", len(seen), len(serviceDesc.Methods))
	}
}
