package controller

import (
	"context"

	"github.com/vigil-storage/vigil/fencing"
)

// Fencer is a fencing back end as the controllers use it: it fences a node out of
// chosen volumes at the storage layer, says which volumes a node can still write, and reports which
// nodes' agents are still talking to the storage. The datapath implements it
// (datapath/fencer); every implementation must pass fencing/fencingtest.
//
// Proof that a node is fenced on a volume comes only from Grants: the node's row
// for that volume is not live (fenced or released) or absent. A back end that
// cannot answer returns an error wrapping fencing.ErrUnavailable, and nothing is
// proven.
type Fencer interface {
	// Driver is the CSI driver whose volumes this back end fences
	// (driver.vigil.io for the datapath). Volumes of other drivers are never
	// proven fenced by it.
	Driver() string
	// FenceVolumes revokes node on each of the named volumes where it holds a
	// live grant, each with a new epoch, and returns them. It returns only once
	// every fence is durable; volumes not named keep their grant, and a named
	// one where node holds no live grant is left alone, so calling it again is
	// safe.
	FenceVolumes(ctx context.Context, node string, handles []string) ([]fencing.Fenced, error)
	// Grants lists node's row on every volume the back end has one for.
	Grants(ctx context.Context, node string) ([]fencing.Grant, error)
	// Connectivity reports when each node's agent last spoke to the storage.
	Connectivity(ctx context.Context) (fencing.Report, error)
}
