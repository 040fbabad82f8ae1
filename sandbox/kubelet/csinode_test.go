package kubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// fakeNode is a CSI node service test double served over a real gRPC server
// on a unix socket: it records every call (paths relative to root) and fails
// a method while fail[method] is set.
type fakeNode struct {
	csi.UnimplementedNodeServer
	root    string
	noStage bool

	mu       sync.Mutex
	calls    []string
	stages   []*csi.NodeStageVolumeRequest
	pubs     []*csi.NodePublishVolumeRequest
	fail     map[string]error
	endpoint string
}

// startFakeNode serves a fakeNode and returns it with a client connected to it.
func startFakeNode(t *testing.T, root string) (*fakeNode, csi.NodeClient) {
	t.Helper()
	dir, err := os.MkdirTemp("", "kltcsi") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "csi.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{root: root, fail: map[string]error{}, endpoint: "unix://" + sock}
	srv := grpc.NewServer()
	csi.RegisterNodeServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return f, csi.NewNodeClient(conn)
}

func (f *fakeNode) rel(p string) string {
	if r, err := filepath.Rel(f.root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

// record notes a call and returns the error set for method.
func (f *fakeNode) record(method, format string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, method+" "+fmt.Sprintf(format, args...))
	return f.fail[method]
}

func (f *fakeNode) setFail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, method)
	} else {
		f.fail[method] = err
	}
}

// takeCalls returns the calls since the last take, without NodeGetCapabilities.
func (f *fakeNode) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if !strings.HasPrefix(c, "NodeGetCapabilities") {
			out = append(out, c)
		}
	}
	f.calls = nil
	return out
}

func (f *fakeNode) lastStage() *csi.NodeStageVolumeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.stages) == 0 {
		return nil
	}
	return f.stages[len(f.stages)-1]
}

func (f *fakeNode) publishes() []*csi.NodePublishVolumeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*csi.NodePublishVolumeRequest(nil), f.pubs...)
}

func (f *fakeNode) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	if err := f.record("NodeGetCapabilities", ""); err != nil {
		return nil, err
	}
	resp := &csi.NodeGetCapabilitiesResponse{}
	if !f.noStage {
		resp.Capabilities = []*csi.NodeServiceCapability{{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}}}
	}
	return resp, nil
}

func (f *fakeNode) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	f.mu.Lock()
	f.stages = append(f.stages, req)
	f.mu.Unlock()
	if err := f.record("NodeStageVolume", "%s %s", req.GetVolumeId(), f.rel(req.GetStagingTargetPath())); err != nil {
		return nil, err
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (f *fakeNode) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if err := f.record("NodeUnstageVolume", "%s %s", req.GetVolumeId(), f.rel(req.GetStagingTargetPath())); err != nil {
		return nil, err
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (f *fakeNode) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	f.mu.Lock()
	f.pubs = append(f.pubs, req)
	f.mu.Unlock()
	if err := f.record("NodePublishVolume", "%s %s", req.GetVolumeId(), f.rel(req.GetTargetPath())); err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (f *fakeNode) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := f.record("NodeUnpublishVolume", "%s %s", req.GetVolumeId(), f.rel(req.GetTargetPath())); err != nil {
		return nil, err
	}
	os.Remove(req.GetTargetPath()) // the spec: the plugin deletes the target path
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
