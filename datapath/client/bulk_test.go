package client_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// TestClient_Fence_NoWriteLandsAfterFenceOverBulk is the fence race through
// the bulk channel: 4 KiB writes (received into a buffer) and 128 KiB writes
// (spliced socket → pipe → file).
func TestClient_Fence_NoWriteLandsAfterFenceOverBulk(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	for round, bs := range []int{4096, 128 << 10, 4096, 128 << 10} {
		v, err := c.CreateVolume(ctx, "race-"+string(rune('a'+round)), 128*int64(bs), datapath.AccessRWO)
		if err != nil {
			t.Fatal(err)
		}
		epoch, _ := c.Grant(ctx, v.ID, "zombie")
		write := func(off int64, p []byte) error { return c.WriteAt(ctx, v.ID, "zombie", epoch, off, p) }
		fence := func() error { _, err := c.Fence(ctx, v.ID, "zombie"); return err }
		datapathtest.RaceFenceBlocks(t, srv.Store.DataFile(v.ID), bs, write, fence)
	}
}

// TestClient_WriteAt_BulkSizesAndErrors writes every size class through the
// bulk channel (buffered, spliced, larger than the pipe) and reads it back,
// and checks that the server's refusals arrive as the same sentinels as over
// gRPC, with nothing written.
func TestClient_WriteAt_BulkSizesAndErrors(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	v, _ := c.CreateVolume(ctx, "sizes", 16<<20, datapath.AccessRWO)
	e, _ := c.Grant(ctx, v.ID, "n1")
	off := int64(0)
	for i, n := range []int{1, 4096, 64 << 10, 1 << 20, datapath.MaxIOSize} {
		p := bytes.Repeat([]byte{byte(i + 1)}, n)
		if err := c.WriteAt(ctx, v.ID, "n1", e, off, p); err != nil {
			t.Fatalf("write %d bytes: %v", n, err)
		}
		got, err := c.ReadAt(ctx, v.ID, "n1", e, off, n)
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("read back %d bytes: %v (equal %v)", n, err, bytes.Equal(got, p))
		}
		off += int64(n)
	}
	big := make([]byte, 1<<20)
	if err := c.WriteAt(ctx, v.ID, "n1", e, 16<<20-4096, big); !errors.Is(err, datapath.ErrOutOfRange) {
		t.Fatalf("past the end: %v", err)
	}
	if err := c.WriteAt(ctx, "vol-0000000000000000", "n1", e, 0, big); !errors.Is(err, datapath.ErrNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
	if err := c.WriteAt(ctx, v.ID, "n1", e+1, 0, big); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("wrong epoch: %v", err)
	}
	// n1's engine may write only as n1: a bad node name is refused as another
	// node's, over gRPC (names a bulk frame cannot carry) and bulk alike.
	for _, node := range []string{"bad node", "", strings.Repeat("n", 300)} {
		if err := c.Node("n1").WriteAt(ctx, v.ID, node, e, 0, big); !errors.Is(err, datapath.ErrPermissionDenied) {
			t.Fatalf("n1 writes as a node of %d bytes: %v", len(node), err)
		}
	}
	if err := c.WriteAt(ctx, "", "n1", e, 0, big); !errors.Is(err, datapath.ErrInvalidArgument) && !errors.Is(err, datapath.ErrNotFound) {
		t.Fatalf("empty volume id: %v", err)
	}
	if got, _ := c.ReadAt(ctx, v.ID, "n1", e, 0, 1); got[0] != 1 {
		t.Fatalf("a refused write changed the volume: first byte %d", got[0])
	}
}

// bulkRaw opens a bulk connection by hand and sends the hello with token.
func bulkRaw(t *testing.T, srv *datapathtest.Server, token string) (net.Conn, func() (uint64, uint8, string, error)) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(wire.AppendBulkHello(nil, token)); err != nil {
		t.Fatal(err)
	}
	return conn, func() (uint64, uint8, string, error) { return readBulk(conn) }
}

// readBulk reads one bulk response: id, code, message.
func readBulk(conn net.Conn) (uint64, uint8, string, error) {
	r, msg, err := readBulkResponse(conn)
	return r.ID, r.Code, msg, err
}

// readBulkResponse reads one bulk response: its header and message.
func readBulkResponse(conn net.Conn) (wire.BulkResponse, string, error) {
	var h [wire.BulkResponseHeaderLen]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return wire.BulkResponse{}, "", err
	}
	r, err := wire.DecodeBulkResponse(h[:])
	if err != nil {
		return r, "", err
	}
	msg := make([]byte, r.MsgLen)
	_, err = io.ReadFull(conn, msg)
	return r, string(msg), err
}

// openRaw opens a write session on a raw bulk connection (request id) and
// returns its generation.
func openRaw(t *testing.T, conn net.Conn, id, epoch uint64, volumeID, node string) uint64 {
	t.Helper()
	if _, err := conn.Write(wire.AppendBulkRequest(nil, wire.BulkRequest{Op: wire.BulkOpSession, ID: id, Epoch: epoch}, volumeID, node)); err != nil {
		t.Fatal(err)
	}
	r, msg, err := readBulkResponse(conn)
	if err != nil || r.ID != id || r.Code != 0 || r.Gen == 0 {
		t.Fatalf("open a write session: %+v %q %v", r, msg, err)
	}
	return r.Gen
}

// rawWrite is a bulk write request with its payload.
func rawWrite(id, epoch, gen uint64, volumeID, node string, data []byte) []byte {
	r := wire.BulkRequest{Op: wire.BulkOpWrite, ID: id, Epoch: epoch, Gen: gen, DataLen: len(data)}
	return append(wire.AppendBulkRequest(nil, r, volumeID, node), data...)
}

// expectClosed fails unless the server closed conn.
func expectClosed(t *testing.T, conn net.Conn, what string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || n > 0 {
		t.Fatalf("%s: the server kept the connection open (read %d, %v)", what, n, err)
	}
}

func TestServer_Bulk_BadInput_ClearErrorsNothingWritten(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	v, _ := c.CreateVolume(ctx, "pvc-a", 8<<20, datapath.AccessRWO)
	e, _ := c.Grant(ctx, v.ID, "n1")
	payload := bytes.Repeat([]byte{0xAB}, 256<<10)
	request := func(id uint64, volumeID string, data []byte) []byte {
		return rawWrite(id, e, 1, volumeID, "n1", data)
	}
	t.Run("wrong token", func(t *testing.T) {
		conn, read := bulkRaw(t, srv, "not-the-token")
		_, _ = conn.Write(request(1, v.ID, payload))
		_, code, msg, err := read()
		if err != nil || !errors.Is(datapath.BulkError(code, msg), datapath.ErrUnauthenticated) || !strings.Contains(msg, "token") {
			t.Fatalf("hello answer: code %d %q %v", code, msg, err)
		}
		expectClosed(t, conn, "wrong token")
	})
	t.Run("unknown volume", func(t *testing.T) {
		conn, read := bulkRaw(t, srv, srv.NodeToken("n1"))
		if _, code, msg, err := read(); err != nil || code != 0 {
			t.Fatalf("hello: %d %q %v", code, msg, err)
		}
		gen := openRaw(t, conn, 6, e, "vol-ffffffffffffffff", "n1")
		_, _ = conn.Write(rawWrite(7, e, gen, "vol-ffffffffffffffff", "n1", payload))
		id, code, msg, err := read()
		if err != nil || id != 7 || !errors.Is(datapath.BulkError(code, msg), datapath.ErrNotFound) {
			t.Fatalf("unknown volume: id %d code %d %q %v", id, code, msg, err)
		}
	})
	t.Run("oversize frame", func(t *testing.T) {
		conn, read := bulkRaw(t, srv, srv.NodeToken("n1"))
		_, _, _, _ = read()
		hdr := rawWrite(3, e, 1, v.ID, "n1", nil)
		binary.LittleEndian.PutUint32(hdr[8:], wire.BulkMaxData+1)
		_, _ = conn.Write(hdr)
		_, code, msg, err := read()
		if err != nil || !errors.Is(datapath.BulkError(code, msg), datapath.ErrInvalidArgument) || !strings.Contains(msg, "at most") {
			t.Fatalf("oversize: code %d %q %v", code, msg, err)
		}
		expectClosed(t, conn, "oversize frame")
	})
	t.Run("garbage header", func(t *testing.T) {
		conn, read := bulkRaw(t, srv, srv.NodeToken("n1"))
		_, _, _, _ = read()
		_, _ = conn.Write(bytes.Repeat([]byte{0x5A}, wire.BulkRequestHeaderLen))
		_, code, msg, err := read()
		if err != nil || !errors.Is(datapath.BulkError(code, msg), datapath.ErrInvalidArgument) || !strings.Contains(msg, "op") {
			t.Fatalf("garbage: code %d %q %v", code, msg, err)
		}
		expectClosed(t, conn, "garbage header")
	})
	t.Run("truncated frames", func(t *testing.T) {
		for _, cut := range []int{10, wire.BulkRequestHeaderLen + 3, wire.BulkRequestHeaderLen + 30 + 1000, wire.BulkRequestHeaderLen + 30 + 200<<10} {
			conn, read := bulkRaw(t, srv, srv.NodeToken("n1"))
			_, _, _, _ = read()
			req := request(9, v.ID, payload)
			_, _ = conn.Write(req[:min(cut, len(req)-1)])
			_ = conn.(*net.TCPConn).CloseWrite()
			if id, code, msg, err := read(); err == nil {
				t.Fatalf("truncated at %d: got an answer: id %d code %d %q", cut, id, code, msg)
			}
		}
	})
	t.Run("bad token length", func(t *testing.T) {
		conn, err := net.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = conn.Write(binary.LittleEndian.AppendUint16([]byte(wire.BulkMagic), 0))
		_, code, msg, err := readBulk(conn)
		if err != nil || !errors.Is(datapath.BulkError(code, msg), datapath.ErrUnauthenticated) || !strings.Contains(msg, "token length 0") {
			t.Fatalf("empty token: code %d %q %v", code, msg, err)
		}
		expectClosed(t, conn, "empty token")
	})
	got, err := c.ReadAt(ctx, v.ID, "n1", e, 0, len(payload))
	if err != nil || !bytes.Equal(got, make([]byte, len(payload))) {
		t.Fatalf("a refused bulk request wrote data (%v)", err)
	}
	// The server still serves gRPC and bulk afterwards.
	if err := c.WriteAt(ctx, v.ID, "n1", e, 0, payload); err != nil {
		t.Fatal(err)
	}
}

func TestClient_WriteAt_BulkWrongToken(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	good := dial(t, srv)
	ctx := context.Background()
	v, _ := good.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	e, _ := good.Grant(ctx, v.ID, "n1")
	bad, err := client.Dial(ctx, srv.Addr, "node.n1.wrong", client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	err = bad.WriteAt(ctx, v.ID, "n1", e, 0, make([]byte, 1<<20))
	if !errors.Is(err, datapath.ErrUnauthenticated) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("bulk write with the wrong token: %v", err)
	}
}

// TestClient_WriteAt_FallsBackToGRPC: a server that closes bulk connections
// at the hello (one from before the bulk channel) still gets the writes, over
// gRPC.
func TestClient_WriteAt_FallsBackToGRPC(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go oldServerProxy(lis, srv.Addr)
	c := dial(t, srv.At(lis.Addr().String()))
	ctx := context.Background()
	v, _ := c.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	e, _ := c.Grant(ctx, v.ID, "n1")
	p := bytes.Repeat([]byte{7}, 256<<10)
	for i := 0; i < 2; i++ {
		if err := c.WriteAt(ctx, v.ID, "n1", e, 0, p); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if got, _ := c.ReadAt(ctx, v.ID, "n1", e, 0, len(p)); !bytes.Equal(got, p) {
		t.Fatal("the write did not land")
	}
}

// oldServerProxy forwards connections to addr, except that it closes those
// that start with the bulk magic, as a server without the bulk channel would.
func oldServerProxy(lis net.Listener, addr string) {
	for {
		in, err := lis.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			head := make([]byte, wire.BulkMagicLen)
			if _, err := io.ReadFull(in, head); err != nil || string(head) == wire.BulkMagic {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer out.Close()
			_, _ = out.Write(head)
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
			_, _ = io.Copy(out, in)
		}()
	}
}

// TestClient_WriteAt_TLSBulkSizesInFlight: over TLS, writes of sizes around
// the record and batch boundaries, several in flight on the client's bulk
// connections at once, each land whole where they were sent (the records of
// one request are gathered into few socket writes; nothing of another
// request may come between them).
func TestClient_WriteAt_TLSBulkSizesInFlight(t *testing.T) {
	srv := datapathtest.StartWith(t, datapathtest.Config{TLS: true})
	c := dial(t, srv, client.WithCAFile(srv.CAFile))
	ctx := context.Background()
	sizes := []int{1, 4096, 16<<10 - 1, 16 << 10, 64<<10 - 1, 64 << 10, 64<<10 + 1, 1 << 20, 1<<20 + 3, datapath.MaxIOSize}
	v, err := c.CreateVolume(ctx, "tls-sizes", int64(len(sizes))*datapath.MaxIOSize, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := c.Grant(ctx, v.ID, "n1")
	data := make([][]byte, len(sizes))
	var wg sync.WaitGroup
	for i, n := range sizes {
		data[i] = bytes.Repeat([]byte{byte(i + 1), byte(n)}, (n+1)/2)[:n]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.WriteAt(ctx, v.ID, "n1", e, int64(i)*datapath.MaxIOSize, data[i]); err != nil {
				t.Errorf("write %d bytes over TLS: %v", n, err)
			}
		}()
	}
	wg.Wait()
	for i, n := range sizes {
		got, err := c.ReadAt(ctx, v.ID, "n1", e, int64(i)*datapath.MaxIOSize, n)
		if err != nil || !bytes.Equal(got, data[i]) {
			t.Fatalf("read back %d bytes over TLS: %v (equal %v)", n, err, bytes.Equal(got, data[i]))
		}
	}
}
