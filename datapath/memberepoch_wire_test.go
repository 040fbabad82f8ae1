package datapath

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// TestServer_MemberEpochOnBothChannels: the member epoch a write carries
// reaches the store's check on both channels: a volume of one copy (member
// epoch 0) takes a write of a client from before member epochs and refuses
// one at member epoch 1 with ErrStaleMemberEpoch, nothing written; a
// garbled member epoch is refused as malformed, naming the field.
func TestServer_MemberEpochOnBothChannels(t *testing.T) {
	s := openTest(t, t.TempDir())
	addr := serveTest(t, s, staticTokens(t))
	v := mustCreate(t, s, "pvc-a", 1<<20, AccessRWO)
	e, err := s.Grant(v.ID, "node-a")
	if err != nil {
		t.Fatal(err)
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b := dialBulkTest(t, c, "node-a-token-0123456")
	if _, err := b.read(); err != nil {
		t.Fatalf("hello: %v", err)
	}
	gen := b.open(9, e, v.ID, "node-a")
	b.write(1, e, gen, v.ID, "node-a", []byte("bulk"))
	if id, err := b.read(); id != 1 || err != nil {
		t.Fatalf("bulk write without a member epoch: id %d, %v", id, err)
	}
	r := wire.BulkRequest{Op: wire.BulkOpWrite, ID: 2, Epoch: e, Gen: gen, DataLen: 4, MemberEpoch: 1}
	if _, err := c.Write(append(wire.AppendBulkRequest(nil, r, v.ID, "node-a"), "BULK"...)); err != nil {
		t.Fatal(err)
	}
	if id, err := b.read(); id != 2 || !errors.Is(err, ErrStaleMemberEpoch) || !strings.Contains(err.Error(), "carries member epoch 1") {
		t.Fatalf("bulk write at member epoch 1: id %d, %v; want ErrStaleMemberEpoch", id, err)
	}
	// A payload large enough for the spliced path, where the server can take it.
	big := bytes.Repeat([]byte("B"), 256<<10)
	r = wire.BulkRequest{Op: wire.BulkOpWrite, ID: 3, Epoch: e, Gen: gen, DataLen: len(big), MemberEpoch: 1}
	if _, err := c.Write(append(wire.AppendBulkRequest(nil, r, v.ID, "node-a"), big...)); err != nil {
		t.Fatal(err)
	}
	if id, err := b.read(); id != 3 || !errors.Is(err, ErrStaleMemberEpoch) {
		t.Fatalf("large bulk write at member epoch 1: id %d, %v; want ErrStaleMemberEpoch", id, err)
	}

	srv, err := NewServer(s, staticTokens(t))
	if err != nil {
		t.Fatal(err)
	}
	md := serviceDesc.Methods[methodIndex(wire.MethodWrite)]
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(TokenMetadataKey, "Bearer node-a-token-0123456"))
	write := func(data []byte) error {
		dec := func(v any) error { return v.(*wire.Frame).Unmarshal(data) }
		_, err := md.Handler(srv, ctx, dec, nil)
		return err
	}
	req := wire.WriteRequest{IOTarget: wire.IOTarget{VolumeID: v.ID, Node: "node-a", Epoch: e}, Gen: gen, Offset: 4, Data: []byte("grpc")}
	if err := write(req.MarshalAppend(nil)); err != nil {
		t.Fatalf("gRPC write without a member epoch: %v", err)
	}
	stale := req
	stale.Data, stale.MemberEpoch = []byte("GRPC"), 1
	err = write(stale.MarshalAppend(nil))
	if status.Code(err) != codes.Aborted || !errors.Is(FromStatus(err), ErrStaleMemberEpoch) {
		t.Fatalf("gRPC write at member epoch 1: %v; want Aborted, ErrStaleMemberEpoch", err)
	}
	err = write(append(req.MarshalAppend(nil), 0x80))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "member_epoch: bad unsigned varint") {
		t.Fatalf("gRPC write with a garbled member epoch: %v; want InvalidArgument naming member_epoch", err)
	}

	got, err := s.ReadAt(v.ID, "node-a", e, 0, 8)
	if err != nil || !bytes.Equal(got, []byte("bulkgrpc")) {
		t.Fatalf("volume holds %q, %v; want only the writes at member epoch 0", got, err)
	}
}
