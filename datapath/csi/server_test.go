package csi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vigil "github.com/vigil-storage/vigil"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "unix:///csi/csi.sock", want: "/csi/csi.sock"},
		{in: "unix:/csi/csi.sock", want: "/csi/csi.sock"},
		{in: "/csi/csi.sock", want: "/csi/csi.sock"},
		{in: "unix:///csi//x/../csi.sock", want: "/csi/csi.sock"},
		{in: "tcp://127.0.0.1:10000", bad: true},
		{in: "unix://", bad: true},
		{in: "", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseEndpoint(tt.in)
		if tt.bad {
			if !errors.Is(err, ErrBadEndpoint) {
				t.Errorf("ParseEndpoint(%q) = %q, %v; want ErrBadEndpoint", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseEndpoint(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestServer_Serve_IdentityAndController(t *testing.T) {
	srv := NewServer(newFakeVolumes(), WithLogger(discardLogger()))
	conn := dial(t, serve(t, srv))
	ctx := context.Background()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != vigil.DriverName || info.GetVendorVersion() != vigil.Version {
		t.Fatalf("GetPluginInfo = %v, %v; want %s %s", info, err, vigil.DriverName, vigil.Version)
	}
	if _, err := csi.NewControllerClient(conn).GetCapacity(ctx, &csi.GetCapacityRequest{}); err != nil {
		t.Fatalf("GetCapacity over the socket: %v", err)
	}
	// No node service was passed in, so none is served.
	_, err = csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("NodeGetInfo without a node service = %v, want Unimplemented", err)
	}
}

func TestServer_Serve_NodeOnly(t *testing.T) {
	srv := NewServer(nil, WithNodeService(stubNode{}), WithLogger(discardLogger()))
	conn := dial(t, serve(t, srv))
	ctx := context.Background()
	caps, err := csi.NewIdentityClient(conn).GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 0 {
		t.Fatalf("node-only plugin capabilities = %v, %v; want none", caps, err)
	}
	if _, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}); err != nil {
		t.Fatalf("NodeGetInfo: %v", err)
	}
	_, err = csi.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("controller on a node-only plugin = %v, want Unimplemented", err)
	}
}

func TestServer_Serve_ReplacesStaleSocket(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "csi.sock")
	first := NewServer(newFakeVolumes(), WithLogger(discardLogger()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Serve(ctx, sock) }()
	<-first.Ready()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind after a clean stop: %v", err)
	}
	// A socket left by a crash (simulated: a listener that is never closed
	// cleanly) is replaced.
	crashed := NewServer(newFakeVolumes(), WithLogger(discardLogger()))
	lis, err := listenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	conn := dial(t, serve(t, crashed))
	if _, err := csi.NewIdentityClient(conn).Probe(context.Background(), &csi.ProbeRequest{}); err != nil {
		t.Fatalf("Probe: %v", err)
	}
}

func TestServer_Serve_RefusesNonSocket(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "precious")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := NewServer(newFakeVolumes(), WithLogger(discardLogger())).Serve(context.Background(), "unix://"+path)
	if !errors.Is(err, ErrBadEndpoint) {
		t.Fatalf("Serve over a regular file = %v, want ErrBadEndpoint", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Fatalf("the file in the way was changed: %q", b)
	}
}

func TestServer_Stop_UnblocksServe(t *testing.T) {
	srv := NewServer(newFakeVolumes(), WithLogger(discardLogger()), WithStopTimeout(time.Second))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), filepath.Join(shortTempDir(t), "csi.sock")) }()
	<-srv.Ready()
	srv.Stop()
	srv.Stop() // a second Stop is harmless
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after Stop = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Stop")
	}
	if err := srv.Serve(context.Background(), filepath.Join(shortTempDir(t), "csi.sock")); err == nil {
		t.Fatal("second Serve succeeded; want an error")
	}
}
