package datapath

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// The service is described by hand (no protobuf code generation): each method
// authenticates, decodes its request with the wire codec, authorizes it
// (identity.go), calls the Store and maps errors with ToStatus.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: wire.ServiceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		confirmMethod(wire.MethodCreateVolume, func(s *Store, r *wire.CreateVolumeRequest, p *pendingApply) (wire.Message, error) {
			if r.ID == "" && r.Server == "" {
				v, err := s.CreateVolume(r.Name, r.Size, AccessMode(r.Access))
				return volumeToWire(v), err
			}
			if p == nil {
				return nil, fmt.Errorf("%w: create volume %q placed on server %s: the client must confirm with that server (%s)", ErrInvalidArgument, r.Name, r.Server, wire.ConfirmMetadataKey)
			}
			if len(r.Replicas) > 0 {
				return createReplicatedWire(s, r, p)
			}
			v, err := s.createPlaced(r.ID, r.Name, r.Size, AccessMode(r.Access), r.Server, p)
			out := volumeToWire(v)
			out.Pending = p.toWire()
			return out, err
		}),
		confirmMethod(wire.MethodDeleteVolume, func(s *Store, r *wire.VolumeRef, p *pendingApply) (wire.Message, error) {
			err := s.deleteVolume(r.ID, p)
			return &wire.PendingAnswer{Pending: p.toWire()}, err
		}),
		method(wire.MethodGetVolume, func(s *Store, r *wire.VolumeRef) (wire.Message, error) {
			v, err := s.GetVolume(r.ID)
			return volumeToWire(v), err
		}),
		method(wire.MethodListVolumes, func(s *Store, _ *wire.Empty) (wire.Message, error) {
			vs, err := s.ListVolumes()
			out := &wire.VolumeList{Volumes: make([]wire.Volume, len(vs))}
			for i, v := range vs {
				out.Volumes[i] = *volumeToWire(v)
			}
			return out, err
		}),
		method(wire.MethodCapacity, func(s *Store, _ *wire.Empty) (wire.Message, error) {
			n, err := s.Capacity()
			return &wire.Int{Value: n}, err
		}),
		confirmMethod(wire.MethodGrant, func(s *Store, r *wire.AttachRequest, p *pendingApply) (wire.Message, error) {
			use := GrantUse(r.Use)
			if use == "" {
				use = UseReadWrite
			}
			e, err := s.grantAs(r.VolumeID, r.Node, use, p)
			return &wire.Epoch{Epoch: e, Pending: p.toWire()}, err
		}),
		confirmMethod(wire.MethodFence, func(s *Store, r *wire.AttachRequest, p *pendingApply) (wire.Message, error) {
			e, err := s.fence(r.VolumeID, r.Node, p)
			return &wire.Epoch{Epoch: e, Pending: p.toWire()}, err
		}),
		confirmMethod(wire.MethodRelease, func(s *Store, r *wire.AttachRequest, p *pendingApply) (wire.Message, error) {
			err := s.release(r.VolumeID, r.Node, p)
			return &wire.PendingAnswer{Pending: p.toWire()}, err
		}),
		method(wire.MethodAttachments, func(s *Store, r *wire.VolumeRef) (wire.Message, error) {
			as, err := s.Attachments(r.ID)
			out := &wire.AttachmentList{VolumeID: r.ID, Items: make([]wire.Attachment, len(as))}
			for i, a := range as {
				out.Items[i] = wire.Attachment{Node: a.Node, Epoch: a.Epoch, State: string(a.State), UpdatedUnix: unixNano(a.Updated)}
			}
			return out, err
		}),
		writeMethod(),
		method(wire.MethodRead, func(s *Store, r *wire.ReadRequest) (wire.Message, error) {
			if r.Length < 0 || r.Length > MaxIOSize {
				return nil, fmt.Errorf("%w: read volume %s: length %d; allowed are 0 to %d", ErrInvalidArgument, r.VolumeID, r.Length, MaxIOSize)
			}
			p, err := s.ReadAt(r.VolumeID, r.Node, r.Epoch, r.Offset, int(r.Length))
			return &wire.Data{Data: p}, err
		}),
		method(wire.MethodFlush, func(s *Store, r *wire.FlushRequest) (wire.Message, error) {
			return &wire.Empty{}, s.Flush(r.VolumeID, r.Node, r.Epoch)
		}),
		method(wire.MethodHeartbeat, func(s *Store, r *wire.NodeRef) (wire.Message, error) {
			return &wire.Empty{}, s.Heartbeat(r.Node)
		}),
		method(wire.MethodConnectivity, func(s *Store, r *wire.ConnectivityRequest) (wire.Message, error) {
			c, err := s.Connectivity(r.Node, r.VolumeID, time.Duration(r.WithinNanos))
			return &wire.Connectivity{
				Connected: c.Connected, LastHeartbeat: unixNano(c.LastHeartbeat),
				IOActive: c.IOActive, LastIO: unixNano(c.LastIO), Now: unixNano(c.Now),
			}, err
		}),
		method(wire.MethodNodeGrants, func(s *Store, r *wire.NodeRef) (wire.Message, error) {
			gs, err := s.NodeGrants(r.Node)
			out := &wire.NodeGrantList{Node: r.Node, Items: make([]wire.NodeGrant, len(gs))}
			for i, g := range gs {
				out.Items[i] = wire.NodeGrant{VolumeID: g.VolumeID, Epoch: g.Epoch, State: string(g.State), UpdatedUnix: unixNano(g.Updated)}
			}
			return out, err
		}),
		confirmMethod(wire.MethodFenceNode, func(s *Store, r *wire.NodeRef, p *pendingApply) (wire.Message, error) {
			fs, err := s.fenceNode(r.Node, p)
			out := &wire.FencedList{Items: make([]wire.FencedVolume, len(fs)), Pending: p.toWire()}
			for i, f := range fs {
				out.Items[i] = wire.FencedVolume{VolumeID: f.VolumeID, Epoch: f.Epoch}
			}
			return out, err
		}),
		method(wire.MethodLeave, func(s *Store, r *wire.LeaveRequest) (wire.Message, error) {
			until, err := s.Leave(r.Node, time.Duration(r.DurationNanos))
			return &wire.Int{Value: unixNano(until)}, err
		}),
		method(wire.MethodNodes, func(s *Store, _ *wire.Empty) (wire.Message, error) {
			rep, err := s.Nodes()
			return nodesToWire(rep), err
		}),
		method(wire.MethodFailedVolumes, func(s *Store, _ *wire.Empty) (wire.Message, error) {
			fs, err := s.FailedVolumes()
			out := &wire.FailedList{Items: make([]wire.FailedVolume, len(fs))}
			for i, f := range fs {
				out.Items[i] = wire.FailedVolume{VolumeID: f.VolumeID, Name: f.Name, SinceUnix: unixNano(f.Since), Op: f.Op, Error: f.Error}
			}
			return out, err
		}),
		method(wire.MethodClearFailure, func(s *Store, r *wire.VolumeRef) (wire.Message, error) {
			return &wire.Empty{}, s.ClearFailure(r.ID)
		}),
		// Appended, not inserted: the fuzz corpus names methods by position.
		method(wire.MethodOpenWriteSession, func(s *Store, r *wire.OpenSessionRequest) (wire.Message, error) {
			gen, err := s.OpenWriteSession(r.VolumeID, r.Node, r.Epoch)
			return &wire.Generation{Gen: gen}, err
		}),
		methodCtx(wire.MethodGroupVolumes, func(ctx context.Context, s *Store, _ *wire.Empty) (wire.Message, error) {
			vs, err := s.GroupVolumes()
			out := &wire.GroupVolumeList{Items: make([]wire.GroupVolume, len(vs))}
			if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(wire.ReplicasMetadataKey)) > 0 {
				out.WithReplicas = true // a client from before would not decode the section
				out.WithForced = len(md.Get(wire.ForcedMetadataKey)) > 0
			}
			for i, v := range vs {
				out.Items[i] = wire.GroupVolume{ID: v.ID, Name: v.Name, Server: v.Server, Epoch: v.Epoch,
					Replicas: v.Replicas, InSync: v.InSync, MemberEpoch: v.MemberEpoch, Forced: forcedToWire(v.Forced)}
			}
			return out, err
		}),
		method(wire.MethodServers, func(s *Store, _ *wire.Empty) (wire.Message, error) {
			rep, err := s.Servers()
			out := &wire.ServerList{NowUnix: unixNano(rep.Now), Items: make([]wire.ServerStatus, len(rep.Servers))}
			for i, m := range rep.Servers {
				out.Items[i] = wire.ServerStatus{ID: m.ID, Node: m.Node, Address: m.Address, RaftAddress: m.RaftAddress, Role: m.Role,
					LastContactUnix: unixNano(m.LastContact), AppliedIndex: m.AppliedIndex, Self: m.Self}
			}
			return out, err
		}),
		methodCtx(wire.MethodWaitApplied, func(ctx context.Context, s *Store, r *wire.WaitAppliedRequest) (wire.Message, error) {
			return &wire.Empty{}, s.WaitApplied(ctx, r.Index, r.Term, time.Duration(r.TimeoutNanos))
		}),
		method(wire.MethodPrepareVolume, func(s *Store, r *wire.CreateVolumeRequest) (wire.Message, error) {
			if r.ID != "" || r.Server != "" {
				return nil, fmt.Errorf("%w: prepare volume %q: a prepare names no id or server (the server draws the id and is itself the server)", ErrInvalidArgument, r.Name)
			}
			v, server, err := s.PrepareVolume(r.Name, r.Size, AccessMode(r.Access))
			return &wire.PreparedVolume{ID: v.ID, Server: server}, err
		}),
		method(wire.MethodMarkOutOfSync, func(s *Store, r *wire.MarkOutOfSyncRequest) (wire.Message, error) {
			set, err := s.MarkReplicaOutOfSync(r.VolumeID, r.Replica, r.MemberEpoch, r.Node, r.Epoch)
			if err != nil {
				return nil, err
			}
			return &wire.ReplicaSetAnswer{Holder: set.Holder, Replicas: set.Replicas, InSync: set.InSync, MemberEpoch: set.MemberEpoch}, nil
		}),
		method(wire.MethodAddServer, func(s *Store, r *wire.AddServerRequest) (wire.Message, error) {
			if r.Nonvoter {
				return &wire.Empty{}, s.AddNonvoter(r.ID, r.RaftAddress, r.DatapathAddress)
			}
			return &wire.Empty{}, s.AddServer(r.ID, r.RaftAddress, r.DatapathAddress)
		}),
		method(wire.MethodPrepareReplica, func(s *Store, r *wire.CreateVolumeRequest) (wire.Message, error) {
			if r.Server != "" || len(r.Replicas) > 0 {
				return nil, fmt.Errorf("%w: prepare a replica of volume %q: a prepare names only the id (the holder's), no server or replicas", ErrInvalidArgument, r.Name)
			}
			v, err := s.PrepareReplica(r.ID, r.Name, r.Size, AccessMode(r.Access))
			return &wire.PreparedVolume{ID: v.ID, Server: s.selfID()}, err
		}),
		forceReplicasMethod(), // forcereplica.go
		method(wire.MethodDirtyRegions, func(s *Store, r *wire.DirtyRegionsRequest) (wire.Message, error) {
			if r.From < 0 {
				return nil, fmt.Errorf("%w: dirty regions of volume %s from byte %d; from must be 0 or more", ErrInvalidArgument, r.VolumeID, r.From)
			}
			m, err := s.DirtyRegions(r.VolumeID, r.Replica, r.Node, r.Epoch)
			if err != nil {
				return nil, err
			}
			out := &wire.DirtyRegionsAnswer{Since: m.Since, MemberEpoch: m.MemberEpoch, All: m.All, Bytes: m.Bytes}
			out.Ranges, out.Next = dirtyPage(m.Ranges, r.From, wire.MaxDirtyRanges)
			return out, nil
		}),
	},
	Streams:  []grpc.StreamDesc{},
	Metadata: "datapath/service.go",
}

// method builds one unary handler: authenticate first (before decoding, so an
// unauthenticated caller costs little), then decode, authorize (the request
// names the node), and call.
func method[R any, PR interface {
	*R
	wire.Message
}](name string, call func(*Store, PR) (wire.Message, error)) grpc.MethodDesc {
	return methodCtx(name, func(_ context.Context, s *Store, r PR) (wire.Message, error) { return call(s, r) })
}

// confirmMethod is method for a change of the control state: pend is set
// when the request says its client confirms with the servers that hold the
// touched volumes' data (wire.ConfirmMetadataKey, holders.go).
func confirmMethod[R any, PR interface {
	*R
	wire.Message
}](name string, call func(*Store, PR, *pendingApply) (wire.Message, error)) grpc.MethodDesc {
	return methodCtx(name, func(ctx context.Context, s *Store, r PR) (wire.Message, error) {
		var pend *pendingApply
		if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(wire.ConfirmMetadataKey)) > 0 {
			pend = newPendingApply()
		}
		return call(s, r, pend)
	})
}

// methodCtx is method with the call's context.
func methodCtx[R any, PR interface {
	*R
	wire.Message
}](name string, call func(context.Context, *Store, PR) (wire.Message, error)) grpc.MethodDesc {
	return methodAs(name, func(ctx context.Context, st *Store, _ Identity, req PR) (wire.Message, error) {
		return call(ctx, st, req)
	})
}

// methodAs is methodCtx handing the call the caller's identity too, for a
// change that records who asked (ForceReplicas).
func methodAs[R any, PR interface {
	*R
	wire.Message
}](name string, call func(context.Context, *Store, Identity, PR) (wire.Message, error)) grpc.MethodDesc {
	handler := func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		s := srv.(*Server)
		id, err := s.authenticate(ctx)
		if err != nil {
			return nil, ToStatus(authError(err))
		}
		var frame wire.Frame
		if err := dec(&frame); err != nil {
			return nil, err
		}
		defer frame.Free()
		req := PR(new(R))
		if err := req.Unmarshal(frame.Bytes()); err != nil {
			return nil, ToStatus(fmt.Errorf("%w: %s request: %v", ErrInvalidArgument, name, err))
		}
		if err := Authorize(id, name, requestNode(req)); err != nil {
			return nil, ToStatus(err)
		}
		run := func(ctx context.Context, req any) (any, error) {
			resp, err := call(ctx, s.store, id, req.(PR))
			if err != nil {
				return nil, ToStatus(err)
			}
			return resp, nil
		}
		if ic == nil {
			return run(ctx, req)
		}
		return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: wire.FullMethod(name)}, run)
	}
	return grpc.MethodDesc{MethodName: name, Handler: handler}
}

// writeMethod is the Write handler: like method, but the payload goes from
// gRPC's receive buffers to the volume file with one pwritev, uncopied, and
// only under the generation of the write session opened last (ErrStaleSession
// otherwise), as on the bulk channel.
func writeMethod() grpc.MethodDesc {
	handler := func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		s := srv.(*Server)
		id, err := s.authenticate(ctx)
		if err != nil {
			return nil, ToStatus(authError(err))
		}
		var frame wire.Frame
		if err := dec(&frame); err != nil {
			return nil, err
		}
		defer frame.Free()
		req, iov, err := frame.DecodeWrite()
		if err != nil {
			return nil, ToStatus(fmt.Errorf("%w: %s request: %v", ErrInvalidArgument, wire.MethodWrite, err))
		}
		if err := Authorize(id, wire.MethodWrite, req.Node); err != nil {
			return nil, ToStatus(err)
		}
		run := func(ctx context.Context, _ any) (any, error) {
			err := s.store.sessions.write(req.VolumeID, req.Node, req.Epoch, req.Gen, func() error {
				return s.store.writeVec(req.VolumeID, req.Node, req.Epoch, req.MemberEpoch, req.Offset, iov)
			})
			if err != nil {
				return nil, ToStatus(err)
			}
			return &wire.Empty{}, nil
		}
		if ic == nil {
			return run(ctx, &req)
		}
		return ic(ctx, &req, &grpc.UnaryServerInfo{Server: srv, FullMethod: wire.FullMethod(wire.MethodWrite)}, run)
	}
	return grpc.MethodDesc{MethodName: wire.MethodWrite, Handler: handler}
}

func nodesToWire(r NodesReport) *wire.NodeList {
	out := &wire.NodeList{NowUnix: unixNano(r.Now), StartedUnix: unixNano(r.Started), Items: make([]wire.NodeStatus, len(r.Nodes))}
	for i, n := range r.Nodes {
		out.Items[i] = wire.NodeStatus{Node: n.Node, LastHeartbeat: unixNano(n.LastHeartbeat), LastIO: unixNano(n.LastIO),
			LeavingUntil: unixNano(n.LeavingUntil), LiveGrants: uint64(n.LiveGrants)}
	}
	return out
}

func volumeToWire(v Volume) *wire.Volume {
	return &wire.Volume{ID: v.ID, Name: v.Name, Size: v.Size, Access: string(v.Access), CreatedUnix: unixNano(v.Created)}
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// authError keeps an authenticator's refusal as it is and turns any other
// error (one that names no sentinel) into ErrAuthUnavailable: a token that
// could not be checked is refused, never let in.
func authError(err error) error {
	for _, e := range []error{ErrUnauthenticated, ErrPermissionDenied, ErrAuthUnavailable} {
		if errors.Is(err, e) {
			return err
		}
	}
	return fmt.Errorf("%w: %v", ErrAuthUnavailable, err)
}
