package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// TestClient_WriteAt_RetriedWriteNeverLandsAfterANewerOne: a write whose
// connection black-holes is given up (its timeout), sent again on another
// connection (as the engine does), and followed by a newer write to the same
// block; then the path heals and TCP delivers the first write. The server
// must refuse it as stale, and the block must hold the newer data. Both size
// classes: a buffered 4 KiB write and a spliced 256 KiB one.
func TestClient_WriteAt_RetriedWriteNeverLandsAfterANewerOne(t *testing.T) {
	for _, size := range []int{4 << 10, 256 << 10} {
		srv := datapathtest.Start(t, datapath.Options{})
		proxy := datapathtest.NewHoldProxy(t, srv.Addr)
		ctl := dial(t, srv)
		ctx := context.Background()
		v, e := grantedVolume(t, ctl, 4<<20)
		engine := dial(t, srv.At(proxy.Addr)).Node("n1")
		older, newer := bytes.Repeat([]byte{'A'}, size), bytes.Repeat([]byte{'B'}, size)
		// Two first writes open the write session and both bulk connections,
		// so the held write goes out at once on one of them.
		for range 2 {
			if err := engine.WriteAt(ctx, v.ID, "n1", e, 1<<20, older); err != nil {
				t.Fatal(err)
			}
		}

		proxy.HoldNextBulk()
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := engine.WriteAt(short, v.ID, "n1", e, 0, older)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("size %d: the held write returned %v; want its timeout", size, err)
		}
		held, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := proxy.Held(held); err != nil {
			cancel()
			t.Fatalf("size %d: nothing was held: %v", size, err)
		}
		cancel()
		if err := engine.WriteAt(ctx, v.ID, "n1", e, 0, older); err != nil {
			t.Fatalf("size %d: the retry: %v", size, err)
		}
		if err := engine.WriteAt(ctx, v.ID, "n1", e, 0, newer); err != nil {
			t.Fatalf("size %d: the newer write: %v", size, err)
		}

		proxy.Release()
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		answer, err := proxy.Answer(actx, wire.BulkResponseHeaderLen)
		cancel()
		if err != nil {
			t.Fatalf("size %d: the server never answered the released write: %v", size, err)
		}
		got, err := ctl.Node("n1").ReadAt(ctx, v.ID, "n1", e, 0, size)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, newer) {
			t.Fatalf("size %d: the block holds %q...; want the newer write's %q...: the retried write landed after the newer one", size, got[:8], newer[:8])
		}
		r, err := wire.DecodeBulkResponse(answer)
		if err != nil || !errors.Is(datapath.BulkError(r.Code, ""), datapath.ErrStaleSession) {
			t.Fatalf("size %d: the released write was answered code %d (%v); want ErrStaleSession", size, r.Code, err)
		}
	}
}

// TestClient_WriteAt_RetriedGRPCWriteNeverLandsAfterANewerOne is the same
// over gRPC (WithBulk(false), as after a server did not answer the bulk
// hello): a write's connection black-holes and is then lost (the proxy cuts
// the client's side, keeping the server's with the write on its way), the
// client sends the write again on a new connection, a newer write to the same
// block follows, and then the path heals and the first copy arrives. The
// server must refuse it as stale, and the block must hold the newer data.
func TestClient_WriteAt_RetriedGRPCWriteNeverLandsAfterANewerOne(t *testing.T) {
	for _, size := range []int{4 << 10, 256 << 10} {
		srv := datapathtest.Start(t, datapath.Options{})
		proxy := datapathtest.NewHoldProxy(t, srv.Addr)
		ctl := dial(t, srv)
		ctx := context.Background()
		v, e := grantedVolume(t, ctl, 4<<20)
		engine := dial(t, srv.At(proxy.Addr), client.WithBulk(false)).Node("n1")
		older, newer := bytes.Repeat([]byte{'A'}, size), bytes.Repeat([]byte{'B'}, size)
		// The first write opens the connection and the write session.
		if err := engine.WriteAt(ctx, v.ID, "n1", e, 1<<20, older); err != nil {
			t.Fatal(err)
		}

		proxy.HoldNextGRPC()
		first := make(chan error, 1)
		go func() { first <- engine.WriteAt(ctx, v.ID, "n1", e, 0, older) }()
		held, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := proxy.HeldGRPCRequest(held); err != nil {
			cancel()
			t.Fatalf("size %d: the write was not held: %v", size, err)
		}
		cancel()
		// The path is lost: the client's attempt fails, and its retry goes
		// out on a new connection, which the proxy forwards.
		proxy.Cut()
		if err := <-first; err != nil {
			t.Fatalf("size %d: the write, sent again on a new connection: %v", size, err)
		}
		if err := engine.WriteAt(ctx, v.ID, "n1", e, 0, newer); err != nil {
			t.Fatalf("size %d: the newer write: %v", size, err)
		}

		proxy.Release()
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		code, msg, err := proxy.GRPCStatus(actx)
		cancel()
		if err != nil {
			t.Fatalf("size %d: the server never answered the released write: %v", size, err)
		}
		got, err := ctl.Node("n1").ReadAt(ctx, v.ID, "n1", e, 0, size)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, newer) {
			t.Fatalf("size %d: the block holds %q...; want the newer write's %q...: the retried write landed after the newer one (its late copy was answered code %d %q)", size, got[:8], newer[:8], code, msg)
		}
		if codes.Code(code) != codes.Aborted || !strings.Contains(msg, "stale write session") {
			t.Fatalf("size %d: the released write was answered code %d %q; want Aborted, a stale write session", size, code, msg)
		}
	}
}

// TestClient_WriteAt_OldServerGetsNoUnorderedWrite: a server from before
// write sessions over gRPC (it does not answer the bulk hello and knows
// neither OpenWriteSession nor SessionWrite) gets no write at all, with or
// without the bulk channel on: the client returns ErrServerTooOld, which
// says to upgrade the datapath, instead of sending a write the server could
// apply after a newer one.
func TestClient_WriteAt_OldServerGetsNoUnorderedWrite(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var called []string
	old := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		m, _ := grpc.MethodFromServerStream(stream)
		mu.Lock()
		called = append(called, m)
		mu.Unlock()
		return status.Errorf(codes.Unimplemented, "unknown method %s", m)
	}))
	go func() { _ = old.Serve(lis) }()
	t.Cleanup(old.Stop)
	for _, bulk := range []bool{true, false} {
		c, err := client.Dial(context.Background(), lis.Addr().String(), "node-token-0123456789", client.WithBulk(bulk), client.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		err = c.WriteAt(context.Background(), "vol-0123456789abcdef", "n1", 1, 0, []byte("data"))
		_ = c.Close()
		if !errors.Is(err, client.ErrServerTooOld) || !strings.Contains(err.Error(), "Upgrade vigil-datapath") || !strings.Contains(err.Error(), "nothing was written") {
			t.Fatalf("bulk %v: a write to a server without write sessions: %v; want ErrServerTooOld naming the upgrade", bulk, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var opens int
	for _, m := range called {
		switch m {
		case wire.FullMethod(wire.MethodOpenWriteSession):
			opens++
		case wire.FullMethod(wire.MethodGroupVolumes): // the volume's replicas, read before the first write
		default:
			t.Fatalf("the old server was called %s; want only %s and %s (no write)", m, wire.MethodGroupVolumes, wire.MethodOpenWriteSession)
		}
	}
	if opens != 2 {
		t.Fatalf("the old server was called %v; want one OpenWriteSession per client", called)
	}
}

// TestServer_Bulk_StaleGenerationRefused: over one raw connection, a write
// under a generation older than the last one opened is refused as stale with
// nothing written, and so are a write under another epoch and a write to a
// session never opened; the current generation writes.
func TestServer_Bulk_StaleGenerationRefused(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	v, e := grantedVolume(t, c, 1<<20)
	conn, read := bulkRaw(t, srv, srv.NodeToken("n1"))
	if _, code, msg, err := read(); err != nil || code != 0 {
		t.Fatalf("hello: %d %q %v", code, msg, err)
	}
	old := openRaw(t, conn, 1, e, v.ID, "n1")
	cur := openRaw(t, conn, 2, e, v.ID, "n1")
	if cur <= old {
		t.Fatalf("generations %d then %d; want them increasing", old, cur)
	}
	for _, w := range []struct {
		name       string
		epoch, gen uint64
		volumeID   string
	}{
		{"older generation", e, old, v.ID},
		{"generation never issued", e, cur + 1, v.ID},
		{"other epoch", e + 1, cur, v.ID},
		{"no session", e, cur, "vol-ffffffffffffffff"},
	} {
		if _, err := conn.Write(rawWrite(3, w.epoch, w.gen, w.volumeID, "n1", []byte("stale"))); err != nil {
			t.Fatal(err)
		}
		id, code, msg, err := read()
		if err != nil || id != 3 || !errors.Is(datapath.BulkError(code, msg), datapath.ErrStaleSession) || !strings.Contains(msg, "generation") {
			t.Fatalf("%s: id %d code %d %q %v; want ErrStaleSession", w.name, id, code, msg, err)
		}
	}
	if got, _ := c.ReadAt(ctx, v.ID, "n1", e, 0, 5); !bytes.Equal(got, make([]byte, 5)) {
		t.Fatalf("a stale write landed: %q", got)
	}
	if _, err := conn.Write(rawWrite(4, e, cur, v.ID, "n1", []byte("fresh"))); err != nil {
		t.Fatal(err)
	}
	if id, code, msg, err := read(); err != nil || id != 4 || code != 0 {
		t.Fatalf("current generation: id %d code %d %q %v", id, code, msg, err)
	}
	if got, _ := c.ReadAt(ctx, v.ID, "n1", e, 0, 5); string(got) != "fresh" {
		t.Fatalf("the current generation's write: %q", got)
	}
}

// TestServer_GRPC_StaleGenerationRefused: over gRPC, as over the bulk
// channel, a write is applied only under the generation opened last for its
// (volume, node, epoch): an older generation, none, a generation never
// issued, another epoch and a session never opened are refused as stale with
// nothing written. The two channels share the sessions: a generation opened
// on the bulk channel ends the one opened over gRPC, and a gRPC write under
// it lands.
func TestServer_GRPC_StaleGenerationRefused(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	v, e := grantedVolume(t, c, 1<<20)
	raw := newRawIO(t, srv, v.ID, e)
	target := raw.target
	open := func() uint64 {
		t.Helper()
		var g wire.Generation
		if err := raw.invoke(ctx, wire.MethodOpenWriteSession, &wire.OpenSessionRequest{IOTarget: target}, &g); err != nil || g.Gen == 0 {
			t.Fatalf("OpenWriteSession: %d, %v", g.Gen, err)
		}
		return g.Gen
	}
	write := func(t wire.IOTarget, gen uint64, p string) error {
		req := &wire.WriteRequest{IOTarget: t, Gen: gen, Data: []byte(p)}
		return raw.invoke(ctx, wire.MethodWrite, req, &wire.Empty{})
	}
	old := open()
	cur := open()
	other := target
	other.Epoch++
	never := target
	never.VolumeID = "vol-ffffffffffffffff"
	for _, w := range []struct {
		name   string
		target wire.IOTarget
		gen    uint64
	}{
		{"older generation", target, old},
		{"no generation", target, 0},
		{"generation never issued", target, cur + 1},
		{"other epoch", other, cur},
		{"no session", never, cur},
	} {
		if err := write(w.target, w.gen, "stale"); !errors.Is(err, datapath.ErrStaleSession) || !strings.Contains(err.Error(), "generation") {
			t.Fatalf("%s: %v; want ErrStaleSession naming the generation", w.name, err)
		}
	}
	if got, _ := c.ReadAt(ctx, v.ID, "n1", e, 0, 5); !bytes.Equal(got, make([]byte, 5)) {
		t.Fatalf("a stale write landed: %q", got)
	}
	if err := write(target, cur, "fresh"); err != nil {
		t.Fatalf("current generation: %v", err)
	}
	bulk, read := bulkRaw(t, srv, srv.NodeToken("n1"))
	if _, code, msg, err := read(); err != nil || code != 0 {
		t.Fatalf("hello: %d %q %v", code, msg, err)
	}
	viaBulk := openRaw(t, bulk, 1, e, v.ID, "n1")
	if err := write(target, cur, "after"); !errors.Is(err, datapath.ErrStaleSession) {
		t.Fatalf("a gRPC write under the generation a bulk open ended: %v; want ErrStaleSession", err)
	}
	if err := write(target, viaBulk, "bulk!"); err != nil {
		t.Fatalf("a gRPC write under the generation opened on the bulk channel: %v", err)
	}
	if got, _ := c.ReadAt(ctx, v.ID, "n1", e, 0, 5); string(got) != "bulk!" {
		t.Fatalf("the block holds %q; want the last accepted write's", got)
	}
}

// TestServer_Bulk_Version1Refused: a client of the first bulk protocol gets
// a refusal in its own layout that says what to do, and the connection ends.
func TestServer_Bulk_Version1Refused(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	conn, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	tok := srv.NodeToken("n1")
	if _, err := conn.Write(append([]byte(wire.BulkMagicV1), append([]byte{byte(len(tok)), byte(len(tok) >> 8)}, tok...)...)); err != nil {
		t.Fatal(err)
	}
	var h [16]byte // version 1's response header
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, int(h[10])|int(h[11])<<8)
	if _, err := io.ReadFull(conn, msg); err != nil {
		t.Fatal(err)
	}
	err = datapath.BulkError(h[8], string(msg))
	if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(string(msg), "VGLBULK1") || !strings.Contains(string(msg), "Upgrade vigil-engine-node") {
		t.Fatalf("version 1 hello: %v; want INVALID_ARGUMENT naming the version and the upgrade", err)
	}
	expectClosed(t, conn, "version 1 hello")
}

// The client keeps writing through generations it did not open itself: a
// write refused as stale (another client of the same node opened a newer
// generation) is sent again under a new one, and lands.
func TestClient_WriteAt_StaleRefusalIsSentAgain(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	ctl := dial(t, srv)
	ctx := context.Background()
	v, e := grantedVolume(t, ctl, 1<<20)
	a := dial(t, srv).Node("n1")
	b := dial(t, srv, client.WithRetries(0)).Node("n1")
	for i := range 6 {
		w := a
		if i%2 == 1 {
			w = b
		}
		p := bytes.Repeat([]byte{byte('a' + i)}, 4096)
		if err := w.WriteAt(ctx, v.ID, "n1", e, 0, p); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if got, _ := ctl.Node("n1").ReadAt(ctx, v.ID, "n1", e, 0, 4096); !bytes.Equal(got, p) {
			t.Fatalf("write %d did not land", i)
		}
	}
}
