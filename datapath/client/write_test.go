package client

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClient_WriteAt_TooOldServerRetriesTheBulkChannelAtOnce: after a server
// answered neither the bulk hello nor OpenWriteSession, the next write tries
// the bulk channel again at once (a server of the previous release speaks it,
// and may only have been restarting), not a minute later.
func TestClient_WriteAt_TooOldServerRetriesTheBulkChannelAtOnce(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := grpc.NewServer(grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.Unimplemented, "unknown method")
	}))
	go func() { _ = old.Serve(lis) }()
	t.Cleanup(old.Stop)
	c, err := Dial(context.Background(), lis.Addr().String(), "node-token-0123456789", WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteAt(context.Background(), "vol-0123456789abcdef", "n1", 1, 0, []byte("x")); !errors.Is(err, ErrServerTooOld) {
		t.Fatalf("write to a server without write sessions: %v; want ErrServerTooOld", err)
	}
	c.bulkMu.Lock()
	retryAt := c.poolLocked(c.addr).retryAt
	c.bulkMu.Unlock()
	if !retryAt.IsZero() {
		t.Fatalf("the bulk channel is next tried at %s; want at once", retryAt)
	}
}
