package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
)

// TestBulkRequest_MemberEpoch: a bulk write carries its member epoch in the
// 4 bytes that were reserved; a header of a client from before (those bytes
// zero) is a write at member epoch 0; a negative field, or a member epoch on
// a session request, is refused saying what is allowed.
func TestBulkRequest_MemberEpoch(t *testing.T) {
	r := BulkRequest{Op: BulkOpWrite, ID: 1, Epoch: 4, Gen: 2, DataLen: 10, MemberEpoch: 7}
	h := AppendBulkRequest(nil, r, "v", "n")[:BulkRequestHeaderLen]
	if got, err := DecodeBulkRequest(h); err != nil || got.MemberEpoch != 7 {
		t.Fatalf("member epoch 7: %+v, %v", got, err)
	}

	// The layout of a client from before member epochs, written out by hand.
	old := make([]byte, BulkRequestHeaderLen)
	old[0] = BulkOpWrite
	binary.LittleEndian.PutUint16(old[2:], 1)
	binary.LittleEndian.PutUint16(old[4:], 1)
	binary.LittleEndian.PutUint32(old[8:], 10)
	binary.LittleEndian.PutUint64(old[16:], 1)
	binary.LittleEndian.PutUint64(old[24:], 4)
	binary.LittleEndian.PutUint64(old[40:], 2)
	if got, err := DecodeBulkRequest(old); err != nil || got.MemberEpoch != 0 || got.Epoch != 4 || got.Gen != 2 {
		t.Fatalf("a header of before member epochs: %+v, %v; want a write at member epoch 0", got, err)
	}

	neg := bytes.Clone(h)
	binary.LittleEndian.PutUint32(neg[12:], 0xfffffffe) // -2 as int32
	_, err := DecodeBulkRequest(neg)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "member epoch field 0xfffffffe is negative; allowed are 0 to 2147483647") {
		t.Fatalf("negative member epoch: %v", err)
	}
	top := bytes.Clone(h)
	binary.LittleEndian.PutUint32(top[12:], MaxMemberEpoch)
	if got, err := DecodeBulkRequest(top); err != nil || got.MemberEpoch != MaxMemberEpoch {
		t.Fatalf("member epoch %d: %+v, %v", MaxMemberEpoch, got, err)
	}

	s := AppendBulkRequest(nil, BulkRequest{Op: BulkOpSession, ID: 2, Epoch: 3, MemberEpoch: 1}, "v", "n")[:BulkRequestHeaderLen]
	if _, err := DecodeBulkRequest(s); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "member epoch must be zero") {
		t.Fatalf("session request with a member epoch: %v", err)
	}
	if err := CheckMemberEpoch(MaxMemberEpoch + 1); err == nil || !strings.Contains(err.Error(), "allowed are 0 to 2147483647") {
		t.Fatalf("CheckMemberEpoch over the limit: %v", err)
	}
}

// TestWriteRequest_MemberEpoch: over gRPC the member epoch follows the
// payload only when it is not 0, so a request of a client from before (no
// trailer) reads as member epoch 0 and a member epoch 0 encodes as before;
// both decoders, and the codec's buffers in every split, agree; a garbled,
// over-limit or over-long trailer is refused.
func TestWriteRequest_MemberEpoch(t *testing.T) {
	base := WriteRequest{IOTarget: IOTarget{VolumeID: "vol-1", Node: "n", Epoch: 3}, Gen: 5, Offset: 8, Data: []byte("payload")}
	old := base.MarshalAppend(nil)
	// The encoding of before member epochs, written out field by field.
	e := encoder{}
	e.str("vol-1")
	e.str("n")
	e.u64(3)
	e.u64(5)
	e.i64(8)
	e.u64(7)
	e.b = append(e.b, "payload"...)
	if !bytes.Equal(old, e.b) {
		t.Fatalf("member epoch 0 does not encode as before:\n%x\n%x", old, e.b)
	}
	var m WriteRequest
	if err := m.Unmarshal(old); err != nil || m.MemberEpoch != 0 {
		t.Fatalf("old request: %+v, %v", m, err)
	}
	checkDecodeWrite(t, 0, old)

	at := base
	at.MemberEpoch = 300
	data := at.MarshalAppend(nil)
	for cut := 0; cut < 7; cut++ {
		checkDecodeWrite(t, cut, data)
	}
	got, iov, err := (&Frame{Bufs: mem.BufferSlice{mem.SliceBuffer(data)}}).DecodeWrite()
	if err != nil || got.MemberEpoch != 300 || len(iov) != 1 || string(iov[0]) != "payload" {
		t.Fatalf("member epoch 300: %+v %q, %v", got, iov, err)
	}

	// Through the codec, with a payload large enough to be sent by reference.
	big := base
	big.Data = bytes.Repeat([]byte("x"), 64<<10)
	big.MemberEpoch = 9
	bufs, err := Codec{}.Marshal(&big)
	if err != nil {
		t.Fatal(err)
	}
	got, iov, err = (&Frame{Bufs: bufs}).DecodeWrite()
	if err != nil || got.MemberEpoch != 9 || !bytes.Equal(bytes.Join(iov, nil), big.Data) {
		t.Fatalf("codec, member epoch 9: %+v, %d bytes, %v", got, len(bytes.Join(iov, nil)), err)
	}
	bufs.Free()

	bad := map[string]struct {
		tail []byte
		want string
	}{
		"garbled":      {[]byte{0x80, 0x80}, "member_epoch: bad unsigned varint"},
		"over limit":   {binary.AppendUvarint(nil, MaxMemberEpoch+1), "member_epoch: 2147483648 is negative or over the limit; allowed are 0 to 2147483647"},
		"negative":     {binary.AppendUvarint(nil, ^uint64(0)), "allowed are 0 to 2147483647"},
		"extra bytes":  {[]byte{1, 1}, "1 trailing bytes"},
		"eleven bytes": {bytes.Repeat([]byte{0x81}, 11), "only the member epoch may follow the data"},
	}
	for name, c := range bad {
		frame := append(bytes.Clone(old), c.tail...)
		_, _, err := (&Frame{Bufs: mem.BufferSlice{mem.SliceBuffer(frame)}}).DecodeWrite()
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: DecodeWrite: %v; want ErrMalformed containing %q", name, err, c.want)
		}
		var m WriteRequest
		if err := m.Unmarshal(frame); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Unmarshal: %v; want ErrMalformed", name, err)
		}
	}
}
