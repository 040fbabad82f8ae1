package datapath

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// fuzzVolumeID in a fuzz input stands for the id of the volume the harness
// creates (ids are random, the corpus is not).
const fuzzVolumeID = "vol-0123456789abcdef"

const fuzzToken = "tok"

// fuzzClock is the store's clock in the fuzz target: fixed, so that a call's
// effect on timestamps is known exactly.
var fuzzClock = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fuzzAuth turns the fuzzer's auth byte into the call's metadata: mostly the
// right token, sometimes a wrong one, none, or a malformed header.
func fuzzAuth(auth uint8) (md metadata.MD, ok bool) {
	switch auth % 8 {
	case 5:
		return metadata.Pairs(TokenMetadataKey, "Bearer not-"+fuzzToken), false
	case 6:
		return metadata.MD{}, false
	case 7:
		return metadata.Pairs(TokenMetadataKey, "Basic "+fuzzToken), false
	}
	return metadata.Pairs(TokenMetadataKey, "Bearer "+fuzzToken), true
}

// fuzzStore is a fresh store for one fuzz iteration: a seeded RWO volume
// granted to node-1 holding "seeded" at offset 0, and an RWX volume with a row
// in each state: node-1 and node-2 granted, node-3 released, node-4 fenced.
type fuzzStore struct {
	s              *Store
	seeded, shared string
}

func newFuzzStore(t *testing.T) fuzzStore {
	dir := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		// tmpfs: no fsync cost, so the fuzzer runs many more iterations.
		if d, err := os.MkdirTemp("/dev/shm", "vigil-fuzz"); err == nil {
			dir = d
			t.Cleanup(func() { _ = os.RemoveAll(d) })
		}
	}
	s, err := Open(dir, Options{Capacity: 1 << 30, Now: func() time.Time { return fuzzClock }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	seeded, err := s.CreateVolume("fuzz-seeded", 64<<10, AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := s.CreateVolume("fuzz-shared", 4096, AccessRWX)
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Grant(seeded.ID, "node-1")
	if err == nil {
		err = s.WriteAt(seeded.ID, "node-1", e, 0, []byte("seeded"))
	}
	if err == nil {
		_, err = s.Grant(shared.ID, "node-1")
	}
	for _, n := range []string{"node-2", "node-3", "node-4"} {
		if err == nil {
			_, err = s.Grant(shared.ID, n)
		}
	}
	if err == nil {
		err = s.Release(shared.ID, "node-3")
	}
	if err == nil {
		_, err = s.Fence(shared.ID, "node-4")
	}
	if err != nil {
		t.Fatal(err)
	}
	return fuzzStore{s: s, seeded: seeded.ID, shared: shared.ID}
}

// FuzzServer_Request sends arbitrary bytes as the request of an arbitrary
// method through the real handler (authentication, decoding, validation,
// store), on a fresh store each time, with the right token, a wrong one, none
// or a malformed one. A call without the right token must be refused as
// unauthenticated and change nothing, not even the activity record. Every
// other refusal must map to a known datapath error (never Internal) and change
// nothing. A call that succeeds must have exactly its documented effect
// (fuzz_effects_test.go).
func FuzzServer_Request(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed.auth, seed.method, seed.data)
	}
	f.Fuzz(func(t *testing.T, auth, method uint8, data []byte) {
		fs := newFuzzStore(t)
		srv, err := NewServer(fs.s, fuzzToken)
		if err != nil {
			t.Fatal(err)
		}
		md := serviceDesc.Methods[int(method)%len(serviceDesc.Methods)]
		data = bytes.ReplaceAll(data, []byte(fuzzVolumeID), []byte(fs.seeded))
		meta, authOK := fuzzAuth(auth)
		ctx := metadata.NewIncomingContext(context.Background(), meta)
		before := takeState(t, fs)
		dec := func(v any) error { return v.(*wire.Frame).Unmarshal(data) }
		resp, err := md.Handler(srv, ctx, dec, nil)
		after := takeState(t, fs)
		switch {
		case !authOK:
			if status.Code(err) != codes.Unauthenticated || FromStatus(err).(*RemoteError).Sentinel != ErrUnauthenticated {
				t.Fatalf("%s without the right token: %v; want Unauthenticated", md.MethodName, err)
			}
			if !same(before, after) {
				t.Fatalf("%s without the right token changed the state:\n%s\n%s", md.MethodName, before, after)
			}
		case err != nil:
			if c := status.Code(err); c == codes.Internal || c == codes.Unknown {
				t.Fatalf("%s: refusal is not a datapath error: %v", md.MethodName, err)
			}
			if FromStatus(err).(*RemoteError).Sentinel == nil {
				t.Fatalf("%s: refusal matches no sentinel: %v", md.MethodName, err)
			}
			if !same(before, after) {
				t.Fatalf("%s: refused request (%v) changed the state:\n%s\n%s", md.MethodName, err, before, after)
			}
		default:
			check := effects[md.MethodName]
			if check == nil {
				t.Fatalf("method %s has no effect check", md.MethodName)
			}
			if err := check(fs, data, resp.(wire.Message), before, after); err != nil {
				t.Fatalf("%s succeeded with the wrong effect: %v\nbefore:\n%s\nafter:\n%s", md.MethodName, err, before, after)
			}
		}
	})
}

// state summarizes everything a call can change: the durable part (volumes,
// attachment tables, announced stops, the seeded volume's data) and the
// activity record, rendered for comparison and structured (w) for the effect
// checks.
type state struct {
	durable, activity string
	w                 world
}

func (s state) String() string { return s.durable + s.activity }

func (s state) world() world { return s.w }

func same(a, b state) bool { return a.durable == b.durable && a.activity == b.activity }

func takeState(t *testing.T, fs fuzzStore) state {
	t.Helper()
	s, seeded := fs.s, fs.seeded
	vs, err := s.ListVolumes()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, v := range vs {
		as, _ := s.Attachments(v.ID)
		e, _ := s.Epoch(v.ID)
		fmt.Fprintf(&b, "%+v epoch %d %+v\n", v, e, as)
	}
	// The fuzzer may legitimately fence and then delete the seeded volume.
	if data, err := os.ReadFile(s.DataFile(seeded)); err == nil {
		fmt.Fprintf(&b, "data %x\n", sha256.Sum256(data))
	}
	s.leaves.mu.RLock()
	fmt.Fprintf(&b, "leaving %v\n", s.leaves.m)
	s.leaves.mu.RUnlock()
	r, err := s.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	// The activity record only: live-grant counts (and the listing they earn)
	// follow from the attachment tables, which the durable part holds.
	var a bytes.Buffer
	for _, n := range r.Nodes {
		if !n.LastHeartbeat.IsZero() || !n.LastIO.IsZero() || !n.LeavingUntil.IsZero() {
			fmt.Fprintf(&a, "%s heartbeat %s io %s leaving %s\n", n.Node, n.LastHeartbeat, n.LastIO, n.LeavingUntil)
		}
	}
	return state{durable: b.String(), activity: a.String(), w: worldOf(fs)}
}

type fuzzSeed struct {
	auth, method uint8
	data         []byte
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
		{wire.MethodFence, &wire.AttachRequest{VolumeID: fuzzVolumeID, Node: "node-1"}},
		{wire.MethodRelease, &wire.AttachRequest{VolumeID: fuzzVolumeID, Node: "node 1"}},
		{wire.MethodAttachments, &wire.VolumeRef{ID: fuzzVolumeID}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Offset: 0, Data: []byte("data")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: stale, Offset: 0, Data: []byte("zombie")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Offset: 64<<10 - 2, Data: []byte("past end")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Offset: -1, Data: []byte("x")}},
		{wire.MethodRead, &wire.ReadRequest{IOTarget: io, Offset: 0, Length: 1 << 30}},
		{wire.MethodRead, &wire.ReadRequest{IOTarget: io, Offset: 0, Length: 6}},
		{wire.MethodFlush, &wire.FlushRequest{IOTarget: io}},
		{wire.MethodHeartbeat, &wire.NodeRef{Node: "node-1"}},
		{wire.MethodConnectivity, &wire.ConnectivityRequest{Node: "node-1", VolumeID: fuzzVolumeID, WithinNanos: -1}},
		{wire.MethodNodeGrants, &wire.NodeRef{Node: "node-1"}},
		{wire.MethodFenceNode, &wire.NodeRef{Node: "node-1"}},
		{wire.MethodFenceNode, &wire.NodeRef{Node: ""}},
		{wire.MethodFenceNode, &wire.NodeRef{Node: "node-3"}},
		{wire.MethodGrant, &wire.AttachRequest{VolumeID: fuzzVolumeID, Node: "node-1"}},
		{wire.MethodLeave, &wire.LeaveRequest{Node: "node-1", DurationNanos: int64(time.Minute)}},
		{wire.MethodLeave, &wire.LeaveRequest{Node: "node-1", DurationNanos: -1}},
		{wire.MethodLeave, &wire.LeaveRequest{Node: "node-3", DurationNanos: int64(time.Hour)}},
		{wire.MethodNodes, &wire.Empty{}},
	}
	out := make([]fuzzSeed, 0, len(seeds)+4)
	for _, s := range seeds {
		out = append(out, fuzzSeed{0, methodIndex(s.name), s.m.MarshalAppend(nil)})
	}
	fence := (&wire.NodeRef{Node: "node-1"}).MarshalAppend(nil)
	return append(out,
		fuzzSeed{0, methodIndex(wire.MethodWrite), []byte{0xff, 0xff, 0xff}},
		fuzzSeed{5, methodIndex(wire.MethodFenceNode), fence},                                              // wrong token
		fuzzSeed{6, methodIndex(wire.MethodHeartbeat), (&wire.NodeRef{Node: "node-9"}).MarshalAppend(nil)}, // no token
		fuzzSeed{7, methodIndex(wire.MethodDeleteVolume), (&wire.VolumeRef{ID: fuzzVolumeID}).MarshalAppend(nil)},
	)
}

func TestFuzzSeeds_CoverEveryMethodAndAuthMode(t *testing.T) {
	methods, auths := map[uint8]bool{}, map[uint8]bool{}
	for _, s := range fuzzSeeds() {
		methods[s.method] = true
		auths[s.auth%8] = true
	}
	if len(methods) != len(serviceDesc.Methods) {
		t.Fatalf("seeds cover %d of %d methods", len(methods), len(serviceDesc.Methods))
	}
	for _, a := range []uint8{0, 5, 6, 7} {
		if !auths[a] {
			t.Fatalf("no seed with auth mode %d", a)
		}
	}
	for name := range effects {
		methodIndex(name) // every effect check names a real method
	}
}
