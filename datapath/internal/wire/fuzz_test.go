package wire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"google.golang.org/grpc/mem"
)

// messages lists one fresh value of every message type, indexed by the fuzzer.
func messages() []Message {
	return []Message{
		&Empty{}, &CreateVolumeRequest{}, &Volume{}, &VolumeList{}, &VolumeRef{}, &Int{},
		&AttachRequest{}, &Epoch{}, &AttachmentList{}, &WriteRequest{}, &ReadRequest{},
		&Data{}, &FlushRequest{}, &NodeRef{}, &ConnectivityRequest{}, &Connectivity{},
		&NodeGrantList{}, &FencedList{}, &LeaveRequest{}, &NodeList{}, &FailedList{},
		&OpenSessionRequest{}, &Generation{}, &PendingAnswer{}, &WaitAppliedRequest{},
		&GroupVolumeList{}, &MarkOutOfSyncRequest{}, &ReplicaSetAnswer{},
		&DirtyRegionsRequest{}, &DirtyRegionsAnswer{},
	}
}

// FuzzDecode feeds arbitrary bytes to every message decoder: it must either
// fail with ErrMalformed or produce a message that encodes and decodes back to
// an equal value.
func FuzzDecode(f *testing.F) {
	for i, m := range seedMessages() {
		f.Add(uint8(i), m.MarshalAppend(nil))
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		checkDecodeWrite(t, int(kind), data)
		all := messages()
		m := all[int(kind)%len(all)]
		if err := m.Unmarshal(data); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T: error %v does not wrap ErrMalformed", m, err)
			}
			return
		}
		again := messages()[int(kind)%len(all)]
		if err := again.Unmarshal(m.MarshalAppend(nil)); err != nil {
			t.Fatalf("%T: re-encoding does not decode: %v", m, err)
		}
		if !reflect.DeepEqual(normalize(m), normalize(again)) {
			t.Fatalf("%T: round trip changed the message:\n%+v\n%+v", m, m, again)
		}
	})
}

// normalize maps nil and empty byte slices and lists alike for comparison.
func normalize(m Message) Message {
	switch v := m.(type) {
	case *WriteRequest:
		if len(v.Data) == 0 {
			v.Data = nil
		}
	case *Data:
		if len(v.Data) == 0 {
			v.Data = nil
		}
	case *VolumeList:
		if len(v.Volumes) == 0 {
			v.Volumes = nil
		}
	case *AttachmentList:
		if len(v.Items) == 0 {
			v.Items = nil
		}
	case *NodeGrantList:
		if len(v.Items) == 0 {
			v.Items = nil
		}
	case *FencedList:
		if len(v.Items) == 0 {
			v.Items = nil
		}
	case *NodeList:
		if len(v.Items) == 0 {
			v.Items = nil
		}
	case *FailedList:
		if len(v.Items) == 0 {
			v.Items = nil
		}
	case *GroupVolumeList:
		if len(v.Items) == 0 {
			v.Items = nil
		}
	}
	return m
}

func seedMessages() []Message {
	io := IOTarget{VolumeID: "vol-0123456789abcdef", Node: "node-1", Epoch: 7}
	return []Message{
		&Empty{},
		&CreateVolumeRequest{Name: "pvc-1", Size: 1 << 30, Access: "rwo"},
		&CreateVolumeRequest{Name: "pvc-1", Size: 1 << 30, Access: "rwo", ID: "vol-0123456789abcdef", Server: "s1", Replicas: []string{"s1", "s2", "s3"}},
		&Volume{ID: "vol-0123456789abcdef", Name: "pvc-1", Size: 4096, Access: "rwx", CreatedUnix: 1700000000000000000},
		&VolumeList{Volumes: []Volume{{ID: "vol-0123456789abcdef", Name: "a", Size: 1}}},
		&VolumeRef{ID: "vol-0123456789abcdef"},
		&Int{Value: -1},
		&AttachRequest{VolumeID: "vol-0123456789abcdef", Node: "node-1", Use: "rw-fs"},
		&Epoch{Epoch: 1 << 40},
		&AttachmentList{VolumeID: "vol-0123456789abcdef", Items: []Attachment{{Node: "n", Epoch: 3, State: "fenced", UpdatedUnix: 5}}},
		&WriteRequest{IOTarget: io, Gen: 1 << 60, Offset: 4096, Data: []byte("hello")},
		&WriteRequest{IOTarget: io, Gen: 3, Offset: 512, Data: []byte("at a member epoch"), MemberEpoch: 42},
		&ReadRequest{IOTarget: io, Offset: 0, Length: 512},
		&Data{Data: []byte{1, 2, 3}},
		&FlushRequest{IOTarget: io},
		&OpenSessionRequest{IOTarget: io},
		&Generation{Gen: 1 << 62},
		&NodeRef{Node: "node-1"},
		&ConnectivityRequest{Node: "node-1", VolumeID: "vol-0123456789abcdef", WithinNanos: 5e9},
		&Connectivity{Connected: true, LastHeartbeat: 1, IOActive: false, LastIO: 2, Now: 3},
		&NodeGrantList{Node: "node-1", Items: []NodeGrant{{VolumeID: "vol-0123456789abcdef", Epoch: 4, State: "granted", UpdatedUnix: 9}}},
		&FencedList{Items: []FencedVolume{{VolumeID: "vol-0123456789abcdef", Epoch: 5}}},
		&LeaveRequest{Node: "node-1", DurationNanos: 60e9},
		&NodeList{NowUnix: 10, StartedUnix: 1, Items: []NodeStatus{{Node: "node-1", LastHeartbeat: 8, LastIO: 7, LeavingUntil: 70, LiveGrants: 3}}},
		&FailedList{Items: []FailedVolume{{VolumeID: "vol-0123456789abcdef", Name: "pvc-1", SinceUnix: 11, Op: "flush", Error: "input/output error"}}},
		&PendingAnswer{Pending: seedPending()},
		&WaitAppliedRequest{Index: 42, Term: 3, TimeoutNanos: 5e9},
		&Epoch{Epoch: 9, Pending: seedPending()},
		&FencedList{Items: []FencedVolume{{VolumeID: "vol-0123456789abcdef", Epoch: 5}}, Pending: seedPending()},
		&GroupVolumeList{Items: []GroupVolume{{ID: "vol-0123456789abcdef", Name: "pvc-1", Server: "datapath-1", Epoch: 6}}},
		&GroupVolumeList{Items: []GroupVolume{{ID: "vol-0123456789abcdef", Name: "pvc-1", Server: "s1", Epoch: 6, Replicas: []string{"s1", "s2"}, InSync: []string{"s1"}, MemberEpoch: 3}}, WithReplicas: true},
		&MarkOutOfSyncRequest{VolumeID: "vol-0123456789abcdef", Replica: "s2", MemberEpoch: 3, Node: "node-1", Epoch: 7},
		&ReplicaSetAnswer{Holder: "s1", Replicas: []string{"s1", "s2", "s3"}, InSync: []string{"s1", "s3"}, MemberEpoch: 4},
		&DirtyRegionsRequest{VolumeID: "vol-0123456789abcdef", Replica: "s2", Node: "node-1", Epoch: 7, From: 8192},
		&DirtyRegionsAnswer{Since: 3, MemberEpoch: 4, Bytes: 12288, Ranges: []DirtyRange{{0, 8192}, {1 << 20, 4096}}, Next: 1<<20 + 4096},
	}
}

func seedPending() *Pending {
	return &Pending{Index: 42, Term: 3, Holders: []PendingHolder{{ID: "datapath-1", Address: "10.0.0.2:7070", Volumes: []string{"vol-0123456789abcdef"}}}}
}

// TestPending_RoundTripAndAbsent: a change's answer carries its Pending
// after its own fields only when there is one; an answer without it (from
// a server that ignored the request to confirm) decodes with none.
func TestPending_RoundTripAndAbsent(t *testing.T) {
	for _, m := range []Message{&Epoch{Epoch: 9, Pending: seedPending()}, &FencedList{Pending: seedPending()}, &PendingAnswer{Pending: seedPending()}} {
		again := reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message)
		if err := again.Unmarshal(m.MarshalAppend(nil)); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(normalize(m), normalize(again)) {
			t.Fatalf("%T: round trip changed it:\n%+v\n%+v", m, m, again)
		}
	}
	var e Epoch
	if err := e.Unmarshal((&Epoch{Epoch: 4}).MarshalAppend(nil)); err != nil || e.Pending != nil || e.Epoch != 4 {
		t.Fatalf("an Epoch without Pending: %+v, %v", e, err)
	}
	var a PendingAnswer
	if err := a.Unmarshal(nil); err != nil || !a.Pending.Empty() {
		t.Fatalf("an empty answer: %+v, %v", a, err)
	}
	if err := a.Unmarshal([]byte{42, 3, 1}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a Pending cut short: %v; want ErrMalformed", err)
	}
}

func TestDecoder_Limits(t *testing.T) {
	e := encoder{}
	e.u64(MaxString + 1)
	if err := (&VolumeRef{}).Unmarshal(e.b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("over-long string: %v", err)
	}
	e = encoder{}
	e.u64(MaxItems + 1)
	if err := (&VolumeList{}).Unmarshal(e.b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("huge count: %v", err)
	}
	if err := (&Epoch{}).Unmarshal([]byte{1, 2}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("trailing bytes: %v", err)
	}
	if err := (&Connectivity{}).Unmarshal([]byte{2}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad bool: %v", err)
	}
}

// checkDecodeWrite splits data into buffers at cut and checks that the
// zero-copy DecodeWrite agrees with WriteRequest.Unmarshal.
func checkDecodeWrite(t *testing.T, cut int, data []byte) {
	t.Helper()
	var bufs mem.BufferSlice
	for rest := data; len(rest) > 0; {
		n := min(len(rest), cut%7+1)
		bufs = append(bufs, mem.SliceBuffer(rest[:n]))
		rest = rest[n:]
	}
	f := Frame{Bufs: bufs}
	got, iov, err := f.DecodeWrite()
	var want WriteRequest
	werr := want.Unmarshal(data)
	if (err == nil) != (werr == nil) {
		t.Fatalf("DecodeWrite err %v, Unmarshal err %v", err, werr)
	}
	if err != nil {
		return
	}
	var payload []byte
	for _, p := range iov {
		payload = append(payload, p...)
	}
	if got.IOTarget != want.IOTarget || got.Gen != want.Gen || got.Offset != want.Offset || got.MemberEpoch != want.MemberEpoch || !bytes.Equal(payload, want.Data) {
		t.Fatalf("DecodeWrite = %+v %q, Unmarshal = %+v", got, payload, want)
	}
}

func TestFrame_DecodeWrite_SplitBuffers(t *testing.T) {
	req := &WriteRequest{IOTarget: IOTarget{VolumeID: "vol-0123456789abcdef", Node: "n", Epoch: 9}, Gen: 300, Offset: 12, Data: bytes.Repeat([]byte("abc"), 1000)}
	data := req.MarshalAppend(nil)
	for cut := 0; cut < 7; cut++ {
		checkDecodeWrite(t, cut, data)
	}
	if _, _, err := (&Frame{Bufs: mem.BufferSlice{mem.SliceBuffer(data[:len(data)-1])}}).DecodeWrite(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("short payload: %v", err)
	}
}
