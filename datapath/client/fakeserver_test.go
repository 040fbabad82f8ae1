package client_test

import (
	"fmt"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// staleServer is a fake datapath server over gRPC alone that opens write
// sessions, reports its volume as one copy at a member epoch that moves on
// by one at each GroupVolumes, and refuses every write as at a stale member
// epoch, recording the member epoch each write carried.
type staleServer struct {
	addr   string
	member uint64
	// older: the server is from before engines read replica sets: it
	// refuses GroupVolumes to an engine and takes writes at member epoch 0.
	older bool
	mu    sync.Mutex
	got   []uint64
}

func (f *staleServer) members() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.got...)
}

func startStaleServer(t testing.TB, member uint64) *staleServer {
	return startFakeServer(t, &staleServer{member: member})
}

func startFakeServer(t testing.TB, f *staleServer) *staleServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	srv := grpc.NewServer(grpc.ForceServerCodecV2(wire.Codec{}), grpc.UnknownServiceHandler(f.handle))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return f
}

func (f *staleServer) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	switch method {
	case wire.FullMethod(wire.MethodOpenWriteSession):
		var req wire.OpenSessionRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		return stream.SendMsg(&wire.Generation{Gen: 1})
	case wire.FullMethod(wire.MethodWrite):
		var req wire.WriteRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		f.mu.Lock()
		f.got = append(f.got, req.MemberEpoch)
		f.mu.Unlock()
		if f.older && req.MemberEpoch == 0 {
			return stream.SendMsg(&wire.Empty{})
		}
		return datapath.ToStatus(fmt.Errorf("%w: write volume %s carries member epoch %d; this server applied member epoch %d",
			datapath.ErrStaleMemberEpoch, req.VolumeID, req.MemberEpoch, req.MemberEpoch+1))
	case wire.FullMethod(wire.MethodGroupVolumes):
		var req wire.Empty
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		if f.older {
			return datapath.ToStatus(fmt.Errorf("%w: the engine of node n1 may not call GroupVolumes: only the controller identity may", datapath.ErrPermissionDenied))
		}
		f.mu.Lock()
		m := f.member
		f.member++
		f.mu.Unlock()
		return stream.SendMsg(&wire.GroupVolumeList{WithReplicas: true, Items: []wire.GroupVolume{{
			ID: "vol-0123456789abcdef", Name: "pvc", Server: "s1", Epoch: 1,
			Replicas: []string{"s1"}, InSync: []string{"s1"}, MemberEpoch: m}}})
	}
	return fmt.Errorf("fake server: %s not served", method)
}
