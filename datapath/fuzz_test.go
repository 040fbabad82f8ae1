package datapath

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
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

// The fuzz target's tokens file: the controller, and the engines of node-1
// (live grants on both volumes), node-2 (a live grant on the shared volume) and
// node-4 (fenced on the shared volume).
const fuzzTokens = `controller fuzz-controller-token
node node-1 fuzz-node-1-token-xx
node node-2 fuzz-node-2-token-xx
node node-4 fuzz-node-4-token-xx
`

// fuzzClock is the store's clock in the fuzz target: fixed, so that a call's
// effect on timestamps is known exactly.
var fuzzClock = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fuzzGen is the write session generation the harness opens first, for
// node-1 on the seeded volume (generations start at the clock's nanoseconds):
// a write in a fuzz input carries it to be applied.
var fuzzGen = uint64(fuzzClock.UnixNano()) + 1

// fuzzCaller is who the fuzzer's auth byte makes the caller: an identity the
// tokens file knows, or none (a wrong token, no token, a malformed header).
type fuzzCaller struct {
	md   metadata.MD
	ok   bool // the token is valid
	role Role
	node string // an engine's own node
}

// fuzzAuth turns the fuzzer's auth byte into the call's metadata and the
// identity it proves.
func fuzzAuth(auth uint8) fuzzCaller {
	bearer := func(tok string) metadata.MD { return metadata.Pairs(TokenMetadataKey, "Bearer "+tok) }
	switch auth % 8 {
	case 0, 1:
		return fuzzCaller{md: bearer("fuzz-controller-token"), ok: true, role: RoleController}
	case 2:
		return fuzzCaller{md: bearer("fuzz-node-1-token-xx"), ok: true, role: RoleEngine, node: "node-1"}
	case 3:
		return fuzzCaller{md: bearer("fuzz-node-2-token-xx"), ok: true, role: RoleEngine, node: "node-2"}
	case 4:
		return fuzzCaller{md: bearer("fuzz-node-4-token-xx"), ok: true, role: RoleEngine, node: "node-4"}
	case 5:
		return fuzzCaller{md: bearer("not-fuzz-controller-token")}
	case 6:
		return fuzzCaller{md: metadata.MD{}}
	}
	return fuzzCaller{md: metadata.Pairs(TokenMetadataKey, "Basic fuzz-controller-token")}
}

// fuzzAllowed is the fuzz target's own statement of who may do what (the
// server's is the methodAccess table): the controller everything but a
// node's own acts; an engine reads one volume, and acts, releases and lists
// its grants as its own node only.
func fuzzAllowed(c fuzzCaller, method, node string) bool {
	nodeActs := map[string]bool{wire.MethodRead: true, wire.MethodWrite: true, wire.MethodFlush: true,
		wire.MethodHeartbeat: true, wire.MethodLeave: true, wire.MethodOpenWriteSession: true}
	switch c.role {
	case RoleController:
		return !nodeActs[method]
	case RoleEngine:
		switch method {
		case wire.MethodGetVolume, wire.MethodAttachments:
			return true
		case wire.MethodRelease, wire.MethodNodeGrants:
			return node == c.node
		}
		return nodeActs[method] && node == c.node
	}
	return false
}

// fuzzRequests is a fresh request message per method, to learn the node a
// request names the way the server decodes it.
var fuzzRequests = map[string]func() wire.Message{
	wire.MethodCreateVolume:     func() wire.Message { return &wire.CreateVolumeRequest{} },
	wire.MethodDeleteVolume:     func() wire.Message { return &wire.VolumeRef{} },
	wire.MethodGetVolume:        func() wire.Message { return &wire.VolumeRef{} },
	wire.MethodListVolumes:      func() wire.Message { return &wire.Empty{} },
	wire.MethodCapacity:         func() wire.Message { return &wire.Empty{} },
	wire.MethodGrant:            func() wire.Message { return &wire.AttachRequest{} },
	wire.MethodFence:            func() wire.Message { return &wire.AttachRequest{} },
	wire.MethodRelease:          func() wire.Message { return &wire.AttachRequest{} },
	wire.MethodAttachments:      func() wire.Message { return &wire.VolumeRef{} },
	wire.MethodWrite:            func() wire.Message { return &wire.WriteRequest{} },
	wire.MethodOpenWriteSession: func() wire.Message { return &wire.OpenSessionRequest{} },
	wire.MethodRead:             func() wire.Message { return &wire.ReadRequest{} },
	wire.MethodFlush:            func() wire.Message { return &wire.FlushRequest{} },
	wire.MethodHeartbeat:        func() wire.Message { return &wire.NodeRef{} },
	wire.MethodConnectivity:     func() wire.Message { return &wire.ConnectivityRequest{} },
	wire.MethodNodeGrants:       func() wire.Message { return &wire.NodeRef{} },
	wire.MethodFenceNode:        func() wire.Message { return &wire.NodeRef{} },
	wire.MethodLeave:            func() wire.Message { return &wire.LeaveRequest{} },
	wire.MethodNodes:            func() wire.Message { return &wire.Empty{} },
	wire.MethodFailedVolumes:    func() wire.Message { return &wire.Empty{} },
	wire.MethodServers:          func() wire.Message { return &wire.Empty{} },
	wire.MethodGroupVolumes:     func() wire.Message { return &wire.Empty{} },
	wire.MethodClearFailure:     func() wire.Message { return &wire.VolumeRef{} },
	wire.MethodWaitApplied:      func() wire.Message { return &wire.WaitAppliedRequest{} },
	wire.MethodPrepareVolume:    func() wire.Message { return &wire.CreateVolumeRequest{} },
	wire.MethodPrepareReplica:   func() wire.Message { return &wire.CreateVolumeRequest{} },
	wire.MethodAddServer:        func() wire.Message { return &wire.AddServerRequest{} },
	wire.MethodMarkOutOfSync:    func() wire.Message { return &wire.MarkOutOfSyncRequest{} },
	wire.MethodForceReplicas:    func() wire.Message { return &wire.ForceReplicasRequest{} },
	wire.MethodDirtyRegions:     func() wire.Message { return &wire.DirtyRegionsRequest{} },
}

// fuzzRequestNode decodes data as method's request; ok is false when it does
// not decode (the server must then refuse it as invalid).
func fuzzRequestNode(method string, data []byte) (node string, ok bool) {
	m := fuzzRequests[method]()
	if err := m.Unmarshal(data); err != nil {
		return "", false
	}
	return requestNode(m), true
}

// fuzzStore is a fresh store for one fuzz iteration: a seeded RWO volume
// granted to node-1 holding "seeded" at offset 0, and an RWX volume with a row
// in each state: node-1 and node-2 granted, node-3 released, node-4 fenced.
// node-1 has a write session open on the seeded volume (generation fuzzGen),
// node-1 and node-2 on the shared one (gens).
type fuzzStore struct {
	s              *Store
	seeded, shared string
	gens           map[sessionKey]fuzzSession
}

// fuzzSession is a write session the harness opened.
type fuzzSession struct{ epoch, gen uint64 }

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
	gens := map[sessionKey]fuzzSession{}
	for _, k := range []sessionKey{{seeded.ID, "node-1"}, {shared.ID, "node-1"}, {shared.ID, "node-2"}} {
		e, err := s.Epoch(k.volumeID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range mustAttachments(t, s, k.volumeID) {
			if a.Node == k.node {
				e = a.Epoch
			}
		}
		gen, err := s.OpenWriteSession(k.volumeID, k.node, e)
		if err != nil {
			t.Fatal(err)
		}
		gens[k] = fuzzSession{e, gen}
	}
	if g := gens[sessionKey{seeded.ID, "node-1"}].gen; g != fuzzGen {
		t.Fatalf("the first generation is %d; the corpus writes under %d", g, fuzzGen)
	}
	return fuzzStore{s: s, seeded: seeded.ID, shared: shared.ID, gens: gens}
}

func mustAttachments(t *testing.T, s *Store, id string) []Attachment {
	t.Helper()
	as, err := s.Attachments(id)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// FuzzServer_Request sends arbitrary bytes as the request of an arbitrary
// method through the real handler (authentication, decoding, authorization,
// validation, store), on a fresh store each time, as an arbitrary caller: the
// controller, the engine of node-1, node-2 or node-4, or someone with a wrong
// token, none or a malformed one. A call without a valid token must be refused
// as unauthenticated and change nothing, not even the activity record. A call
// the caller may not make (fuzzAllowed: an engine granting, fencing or acting
// as another node, the controller writing) must be refused as permission
// denied, name the caller's node and the request's, and change nothing. Every
// other refusal must map to a known datapath error (never Internal) and
// change nothing. A call that succeeds must have exactly its documented
// effect (fuzz_effects_test.go).
func FuzzServer_Request(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed.auth, seed.method, seed.data)
	}
	tokens, err := ParseTokens(strings.NewReader(fuzzTokens), "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, auth, method uint8, data []byte) {
		fs := newFuzzStore(t)
		srv, err := NewServer(fs.s, tokens)
		if err != nil {
			t.Fatal(err)
		}
		md := serviceDesc.Methods[int(method)%len(serviceDesc.Methods)]
		data = bytes.ReplaceAll(data, []byte(fuzzVolumeID), []byte(fs.seeded))
		caller := fuzzAuth(auth)
		ctx := metadata.NewIncomingContext(context.Background(), caller.md)
		before := takeState(t, fs)
		dec := func(v any) error { return v.(*wire.Frame).Unmarshal(data) }
		resp, err := md.Handler(srv, ctx, dec, nil)
		after := takeState(t, fs)
		node, decodes := fuzzRequestNode(md.MethodName, data)
		allowed := decodes && fuzzAllowed(caller, md.MethodName, node)
		denied := err != nil && FromStatus(err).(*RemoteError).Sentinel == ErrPermissionDenied
		switch {
		case !caller.ok:
			if status.Code(err) != codes.Unauthenticated || FromStatus(err).(*RemoteError).Sentinel != ErrUnauthenticated {
				t.Fatalf("%s without a valid token: %v; want Unauthenticated", md.MethodName, err)
			}
			if !same(before, after) {
				t.Fatalf("%s without a valid token changed the state:\n%s\n%s", md.MethodName, before, after)
			}
		case decodes && !allowed:
			if !denied || status.Code(err) != codes.PermissionDenied {
				t.Fatalf("%s by %s %s for node %q: %v; want PermissionDenied", md.MethodName, caller.role, caller.node, node, err)
			}
			if msg := err.Error(); caller.role == RoleEngine && (!strings.Contains(msg, caller.node) || node != "" && !strings.Contains(msg, fmt.Sprintf("%q", node))) {
				t.Fatalf("%s by the engine of %s for node %q: the refusal names not both nodes: %v", md.MethodName, caller.node, node, err)
			}
			if !same(before, after) {
				t.Fatalf("%s by %s %s: refused, yet it changed the state:\n%s\n%s", md.MethodName, caller.role, caller.node, before, after)
			}
		case denied:
			t.Fatalf("%s by %s %s for node %q: refused (%v), but the caller may make it", md.MethodName, caller.role, caller.node, node, err)
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
		case !decodes:
			t.Fatalf("%s: the server took a request that does not decode: %x", md.MethodName, data)
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
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Gen: fuzzGen, Offset: 0, Data: []byte("data")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: stale, Gen: fuzzGen, Offset: 0, Data: []byte("zombie")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Gen: fuzzGen, Offset: 64<<10 - 2, Data: []byte("past end")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Gen: fuzzGen, Offset: -1, Data: []byte("x")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Gen: fuzzGen - 1, Offset: 0, Data: []byte("late")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Offset: 0, Data: []byte("no session")}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Gen: fuzzGen, Offset: 0, Data: []byte("member 1"), MemberEpoch: 1}},
		{wire.MethodWrite, &wire.WriteRequest{IOTarget: io, Gen: fuzzGen, Offset: 0, Data: []byte("member 0")}},
		{wire.MethodOpenWriteSession, &wire.OpenSessionRequest{IOTarget: io}},
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
		{wire.MethodFailedVolumes, &wire.Empty{}},
		{wire.MethodServers, &wire.Empty{}},
		{wire.MethodGroupVolumes, &wire.Empty{}},
		{wire.MethodClearFailure, &wire.VolumeRef{ID: fuzzVolumeID}},
		{wire.MethodWaitApplied, &wire.WaitAppliedRequest{Index: 1, Term: 1, TimeoutNanos: 1e9}},
		{wire.MethodPrepareVolume, &wire.CreateVolumeRequest{Name: "pvc-p", Size: 4096, Access: "rwo"}},
		{wire.MethodAddServer, &wire.AddServerRequest{ID: "datapath-1", RaftAddress: "127.0.0.1:9601", DatapathAddress: "127.0.0.1:9600"}},
		{wire.MethodForceReplicas, &wire.ForceReplicasRequest{VolumeID: "vol-0000000000000001", Replicas: []string{"datapath-0"}, MemberEpoch: 1, Reason: "lost", DryRun: true}},
		{wire.MethodCreateVolume, &wire.CreateVolumeRequest{Name: "pvc-q", Size: 4096, Access: "rwo", ID: fuzzVolumeID, Server: "datapath-1"}},
		{wire.MethodPrepareReplica, &wire.CreateVolumeRequest{Name: "pvc-r", Size: 4096, Access: "rwo", ID: fuzzVolumeID}},
		{wire.MethodCreateVolume, &wire.CreateVolumeRequest{Name: "pvc-s", Size: 4096, Access: "rwo", ID: fuzzVolumeID, Server: "datapath-1", Replicas: []string{"datapath-1", "datapath-2"}}},
		{wire.MethodMarkOutOfSync, &wire.MarkOutOfSyncRequest{VolumeID: fuzzVolumeID, Replica: "datapath-1"}},
		{wire.MethodDirtyRegions, &wire.DirtyRegionsRequest{VolumeID: fuzzVolumeID, Replica: "datapath-1"}},
	}
	// Each seed is sent by the caller that may make it: node-1's engine for
	// node-1's own acts, the controller for the rest.
	const controller, node1, node2, node4 = 0, 2, 3, 4
	out := make([]fuzzSeed, 0, len(seeds)+16)
	for _, s := range seeds {
		auth := uint8(controller)
		switch s.name {
		case wire.MethodWrite, wire.MethodRead, wire.MethodFlush, wire.MethodHeartbeat, wire.MethodLeave, wire.MethodOpenWriteSession:
			auth = node1
		}
		out = append(out, fuzzSeed{auth, methodIndex(s.name), s.m.MarshalAppend(nil)})
	}
	enc := func(m wire.Message) []byte { return m.MarshalAppend(nil) }
	node1Ref := enc(&wire.NodeRef{Node: "node-1"})
	write := func(node string, epoch uint64) []byte {
		return enc(&wire.WriteRequest{IOTarget: wire.IOTarget{VolumeID: fuzzVolumeID, Node: node, Epoch: epoch}, Gen: fuzzGen, Data: []byte("zombie")})
	}
	return append(out,
		fuzzSeed{node1, methodIndex(wire.MethodWrite), []byte{0xff, 0xff, 0xff}},
		fuzzSeed{node1, methodIndex(wire.MethodWrite), append(write("node-1", 1), 0x80)},                   // garbled member epoch
		fuzzSeed{5, methodIndex(wire.MethodFenceNode), node1Ref},                                           // wrong token
		fuzzSeed{6, methodIndex(wire.MethodHeartbeat), (&wire.NodeRef{Node: "node-9"}).MarshalAppend(nil)}, // no token
		fuzzSeed{7, methodIndex(wire.MethodDeleteVolume), (&wire.VolumeRef{ID: fuzzVolumeID}).MarshalAppend(nil)},
		// Authorization: each identity outside its part.
		fuzzSeed{node2, methodIndex(wire.MethodWrite), write("node-1", 1)},                                               // as another node
		fuzzSeed{node2, methodIndex(wire.MethodHeartbeat), node1Ref},                                                     // as another node
		fuzzSeed{node2, methodIndex(wire.MethodFenceNode), node1Ref},                                                     // an engine fencing
		fuzzSeed{node1, methodIndex(wire.MethodGrant), enc(&wire.AttachRequest{VolumeID: fuzzVolumeID, Node: "node-1"})}, // an engine granting
		fuzzSeed{node1, methodIndex(wire.MethodFence), enc(&wire.AttachRequest{VolumeID: fuzzVolumeID, Node: "node-2"})},
		fuzzSeed{controller, methodIndex(wire.MethodWrite), write("node-1", 1)}, // the controller writing
		fuzzSeed{controller, methodIndex(wire.MethodHeartbeat), node1Ref},       // the controller heartbeating
		fuzzSeed{node4, methodIndex(wire.MethodWrite), write("node-4", 1)},      // a fenced engine as itself
		fuzzSeed{node1, methodIndex(wire.MethodRelease), enc(&wire.AttachRequest{VolumeID: fuzzVolumeID, Node: "node-1"})},
		fuzzSeed{node2, methodIndex(wire.MethodRelease), enc(&wire.AttachRequest{VolumeID: fuzzVolumeID, Node: "node-1"})},
		fuzzSeed{node1, methodIndex(wire.MethodNodeGrants), node1Ref},
		fuzzSeed{node1, methodIndex(wire.MethodAttachments), enc(&wire.VolumeRef{ID: fuzzVolumeID})},
		fuzzSeed{node1, methodIndex(wire.MethodNodes), enc(&wire.Empty{})},
		fuzzSeed{node1, methodIndex(wire.MethodClearFailure), enc(&wire.VolumeRef{ID: fuzzVolumeID})}, // an engine clearing a failure
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
	for _, a := range []uint8{0, 2, 3, 4, 5, 6, 7} {
		if !auths[a] {
			t.Fatalf("no seed with auth mode %d", a)
		}
	}
	for name := range effects {
		methodIndex(name) // every effect check names a real method
	}
}
