package wire

import (
	"bytes"
	"testing"
	"time"
)

func TestCodec_Marshal_WritePayloadReleasedOnlyWhenFreed(t *testing.T) {
	req := &WriteRequest{IOTarget: IOTarget{VolumeID: "vol-0123456789abcdef", Node: "n", Epoch: 1}, Data: bytes.Repeat([]byte{7}, 64<<10)}
	bufs, err := Codec{}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if req.WaitReleased(10 * time.Millisecond) {
		t.Fatal("released while gRPC still holds the payload")
	}
	var got WriteRequest
	if err := got.Unmarshal(bufs.Materialize()); err != nil || !bytes.Equal(got.Data, req.Data) {
		t.Fatalf("round trip: %v", err)
	}
	bufs.Free()
	if !req.WaitReleased(time.Second) {
		t.Fatal("not released after Free")
	}
}

func TestCodec_Marshal_SmallPayloadIsCopied(t *testing.T) {
	p := []byte("small")
	req := &WriteRequest{Data: p}
	bufs, err := Codec{}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	copy(p, "XXXXX") // the caller reuses its buffer
	var got WriteRequest
	if err := got.Unmarshal(bufs.Materialize()); err != nil || string(got.Data) != "small" {
		t.Fatalf("marshaled payload changed with the caller's buffer: %q, %v", got.Data, err)
	}
	if !req.WaitReleased(0) {
		t.Fatal("a copied payload needs no release")
	}
}
