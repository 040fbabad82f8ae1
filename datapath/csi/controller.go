package csi

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

// ControllerServer is the CSI controller service on top of the datapath: volumes
// are created and deleted there, publishing is a grant and unpublishing a fence
// followed by a release.
type ControllerServer struct {
	csi.UnimplementedControllerServer
	volumes  Volumes
	nodes    Nodes
	replicas ReplicaDefault
	busy     inflight
}

// NewControllerServer returns the controller service. nodes may be nil: every
// node ID is then taken to exist.
func NewControllerServer(volumes Volumes, nodes Nodes) *ControllerServer {
	return &ControllerServer{volumes: volumes, nodes: nodes}
}

// controllerCapabilities is what ControllerGetCapabilities advertises.
// LIST_VOLUMES_PUBLISHED_NODES is left out on purpose: with it the
// external-attacher would read a fenced node as "not attached" and re-attach
// it, granting the volume back to the node Vigil just fenced.
var controllerCapabilities = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}

// ControllerGetCapabilities lists the controller RPCs Vigil implements.
func (s *ControllerServer) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range controllerCapabilities {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}

// CreateVolume creates a volume on the datapath, or returns the existing volume
// of that name when it satisfies the request (CSI idempotency by name). Its
// replica count is the StorageClass parameter replicas, else the default
// (ReplicaDefault); a count above the number of datapath servers is refused
// before anything is made.
func (s *ControllerServer) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	mode, size, err := checkCreateVolume(req)
	if err != nil {
		return nil, err
	}
	ask, err := s.replicasFor(req.GetParameters())
	if err != nil {
		return nil, err
	}
	name := req.GetName()
	release, err := s.busy.acquire(fmt.Sprintf("volume name %q", name))
	if err != nil {
		return nil, err
	}
	defer release()
	if err := s.checkServers(ctx, ask); err != nil {
		return nil, err
	}
	vol, err := s.create(ctx, name, size, mode, ask)
	if errors.Is(err, datapath.ErrAlreadyExists) {
		vol, err = s.existingVolume(ctx, req, mode, ask, err)
	}
	if err != nil {
		return nil, statusFromError(err, withAsk(fmt.Sprintf("create volume %q (%d bytes, %s)", name, size, mode), ask))
	}
	v := toCSIVolume(vol)
	v.VolumeContext = map[string]string{ParameterReplicas: strconv.Itoa(ask.count)}
	return &csi.CreateVolumeResponse{Volume: v}, nil
}

// existingVolume resolves a name conflict: the datapath already has a volume of
// that name with another size, mode or replica count. If that volume's size
// is within the range and its mode serves every capability, the create is
// asked again with its size and mode, so the datapath judges the replica count
// too: the same count returns the volume, another stays a conflict naming both
// counts. A volume of the very size and mode asked conflicts on the count.
func (s *ControllerServer) existingVolume(ctx context.Context, req *csi.CreateVolumeRequest, mode datapath.AccessMode, ask replicaAsk, conflict error) (datapath.Volume, error) {
	vols, err := s.volumes.ListVolumes(ctx)
	if err != nil {
		return datapath.Volume{}, fmt.Errorf("look up existing volume: %w", err)
	}
	for _, v := range vols {
		if v.Name != req.GetName() {
			continue
		}
		if !inRange(v.Size, req.GetCapacityRange()) || (v.Access != mode && v.Access != datapath.AccessRWX) {
			return datapath.Volume{}, fmt.Errorf("volume %s exists with %d bytes and mode %s, the request asks for [%d, %d] bytes and mode %s: %w",
				v.ID, v.Size, v.Access, req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes(), mode, datapath.ErrAlreadyExists)
		}
		size, _ := sizeFor(req.GetCapacityRange()) // checked by checkCreateVolume
		if v.Size == size && v.Access == mode {
			return datapath.Volume{}, conflict // the replica count differs: the datapath's message names both
		}
		return s.create(ctx, v.Name, v.Size, v.Access, ask)
	}
	return datapath.Volume{}, conflict
}

// DeleteVolume deletes a volume; a volume that does not exist is already deleted.
func (s *ControllerServer) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalidArgument("volume_id is empty; give the id CreateVolume returned")
	}
	release, err := s.busy.acquire(fmt.Sprintf("volume %q", id))
	if err != nil {
		return nil, err
	}
	defer release()
	err = s.volumes.DeleteVolume(ctx, id)
	if err != nil && !volumeGone(err) {
		return nil, statusFromError(err, fmt.Sprintf("delete volume %s", id))
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// ControllerPublishVolume grants node I/O on the volume, of the use GrantUse
// decides for the capability, and hands the grant's epoch to the node in the
// publish context. Publishing again to the same node is a renewed grant; an RWO
// volume held by another node, or a filesystem writer next to another writer,
// is FailedPrecondition.
func (s *ControllerServer) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if err := checkPublish(req); err != nil {
		return nil, err
	}
	release, err := s.busy.acquire(fmt.Sprintf("volume %q", id))
	if err != nil {
		return nil, err
	}
	defer release()
	if err := s.checkNode(ctx, node); err != nil {
		return nil, err
	}
	vol, err := s.getVolume(ctx, id)
	if err != nil {
		return nil, statusFromError(err, fmt.Sprintf("publish volume %s to node %s", id, node))
	}
	if !compatible(vol.Access, req.GetVolumeCapability()) {
		return nil, invalidArgument("volume_capability.access_mode %s needs a multi-node volume, but volume %s was created %s (single node)",
			req.GetVolumeCapability().GetAccessMode().GetMode(), id, vol.Access)
	}
	use, err := grantUseOf(req.GetVolumeCapability())
	if err != nil { // checkPublish refused it already; kept for safety
		return nil, invalidArgument("volume_capability.%v", err)
	}
	epoch, err := s.volumes.GrantAs(ctx, id, node, use)
	if err != nil {
		return nil, statusFromError(err, fmt.Sprintf("grant volume %s to node %s", id, node))
	}
	return &csi.ControllerPublishVolumeResponse{
		PublishContext: map[string]string{vigil.PublishContextEpochKey: strconv.FormatUint(epoch, 10)},
	}, nil
}

// checkNode answers NotFound for a node the Nodes lookup does not know.
func (s *ControllerServer) checkNode(ctx context.Context, node string) error {
	if s.nodes == nil {
		return nil
	}
	ok, err := s.nodes.NodeExists(ctx, node)
	if err != nil {
		return statusFromError(err, fmt.Sprintf("look up node %s", node))
	}
	if !ok {
		return status.Errorf(codes.NotFound, "node %s does not exist", node)
	}
	return nil
}

// ControllerUnpublishVolume fences the node from the volume, so nothing it still
// has in flight can land, and then releases its grant. Without node_id it does so
// for every node holding a live grant, as the CSI spec asks. A volume that does
// not exist, or a node without a live grant, is already unpublished: success.
func (s *ControllerServer) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, invalidArgument("volume_id is empty; give the id CreateVolume returned")
	}
	if len(node) > datapath.MaxNodeLen {
		return nil, invalidArgument("node_id %.20q... is %d bytes long; at most %d are allowed", node, len(node), datapath.MaxNodeLen)
	}
	release, err := s.busy.acquire(fmt.Sprintf("volume %q", id))
	if err != nil {
		return nil, err
	}
	defer release()
	nodes, err := s.liveNodes(ctx, id, node)
	if volumeGone(err) {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err != nil {
		return nil, statusFromError(err, fmt.Sprintf("unpublish volume %s", id))
	}
	for _, n := range nodes {
		if _, err := s.volumes.Fence(ctx, id, n); err != nil && !errors.Is(err, datapath.ErrNotFound) {
			return nil, statusFromError(err, fmt.Sprintf("fence node %s from volume %s", n, id))
		}
		if err := s.volumes.Release(ctx, id, n); err != nil && !errors.Is(err, datapath.ErrNotFound) {
			return nil, statusFromError(err, fmt.Sprintf("release volume %s from node %s", id, n))
		}
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// volumeGone reports whether an error from a datapath call that takes nothing
// but a volume id means that no such volume exists: ErrNotFound, or
// ErrInvalidArgument, which for such a call can only be about the id's shape,
// and an id of the wrong shape was never issued. (Calls that also take a node
// name must not use it: there InvalidArgument may be about the node.)
func volumeGone(err error) bool {
	return errors.Is(err, datapath.ErrNotFound) || errors.Is(err, datapath.ErrInvalidArgument)
}

// getVolume looks a volume up; one that does not exist is ErrNotFound.
func (s *ControllerServer) getVolume(ctx context.Context, id string) (datapath.Volume, error) {
	vol, err := s.volumes.GetVolume(ctx, id)
	if err != nil && volumeGone(err) {
		return datapath.Volume{}, fmt.Errorf("volume %s does not exist: %w", id, datapath.ErrNotFound)
	}
	return vol, err
}

// liveNodes returns the nodes holding a live grant on the volume: only node when
// it is given, every such node when node is "".
func (s *ControllerServer) liveNodes(ctx context.Context, id, node string) ([]string, error) {
	atts, err := s.volumes.Attachments(ctx, id)
	if err != nil {
		return nil, err
	}
	var nodes []string
	for _, a := range atts {
		if a.Live() && (node == "" || a.Node == node) {
			nodes = append(nodes, a.Node)
		}
	}
	return nodes, nil
}

// ValidateVolumeCapabilities confirms the capabilities an existing volume can
// serve. A well-formed request Vigil cannot serve is answered without
// confirmation and with a message, as the CSI spec asks, not with an error.
func (s *ControllerServer) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalidArgument("volume_id is empty; give the id CreateVolume returned")
	}
	if err := checkCapabilityShapes("volume_capabilities", req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	vol, err := s.getVolume(ctx, id)
	if err != nil {
		return nil, statusFromError(err, fmt.Sprintf("validate capabilities of volume %s", id))
	}
	if msg := unsupported(vol, req); msg != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: msg}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
		MutableParameters:  req.GetMutableParameters(),
	}}, nil
}

// unsupported returns why vol cannot serve what req asks, or "".
func unsupported(vol datapath.Volume, req *csi.ValidateVolumeCapabilitiesRequest) string {
	for i, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(fmt.Sprintf("volume_capabilities[%d]", i), c); err != nil {
			return status.Convert(err).Message()
		}
		if !compatible(vol.Access, c) {
			return fmt.Sprintf("volume_capabilities[%d].access_mode %s needs a multi-node volume; volume %s is %s",
				i, c.GetAccessMode().GetMode(), vol.ID, vol.Access)
		}
	}
	if err := checkParameters(req.GetParameters()); err != nil {
		return status.Convert(err).Message()
	}
	if len(req.GetMutableParameters()) > 0 {
		return "mutable_parameters are not supported: Vigil has no modifiable volume attributes"
	}
	return ""
}

// ListVolumes pages through the volumes in id order. The next token names the
// last id returned, so a page stays correct when volumes come and go between
// calls; a token Vigil did not issue is Aborted, as the CSI spec asks.
func (s *ControllerServer) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, invalidArgument("max_entries is %d; it must be 0 (no limit) or positive", req.GetMaxEntries())
	}
	after, err := decodeToken(req.GetStartingToken())
	if err != nil {
		return nil, err
	}
	vols, err := s.volumes.ListVolumes(ctx)
	if err != nil {
		return nil, statusFromError(err, "list volumes")
	}
	page, next := paginate(vols, after, int(req.GetMaxEntries()))
	resp := &csi.ListVolumesResponse{NextToken: next}
	for _, v := range page {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: toCSIVolume(v)})
	}
	return resp, nil
}

// GetCapacity reports the bytes the datapath can still give to new volumes; for
// capabilities Vigil cannot serve it reports 0, as the CSI spec asks.
func (s *ControllerServer) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if err := checkParameters(req.GetParameters()); err != nil {
		return nil, err
	}
	if caps := req.GetVolumeCapabilities(); len(caps) > 0 {
		if err := checkCapabilityShapes("volume_capabilities", caps); err != nil {
			return nil, err
		}
	}
	for i, c := range req.GetVolumeCapabilities() {
		if err := checkCapability(fmt.Sprintf("volume_capabilities[%d]", i), c); err != nil {
			return &csi.GetCapacityResponse{}, nil
		}
	}
	avail, err := s.volumes.Capacity(ctx)
	if err != nil {
		return nil, statusFromError(err, "get capacity")
	}
	avail = max(avail/SizeAlignment*SizeAlignment, 0)
	return &csi.GetCapacityResponse{
		AvailableCapacity: avail,
		MaximumVolumeSize: wrapperspb.Int64(avail),
		MinimumVolumeSize: wrapperspb.Int64(SizeAlignment),
	}, nil
}

// toCSIVolume is the CSI view of a datapath volume. Vigil volumes are reachable
// from every node, so there is no topology, and the volume context is empty: the
// node service needs only the id and the epoch from the publish context.
func toCSIVolume(v datapath.Volume) *csi.Volume {
	return &csi.Volume{VolumeId: v.ID, CapacityBytes: v.Size}
}
