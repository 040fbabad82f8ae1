package csi

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serve runs srv on a fresh socket until the test ends and returns the
// endpoint.
func serve(t testing.TB, srv *Server) string {
	t.Helper()
	endpoint := "unix://" + filepath.Join(shortTempDir(t), "csi.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, endpoint) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("Serve(%s) = %v before listening", endpoint, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("Serve(%s) did not listen within 5s", endpoint)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v", err)
		}
	})
	return endpoint
}

// dial connects to a served endpoint.
func dial(t testing.TB, endpoint string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", endpoint, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
