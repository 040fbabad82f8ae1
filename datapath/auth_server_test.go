package datapath

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath/devcerts"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

const authTestTokens = `controller controller-token-0123
node node-a node-a-token-0123456
node node-b node-b-token-0123456
`

// serveTest serves s with auth (and TLS when given) on loopback until the
// test ends.
func serveTest(t *testing.T, s *Store, auth Authenticator, opts ...ServerOption) string {
	t.Helper()
	srv, err := NewServer(s, auth, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop(0)
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// bulkConnTest is a raw bulk connection.
type bulkConnTest struct {
	t *testing.T
	c net.Conn
}

func dialBulkTest(t *testing.T, c net.Conn, token string) *bulkConnTest {
	t.Helper()
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(wire.AppendBulkHello(nil, token)); err != nil {
		t.Fatal(err)
	}
	return &bulkConnTest{t: t, c: c}
}

func (b *bulkConnTest) read() (uint64, error) {
	id, _, err := b.readGen()
	return id, err
}

// readGen reads a response: its id, generation and error.
func (b *bulkConnTest) readGen() (uint64, uint64, error) {
	var h [wire.BulkResponseHeaderLen]byte
	if _, err := io.ReadFull(b.c, h[:]); err != nil {
		return 0, 0, err
	}
	r, err := wire.DecodeBulkResponse(h[:])
	if err != nil {
		return 0, 0, err
	}
	msg := make([]byte, r.MsgLen)
	if _, err := io.ReadFull(b.c, msg); err != nil {
		return 0, 0, err
	}
	return r.ID, r.Gen, BulkError(r.Code, string(msg))
}

// write sends a write under (epoch, gen).
func (b *bulkConnTest) write(id, epoch, gen uint64, volumeID, node string, p []byte) {
	r := wire.BulkRequest{Op: wire.BulkOpWrite, ID: id, Epoch: epoch, Gen: gen, DataLen: len(p)}
	if _, err := b.c.Write(append(wire.AppendBulkRequest(nil, r, volumeID, node), p...)); err != nil {
		b.t.Fatal(err)
	}
}

// open opens a write session under epoch (request id) and returns its
// generation.
func (b *bulkConnTest) open(id, epoch uint64, volumeID, node string) uint64 {
	b.t.Helper()
	if _, err := b.c.Write(wire.AppendBulkRequest(nil, wire.BulkRequest{Op: wire.BulkOpSession, ID: id, Epoch: epoch}, volumeID, node)); err != nil {
		b.t.Fatal(err)
	}
	got, gen, err := b.readGen()
	if got != id || gen == 0 || err != nil {
		b.t.Fatalf("open a write session: id %d (want %d), generation %d, %v", got, id, gen, err)
	}
	return gen
}

// closed reports whether the server closed the connection.
func (b *bulkConnTest) closed() bool {
	_ = b.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := b.c.Read(make([]byte, 1))
	return n == 0 && err != nil && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func staticTokens(t *testing.T) *StaticTokens {
	t.Helper()
	st, err := ParseTokens(strings.NewReader(authTestTokens), "test")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestServer_Bulk_EngineWritesOnlyAsItsNode: node-a's bulk connection writes
// as node-a; a write as node-b (which holds a live grant) is refused as
// permission denied naming both nodes, nothing is written and the connection
// ends; so does a bulk write by the controller.
func TestServer_Bulk_EngineWritesOnlyAsItsNode(t *testing.T) {
	s := openTest(t, t.TempDir())
	addr := serveTest(t, s, staticTokens(t))
	v := mustCreate(t, s, "pvc-a", 1<<20, AccessRWX)
	ea, _ := s.Grant(v.ID, "node-a")
	eb, _ := s.Grant(v.ID, "node-b")
	dial := func(token string) *bulkConnTest {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		b := dialBulkTest(t, c, token)
		if _, err := b.read(); err != nil {
			t.Fatalf("hello: %v", err)
		}
		return b
	}
	a := dial("node-a-token-0123456")
	a.write(1, ea, a.open(9, ea, v.ID, "node-a"), v.ID, "node-a", []byte("mine"))
	if id, err := a.read(); id != 1 || err != nil {
		t.Fatalf("node-a writes as node-a: id %d, %v", id, err)
	}
	a.write(2, eb, 1, v.ID, "node-b", []byte("theirs"))
	id, err := a.read()
	if id != 2 || !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "node-a") || !strings.Contains(err.Error(), `"node-b"`) {
		t.Fatalf("node-a writes as node-b: id %d, %v; want ErrPermissionDenied naming both", id, err)
	}
	if !a.closed() {
		t.Fatal("the connection stayed open after a refused write")
	}
	ctl := dial("controller-token-0123")
	ctl.write(3, ea, 1, v.ID, "node-a", []byte("ctl"))
	if id, err := ctl.read(); id != 3 || !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("the controller writes: id %d, %v; want ErrPermissionDenied", id, err)
	}
	got, err := s.ReadAt(v.ID, "node-a", ea, 0, 6)
	if err != nil || !bytes.Equal(got, []byte("mine\x00\x00")) {
		t.Fatalf("volume holds %q, %v; want only node-a's write", got, err)
	}
}

// revocable accepts node-a's token until revoked.
type revocable struct{ revoked atomic.Bool }

func (r *revocable) Authenticate(_ context.Context, tok string) (Identity, error) {
	if tok != "node-a-token" || r.revoked.Load() {
		return Identity{}, ErrUnauthenticated
	}
	return Identity{Role: RoleEngine, Node: "node-a", Name: "revocable"}, nil
}

// TestServer_Bulk_ProvesTheTokenAgain: a bulk connection's identity does not
// outlive its token: once the authenticator stops accepting it (expired,
// its pod deleted), the next write after bulkReauth is refused and the
// connection ends.
func TestServer_Bulk_ProvesTheTokenAgain(t *testing.T) {
	old := bulkReauth
	bulkReauth = 0 // every write
	t.Cleanup(func() { bulkReauth = old })
	s := openTest(t, t.TempDir())
	auth := &revocable{}
	addr := serveTest(t, s, auth)
	v := mustCreate(t, s, "pvc-a", 1<<20, AccessRWO)
	e, _ := s.Grant(v.ID, "node-a")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b := dialBulkTest(t, c, "node-a-token")
	if _, err := b.read(); err != nil {
		t.Fatalf("hello: %v", err)
	}
	gen := b.open(9, e, v.ID, "node-a")
	b.write(1, e, gen, v.ID, "node-a", []byte("before"))
	if _, err := b.read(); err != nil {
		t.Fatalf("write before the revocation: %v", err)
	}
	auth.revoked.Store(true)
	b.write(2, e, gen, v.ID, "node-a", []byte("after!"))
	if id, err := b.read(); id != 2 || !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("write after the revocation: id %d, %v; want ErrUnauthenticated", id, err)
	}
	if !b.closed() {
		t.Fatal("the connection stayed open with a revoked token")
	}
	if got, _ := s.ReadAt(v.ID, "node-a", e, 0, 6); string(got) != "before" {
		t.Fatalf("volume holds %q; the refused write landed", got)
	}
}

// TestServer_TLS_HandshakeFirstForBothChannels: with TLS, a bulk hello in
// plaintext gets no answer (the server expects a handshake), and a bulk
// connection inside TLS works; the certificate is the configured one.
func TestServer_TLS_HandshakeFirstForBothChannels(t *testing.T) {
	dir := t.TempDir()
	files, err := devcerts.WriteServerFiles(dir, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ServerTLS(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	s := openTest(t, t.TempDir())
	addr := serveTest(t, s, staticTokens(t), WithTLS(cfg))
	v := mustCreate(t, s, "pvc-a", 1<<20, AccessRWO)
	e, _ := s.Grant(v.ID, "node-a")

	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	pb := dialBulkTest(t, plain, "node-a-token-0123456")
	if _, err := pb.read(); err == nil {
		t.Fatal("a plaintext bulk hello was answered by a TLS server")
	}

	pool, err := readPool(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{wire.BulkALPN}})
	if err != nil {
		t.Fatal(err)
	}
	if got := tc.ConnectionState().NegotiatedProtocol; got != wire.BulkALPN {
		t.Errorf("ALPN %q; want %q", got, wire.BulkALPN)
	}
	b := dialBulkTest(t, tc, "node-a-token-0123456")
	if _, err := b.read(); err != nil {
		t.Fatalf("hello over TLS: %v", err)
	}
	b.write(1, e, b.open(9, e, v.ID, "node-a"), v.ID, "node-a", bytes.Repeat([]byte{7}, 256<<10))
	if _, err := b.read(); err != nil {
		t.Fatalf("write over TLS: %v", err)
	}
	if got, _ := s.ReadAt(v.ID, "node-a", e, 0, 1); got[0] != 7 {
		t.Fatal("the write over TLS did not land")
	}
}

func TestServerTLS_BadFiles(t *testing.T) {
	dir := t.TempDir()
	files, err := devcerts.WriteServerFiles(dir, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := devcerts.WriteServerFiles(t.TempDir(), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cert, key, mention string
	}{
		{"no key", files.Cert, "", "both a certificate file and a private key file"},
		{"missing cert", dir + "/nope.crt", files.Key, "nope.crt"},
		{"key of another certificate", files.Cert, other.Key, "private key does not match"},
		{"CA as key", files.Cert, files.CA, files.CA},
	} {
		if _, err := ServerTLS(tc.cert, tc.key); err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v; want an error mentioning %q", tc.name, err, tc.mention)
		}
	}
}

func readPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, errors.New("no certificate")
	}
	return p, nil
}
