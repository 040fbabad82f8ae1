package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

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
		v, err := ctl.CreateVolume(ctx, "pvc-a", 4<<20, datapath.AccessRWO)
		if err != nil {
			t.Fatal(err)
		}
		e, err := ctl.Grant(ctx, v.ID, "n1")
		if err != nil {
			t.Fatal(err)
		}
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
		err = engine.WriteAt(short, v.ID, "n1", e, 0, older)
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

// TestServer_Bulk_StaleGenerationRefused: over one raw connection, a write
// under a generation older than the last one opened is refused as stale with
// nothing written, and so are a write under another epoch and a write to a
// session never opened; the current generation writes.
func TestServer_Bulk_StaleGenerationRefused(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	v, _ := c.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	e, _ := c.Grant(ctx, v.ID, "n1")
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
	v, _ := ctl.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	e, _ := ctl.Grant(ctx, v.ID, "n1")
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
