package client

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath/devcerts"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// recordCounter reads a TLS stream for a *tls.Conn and notes the plaintext
// length of each application-data record (TLS 1.3 hides the type: every
// record after the handshake is sent as application data and carries one
// byte of inner type and a 16-byte tag).
type recordCounter struct {
	net.Conn
	hdr     []byte // a record header being read
	left    int    // bytes of the current record's body still to come
	records []int  // body lengths of application-data records
}

func (r *recordCounter) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	for b := p[:n]; len(b) > 0; {
		if r.left > 0 {
			k := min(r.left, len(b))
			r.left, b = r.left-k, b[k:]
			continue
		}
		k := min(5-len(r.hdr), len(b))
		r.hdr, b = append(r.hdr, b[:k]...), b[k:]
		if len(r.hdr) == 5 {
			r.left = int(binary.BigEndian.Uint16(r.hdr[3:]))
			if r.hdr[0] == 23 {
				r.records = append(r.records, r.left-1-16)
			}
			r.hdr = r.hdr[:0]
		}
	}
	return n, err
}

// tlsBulkPair returns a bulkConn over TLS 1.3 on loopback and the server's
// end, whose records are counted.
func tlsBulkPair(t *testing.T) (*bulkConn, *tls.Conn, *recordCounter) {
	t.Helper()
	files, err := devcerts.WriteServerFiles(t.TempDir(), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots, err := ReadCAFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	raw, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sraw, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	counter := &recordCounter{Conn: sraw}
	srv := tls.Server(counter, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{wire.BulkALPN}})
	batch := &batchConn{Conn: raw}
	cl := tls.Client(batch, bulkTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: "127.0.0.1"}))
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	if err := cl.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close(); _ = srv.Close() })
	return &bulkConn{c: cl, batch: batch}, srv, counter
}

// TestBulkConn_Send_TLSRecordsFull sends write requests over TLS as do does
// and checks on the wire that the header shares the first record with the
// payload, so that a request takes the fewest records its size allows (every
// record full but the last, none of them small from the connection's first
// byte), and that the server reads the request back intact.
func TestBulkConn_Send_TLSRecordsFull(t *testing.T) {
	b, srv, counter := tlsBulkPair(t)
	const vol, node = "vol-0123456789abcdef", "n1"
	hdrLen := len(wire.AppendBulkRequest(nil, wire.BulkRequest{}, vol, node))
	for _, n := range []int{1, 4096, tlsRecordData - hdrLen, tlsRecordData - hdrLen + 1, 1 << 20, 4 << 20} {
		p := bytes.Repeat([]byte{byte(n), byte(n >> 8), 7}, n/3+1)[:n]
		b.hdr = wire.AppendBulkRequest(b.hdr[:0], wire.BulkRequest{Op: wire.BulkOpWrite, DataLen: n}, vol, node)
		counter.records = counter.records[:0]
		got := make([]byte, hdrLen+n)
		errc := make(chan error, 1)
		go func() { _, err := io.ReadFull(srv, got); errc <- err }()
		if err := b.send(p); err != nil {
			t.Fatalf("send %d bytes: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("server reads a request of %d bytes: %v", n, err)
		}
		if !bytes.Equal(got[hdrLen:], p) || !bytes.Equal(got[:hdrLen], b.hdr[:hdrLen]) {
			t.Fatalf("the server read back a request of %d bytes that differs from the one sent", n)
		}
		total := hdrLen + n
		want := (total + tlsRecordData - 1) / tlsRecordData
		if len(counter.records) != want {
			t.Fatalf("a request of %d bytes (header %d) took %d records %v, want %d", n, hdrLen, len(counter.records), counter.records, want)
		}
		for i, l := range counter.records[:want-1] {
			if l != tlsRecordData {
				t.Fatalf("a request of %d bytes: record %d of %d carries %d bytes, want a full %d", n, i+1, want, l, tlsRecordData)
			}
		}
	}
}
