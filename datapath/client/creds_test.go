package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

func writeTokenFile(t *testing.T, path, token string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// TestTokenSource_ReadsARotatedTokenKeepsTheLastGood: a token file that
// changes is read again after the recheck interval; one that turns empty or
// disappears keeps the last good token.
func TestTokenSource_ReadsARotatedTokenKeepsTheLastGood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	base := time.Now().Add(-time.Hour)
	writeTokenFile(t, path, "first-token", base)
	ts, err := newTokenSource("", path)
	if err != nil {
		t.Fatal(err)
	}
	writeTokenFile(t, path, "second-token", base.Add(time.Minute))
	if got := ts.get(); got != "first-token" {
		t.Fatalf("within the recheck interval: %q; want the first token", got)
	}
	ts.recheck = 0
	if got := ts.get(); got != "second-token" {
		t.Fatalf("after a rotation: %q; want the second token", got)
	}
	writeTokenFile(t, path, "", base.Add(2*time.Minute))
	if got := ts.get(); got != "second-token" {
		t.Fatalf("after the file was emptied: %q; want the last good token", got)
	}
	_ = os.Remove(path)
	if got := ts.get(); got != "second-token" {
		t.Fatalf("after the file was removed: %q; want the last good token", got)
	}
	writeTokenFile(t, path, "third-token", base.Add(3*time.Minute))
	if got := ts.get(); got != "third-token" {
		t.Fatalf("after the file came back: %q", got)
	}
}

func TestNewTokenSource_BadInput(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	for _, tc := range []struct {
		name, token, path, mention string
	}{
		{"none", "", "", "empty token"},
		{"both", "tok", empty, "a token and a token file"},
		{"missing file", "", filepath.Join(dir, "nope"), "nope"},
		{"empty file", "", empty, "is empty"},
		{"long token", strings.Repeat("x", datapath.MaxTokenLen+1), "", "at most 4096"},
	} {
		if _, err := newTokenSource(tc.token, tc.path); err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v; want an error mentioning %q", tc.name, err, tc.mention)
		}
	}
}

// helloServer accepts bulk connections, records each hello's token and
// accepts it; it answers nothing else.
type helloServer struct {
	lis    net.Listener
	mu     sync.Mutex
	tokens []string
	conns  []net.Conn
}

func startHelloServer(t *testing.T) *helloServer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &helloServer{lis: lis}
	t.Cleanup(func() {
		_ = lis.Close()
		h.mu.Lock()
		for _, c := range h.conns {
			_ = c.Close()
		}
		h.mu.Unlock()
	})
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			head := make([]byte, wire.BulkMagicLen+2)
			if _, err := io.ReadFull(br, head); err != nil {
				_ = c.Close()
				continue
			}
			tok := make([]byte, binary.LittleEndian.Uint16(head[wire.BulkMagicLen:]))
			if _, err := io.ReadFull(br, tok); err != nil {
				_ = c.Close()
				continue
			}
			h.mu.Lock()
			h.tokens = append(h.tokens, string(tok))
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			_, _ = c.Write(wire.AppendBulkResponse(nil, 0, 0, 0, ""))
		}
	}()
	return h
}

// TestClient_BulkConn_NewTokenNewConnection: once the token file rotates, the
// client opens bulk connections with the new token and retires the old ones
// (closed at once when no write is in flight).
func TestClient_BulkConn_NewTokenNewConnection(t *testing.T) {
	h := startHelloServer(t)
	path := filepath.Join(t.TempDir(), "token")
	base := time.Now().Add(-time.Hour)
	writeTokenFile(t, path, "old-token", base)
	c, err := Dial(context.Background(), h.lis.Addr().String(), "", WithTokenFile(path))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var first [bulkConns]*bulkConn
	for i := range first {
		if first[i], err = c.bulkConn(ctx, c.addr); err != nil {
			t.Fatal(err)
		}
	}
	writeTokenFile(t, path, "new-token", base.Add(time.Minute))
	c.token.mu.Lock()
	c.token.recheck = 0
	c.token.mu.Unlock()
	for range first {
		b, err := c.bulkConn(ctx, c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if b.token != "new-token" {
			t.Fatalf("a bulk connection after the rotation carries %q", b.token)
		}
	}
	for i, b := range first {
		if !b.dead() {
			t.Errorf("old bulk connection %d is still open", i)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.tokens) != 2*bulkConns || h.tokens[0] != "old-token" || h.tokens[len(h.tokens)-1] != "new-token" {
		t.Fatalf("hellos carried %q", h.tokens)
	}
}

func TestOptions_Transport_Rules(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	_ = os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600)
	for _, tc := range []struct {
		name    string
		o       options
		addr    string
		tls     bool
		mention string
	}{
		{"loopback plaintext", options{}, "127.0.0.1:9600", false, ""},
		{"localhost plaintext", options{}, "localhost:9600", false, ""},
		{"IPv6 loopback plaintext", options{}, "[::1]:9600", false, ""},
		{"insecure off loopback", options{insecure: true}, "10.0.0.1:9600", false, ""},
		{"plaintext off loopback", options{}, "10.0.0.1:9600", false, "10.0.0.1 is not a loopback address"},
		{"plaintext to a name", options{}, "vigil-datapath.vigil-system.svc:9600", false, "not a loopback address"},
		{"CA file without a certificate", options{caFile: notPEM}, "10.0.0.1:9600", false, "holds no PEM certificate"},
		{"missing CA file", options{caFile: filepath.Join(dir, "nope")}, "10.0.0.1:9600", false, "nope"},
		{"no port", options{}, "10.0.0.1", false, "want host:port"},
	} {
		cfg, err := tc.o.transport(tc.addr)
		switch {
		case tc.mention == "" && (err != nil || (cfg != nil) != tc.tls):
			t.Errorf("%s: %v, TLS %v", tc.name, err, cfg != nil)
		case tc.mention != "" && (err == nil || !strings.Contains(err.Error(), tc.mention)):
			t.Errorf("%s: %v; want an error mentioning %q", tc.name, err, tc.mention)
		case tc.mention != "" && !errors.Is(err, datapath.ErrInvalidArgument) && !errors.Is(err, os.ErrNotExist):
			t.Errorf("%s: %v is not ErrInvalidArgument", tc.name, err)
		}
	}
}
