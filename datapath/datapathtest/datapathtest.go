// Package datapathtest starts a real datapath server for tests: a store in a
// temporary directory, served over gRPC on 127.0.0.1 with a random token, and
// stopped (and flushed) by t.Cleanup.
package datapathtest

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
)

// Server is a running test server.
type Server struct {
	Addr  string
	Token string
	Dir   string
	Store *datapath.Store
}

// Start starts a server with opts (Capacity 0 means 1 TiB here, so tests do not
// depend on the disk's size) and registers its shutdown with t.Cleanup.
func Start(t testing.TB, opts datapath.Options) *Server {
	t.Helper()
	if opts.Capacity == 0 {
		opts.Capacity = 1 << 40
	}
	dir := t.TempDir()
	return StartIn(t, dir, opts)
}

// StartIn is Start with a chosen data directory (to reopen after a stop).
func StartIn(t testing.TB, dir string, opts datapath.Options) *Server {
	t.Helper()
	store, err := datapath.Open(dir, opts)
	if err != nil {
		t.Fatalf("open datapath store: %v", err)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	srv, err := datapath.NewServer(store, token)
	if err != nil {
		t.Fatalf("datapath server: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop(0)
		if err := <-done; err != nil {
			t.Errorf("datapath serve: %v", err)
		}
		if err := store.Close(); err != nil {
			t.Errorf("close datapath store: %v", err)
		}
	})
	return &Server{Addr: lis.Addr().String(), Token: token, Dir: dir, Store: store}
}
