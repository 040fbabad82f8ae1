package client

import (
	"bytes"
	"errors"
	"net"
	"testing"
)

// recordingConn records each Write it gets, as one socket write.
type recordingConn struct {
	net.Conn
	writes [][]byte
	err    error
}

func (r *recordingConn) Write(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func TestBatchConn_Write_GathersWhileHeld(t *testing.T) {
	rec := &recordingConn{}
	b := &batchConn{Conn: rec}
	if _, err := b.Write([]byte("handshake")); err != nil {
		t.Fatal(err)
	}
	if len(rec.writes) != 1 {
		t.Fatalf("a write outside hold: %d socket writes, want 1 at once", len(rec.writes))
	}
	// A request as crypto/tls writes it: a header record, then 16 KiB records.
	var want []byte
	b.hold()
	for i, n := range []int{100, 16 << 10, 16 << 10, 16 << 10, 16 << 10, 16 << 10, 5} {
		p := bytes.Repeat([]byte{byte(i + 1)}, n)
		want = append(want, p...)
		if m, err := b.Write(p); err != nil || m != n {
			t.Fatalf("held write %d: %d, %v", i, m, err)
		}
	}
	if len(rec.writes) != 2 {
		t.Fatalf("after %d bytes held: %d socket writes, want 2 (the handshake, then the first %d bytes)", len(want), len(rec.writes), batchFlushAt)
	}
	if err := b.flush(); err != nil {
		t.Fatal(err)
	}
	if len(rec.writes) != 3 {
		t.Fatalf("after flush: %d socket writes, want 3", len(rec.writes))
	}
	if got := bytes.Join(rec.writes[1:], nil); !bytes.Equal(got, want) {
		t.Fatalf("the socket got %d bytes, not the %d written in order", len(got), len(want))
	}
	if len(rec.writes[1]) < batchFlushAt {
		t.Fatalf("first batch %d bytes, want at least %d", len(rec.writes[1]), batchFlushAt)
	}
	if err := b.flush(); err != nil || len(rec.writes) != 3 {
		t.Fatalf("an empty flush: %v, %d socket writes (want none more)", err, len(rec.writes))
	}
	if _, err := b.Write([]byte("alert")); err != nil || len(rec.writes) != 4 {
		t.Fatalf("a write after flush: %v, %d socket writes, want it sent at once", err, len(rec.writes))
	}
}

func TestBatchConn_Flush_ReturnsTheSocketsError(t *testing.T) {
	broken := errors.New("connection reset")
	rec := &recordingConn{err: broken}
	b := &batchConn{Conn: rec}
	b.hold()
	if _, err := b.Write([]byte("small")); err != nil {
		t.Fatalf("a held write below the batch size failed: %v", err)
	}
	if err := b.flush(); !errors.Is(err, broken) {
		t.Fatalf("flush: %v, want %v", err, broken)
	}
	b.hold()
	if _, err := b.Write(make([]byte, batchFlushAt)); !errors.Is(err, broken) {
		t.Fatalf("a held write that fills the batch: %v, want %v", err, broken)
	}
}
