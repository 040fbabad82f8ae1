package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestClient_GrantAs_UsesCrossTheWire: the use travels with the grant, a
// second filesystem writer is refused, and a write under a read-only grant
// comes back as ErrReadOnly over the bulk channel and over gRPC alike.
func TestClient_GrantAs_UsesCrossTheWire(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go oldServerProxy(lis, srv.Addr)
	ctx := context.Background()
	for name, c := range map[string]*datapathtest.Roles{"bulk": dial(t, srv), "grpc": dial(t, srv.At(lis.Addr().String()))} {
		t.Run(name, func(t *testing.T) {
			v, err := c.CreateVolume(ctx, "pvc-"+name, 1<<20, datapath.AccessRWX)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.GrantAs(ctx, v.ID, "n1", datapath.UseFilesystemWriter); err != nil {
				t.Fatal(err)
			}
			_, err = c.GrantAs(ctx, v.ID, "n2", datapath.UseFilesystemWriter)
			if !errors.Is(err, datapath.ErrAttachedElsewhere) || !strings.Contains(err.Error(), "mounted read-write on one node only") {
				t.Fatalf("second filesystem writer: %v", err)
			}
			e, err := c.GrantAs(ctx, v.ID, "n3", datapath.UseReadOnly)
			if err != nil {
				t.Fatal(err)
			}
			err = c.WriteAt(ctx, v.ID, "n3", e, 0, []byte("x"))
			if !errors.Is(err, datapath.ErrReadOnly) || !strings.Contains(err.Error(), "read-only grant") {
				t.Fatalf("write under a read-only grant: %v, want ErrReadOnly", err)
			}
			if _, err := c.ReadAt(ctx, v.ID, "n3", e, 0, 1); err != nil {
				t.Fatalf("read under a read-only grant: %v", err)
			}
			if _, err := c.GrantAs(ctx, v.ID, "n4", "shared"); !errors.Is(err, datapath.ErrInvalidArgument) {
				t.Fatalf("unknown use: %v", err)
			}
		})
	}
}
