package csi

import (
	"context"

	"github.com/vigil-storage/vigil/datapath"
)

// Volumes is what the CSI controller needs from the datapath volume server. The
// datapath client (datapath/client.Client) satisfies it; tests use an in-memory
// double. Errors are the datapath sentinels (datapath.ErrNotFound, ...), possibly
// wrapped; statusFromError turns them into gRPC codes.
type Volumes interface {
	// CreateVolume creates a volume, or returns the existing one of that name
	// when size and mode match; a different size or mode is ErrAlreadyExists.
	CreateVolume(ctx context.Context, name string, size int64, mode datapath.AccessMode) (datapath.Volume, error)
	// CreateReplicated creates a volume of r replicas, each on a server of
	// its own, or returns the existing one of that name when size, mode and
	// replica count match; a difference is ErrAlreadyExists.
	CreateReplicated(ctx context.Context, name string, size int64, mode datapath.AccessMode, r int) (datapath.Volume, error)
	// AnyServers reports the datapath's control group's servers (none for
	// a server without a group), from any server of the list that answers.
	AnyServers(ctx context.Context) (datapath.ServersReport, error)
	// DeleteVolume deletes a volume; an unknown id is success or ErrNotFound
	// (both mean "gone"); a volume with a live grant is ErrInUse.
	DeleteVolume(ctx context.Context, id string) error
	// GetVolume returns one volume; an unknown id is ErrNotFound.
	GetVolume(ctx context.Context, id string) (datapath.Volume, error)
	// ListVolumes returns every volume.
	ListVolumes(ctx context.Context) ([]datapath.Volume, error)
	// Capacity returns the bytes still available for new volumes.
	Capacity(ctx context.Context) (int64, error)
	// GrantAs gives node the right to do I/O of the given use on the volume
	// and returns its epoch; a conflicting grant is ErrAttachedElsewhere.
	GrantAs(ctx context.Context, volumeID, node string, use datapath.GrantUse) (uint64, error)
	// Fence revokes node and bumps the volume's epoch.
	Fence(ctx context.Context, volumeID, node string) (uint64, error)
	// Release ends node's grant on the volume.
	Release(ctx context.Context, volumeID, node string) error
	// Attachments returns the volume's attachment table, one row per node.
	Attachments(ctx context.Context, volumeID string) ([]datapath.Attachment, error)
}

// Nodes tells whether a node ID names a node that can attach volumes. The manager
// backs it with its Kubernetes node lister; when no Nodes is configured every node
// ID is accepted. CSI requires ControllerPublishVolume to answer NotFound for a
// node that does not exist, which only a Nodes implementation can tell.
type Nodes interface {
	NodeExists(ctx context.Context, nodeID string) (bool, error)
}

// NodesFunc adapts a function to the Nodes interface.
type NodesFunc func(ctx context.Context, nodeID string) (bool, error)

// NodeExists calls f.
func (f NodesFunc) NodeExists(ctx context.Context, nodeID string) (bool, error) {
	return f(ctx, nodeID)
}
