package csi

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vigil "github.com/vigil-storage/vigil"
)

// stubNodeID is the node id the stub node service reports.
const stubNodeID = "sanity-node"

// stubNode is a minimal CSI node service, for the sanity suite only: the real one
// belongs to the engine-node. It checks arguments like a real node service,
// insists on the epoch in the publish context (so the sanity run proves the
// controller hands it over), and "publishes" by creating the target directory
// and "unpublishes" by removing it; nothing is mounted.
type stubNode struct {
	csi.UnimplementedNodeServer
}

func (stubNode) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: stubNodeID}, nil
}

func (stubNode) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{
			Type: csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		}},
	}}}, nil
}

func (stubNode) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is empty")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is empty")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is missing")
	}
	epoch, err := strconv.ParseUint(req.GetPublishContext()[vigil.PublishContextEpochKey], 10, 64)
	if err != nil || epoch == 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "publish_context[%s] is %q; want the grant epoch",
			vigil.PublishContextEpochKey, req.GetPublishContext()[vigil.PublishContextEpochKey])
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (stubNode) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is empty")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "staging_target_path is empty")
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (stubNode) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is empty")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target_path is empty")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume_capability is missing")
	case req.GetStagingTargetPath() == "":
		return nil, status.Error(codes.FailedPrecondition, "staging_target_path is empty; stage the volume first")
	}
	if err := os.MkdirAll(req.GetTargetPath(), 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "create target %s: %v", req.GetTargetPath(), err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (stubNode) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume_id is empty")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target_path is empty")
	}
	if err := os.Remove(req.GetTargetPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "remove target %s: %v", req.GetTargetPath(), err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
