package controller

import (
	"context"

	"github.com/vigil-storage/vigil/fenceapi"
)

// FenceBackend is a fence back end as the controller uses it: a storage that
// fences a node out of chosen volumes, lists a node's grants, and reports
// which nodes' agents still talk to it. The datapath is one
// (datapath/fencebackend); every implementation must pass
// fenceapi/fenceapitest's conformance suite.
//
// Proof that a node is fenced on a volume comes only from Grants
// (grant_proof.go): the node's row for that volume is not live (fenced or
// released) or absent. A back end that cannot answer returns an error wrapping
// fenceapi.ErrUnavailable, and nothing is proven.
type FenceBackend interface {
	// Driver is the CSI driver whose volumes this back end fences
	// (driver.vigil.io for the datapath). Volumes of other drivers are never
	// proven fenced by it.
	Driver() string
	// FenceVolumes revokes node on each of the named volumes where it holds a
	// live grant, each with a new epoch, and returns them. It returns only once
	// every fence is durable; volumes not named keep their grant, and a named
	// one where node holds no live grant is left alone, so calling it again is
	// safe.
	FenceVolumes(ctx context.Context, node string, handles []string) ([]fenceapi.Fenced, error)
	// Grants lists node's row on every volume the back end has one for.
	Grants(ctx context.Context, node string) ([]fenceapi.Grant, error)
	// Connectivity reports when each node's agent last spoke to the storage.
	Connectivity(ctx context.Context) (fenceapi.Report, error)
}
