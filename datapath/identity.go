package datapath

import (
	"context"
	"errors"
	"fmt"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// Role is what a caller may do at the datapath.
type Role uint8

const (
	// RoleController is the manager and the CSI controller: volumes, grants,
	// fences, releases and every report. It never does I/O, heartbeats or
	// Leave: those are a node's own acts.
	RoleController Role = iota + 1
	// RoleEngine is one node's engine: I/O, heartbeats and Leave as its own
	// node only, releasing its own grants, and reading one volume at a time.
	RoleEngine
)

func (r Role) String() string {
	switch r {
	case RoleController:
		return "controller"
	case RoleEngine:
		return "engine"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// Identity is who a caller proved to be.
type Identity struct {
	Role Role
	// Node is the one node an engine may act as; empty for the controller.
	Node string
	// Name names the credential in messages and logs, never the token
	// itself: "controller token (line 2 of /etc/vigil/tokens)",
	// "system:serviceaccount:vigil-system:vigil-engine-node".
	Name string
}

func (id Identity) String() string {
	if id.Role == RoleEngine {
		return fmt.Sprintf("the engine of node %s (%s)", id.Node, id.Name)
	}
	return fmt.Sprintf("the %s (%s)", id.Role, id.Name)
}

// Authenticator turns the bearer token a caller presents into its identity.
// A token it does not accept gives an error wrapping ErrUnauthenticated; a
// valid token that names no Vigil identity, ErrPermissionDenied; a token that
// cannot be checked now, ErrAuthUnavailable. Every error refuses the call.
// StaticTokens and datapath/tokenreview implement it; Authenticators chains
// several.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// Authenticators tries each authenticator in order and takes the first
// identity one of them gives: a tokens file for the sandbox beside
// TokenReview for ServiceAccount tokens, for example. A token every one of
// them refuses is refused with the most telling of their errors (can't check
// now over not allowed over unknown).
type Authenticators []Authenticator

// Authenticate implements Authenticator.
func (as Authenticators) Authenticate(ctx context.Context, token string) (Identity, error) {
	var worst error
	rank := func(err error) int {
		switch {
		case errors.Is(err, ErrAuthUnavailable):
			return 3
		case errors.Is(err, ErrPermissionDenied):
			return 2
		case errors.Is(err, ErrUnauthenticated):
			return 1
		}
		return 3 // an unexpected error: the token was not checked
	}
	for _, a := range as {
		id, err := a.Authenticate(ctx, token)
		if err == nil {
			return id, nil
		}
		if worst == nil || rank(err) > rank(worst) {
			worst = err
		}
	}
	if worst == nil {
		worst = fmt.Errorf("%w: the datapath accepts no credentials (no authenticator configured)", ErrUnauthenticated)
	}
	return Identity{}, worst
}

// access says who may call a method.
type access uint8

const (
	// controllerOnly: volumes, grants, fences, reports and clearing a
	// volume's failure.
	controllerOnly access = iota + 1
	// anyRole: reads of one volume (GetVolume, Attachments), which an engine's
	// stage path and gate need.
	anyRole
	// controllerOrOwnNode: the controller for any node, an engine for its own
	// node only (Release: an engine gives up its own grant after a cleanup;
	// NodeGrants: an engine reads its own grants).
	controllerOrOwnNode
	// ownNodeOnly: I/O, heartbeats and Leave, by the engine of that node only.
	ownNodeOnly
)

// methodAccess is the authorization table: every method of the service has a
// row (TestMethodAccess_EveryMethodHasARow), and a method without one is
// refused.
var methodAccess = map[string]access{
	wire.MethodCreateVolume:  controllerOnly,
	wire.MethodDeleteVolume:  controllerOnly,
	wire.MethodListVolumes:   controllerOnly,
	wire.MethodCapacity:      controllerOnly,
	wire.MethodGrant:         controllerOnly,
	wire.MethodFence:         controllerOnly,
	wire.MethodFenceNode:     controllerOnly,
	wire.MethodConnectivity:  controllerOnly,
	wire.MethodNodes:         controllerOnly,
	wire.MethodFailedVolumes: controllerOnly,
	// An engine reads the replica sets of the volumes it writes and the
	// addresses of their servers, to send each write to every replica
	// (client/replicas.go); it may read any one volume already (GetVolume,
	// Attachments), and is given the servers' addresses.
	wire.MethodServers:        anyRole,
	wire.MethodGroupVolumes:   anyRole,
	wire.MethodClearFailure:   controllerOnly,
	wire.MethodWaitApplied:    anyRole, // an engine's own Release is confirmed too
	wire.MethodPrepareVolume:  controllerOnly,
	wire.MethodPrepareReplica: controllerOnly,
	wire.MethodAddServer:      controllerOnly,
	wire.MethodForceReplicas:  controllerOnly,
	wire.MethodGetVolume:      anyRole,
	wire.MethodAttachments:    anyRole,
	wire.MethodRelease:        controllerOrOwnNode,
	wire.MethodNodeGrants:     controllerOrOwnNode,
	// The writer's engine takes a replica that missed its write out of
	// sync; the group checks that its grant is live at its epoch.
	wire.MethodMarkOutOfSync: controllerOrOwnNode,
	// The copy of a delta resync is driven by the manager or by the
	// writer's engine, which reads the map as its own node (with a live
	// grant, which the store checks).
	wire.MethodDirtyRegions:     controllerOrOwnNode,
	wire.MethodRead:             ownNodeOnly,
	wire.MethodWrite:            ownNodeOnly,
	wire.MethodOpenWriteSession: ownNodeOnly,
	wire.MethodFlush:            ownNodeOnly,
	wire.MethodHeartbeat:        ownNodeOnly,
	wire.MethodLeave:            ownNodeOnly,
}

// Authorize says whether id may call method with node named in the request
// ("" when the request names none). It is the whole authorization decision,
// for the gRPC service and the bulk channel alike; the error wraps
// ErrPermissionDenied and names the identity, the method and both nodes.
func Authorize(id Identity, method, node string) error {
	acc, ok := methodAccess[method]
	if !ok {
		return fmt.Errorf("%w: %s: no such datapath method", ErrPermissionDenied, method)
	}
	switch id.Role {
	case RoleController:
		if acc == ownNodeOnly {
			return fmt.Errorf("%w: %s may not call %s for node %q: only that node's engine reads, writes, flushes, heartbeats and leaves as it",
				ErrPermissionDenied, id, method, node)
		}
		return nil
	case RoleEngine:
		switch acc {
		case anyRole:
			return nil
		case controllerOrOwnNode, ownNodeOnly:
			if node != id.Node {
				return fmt.Errorf("%w: %s may not call %s as node %q: an engine acts only as its own node (%s)",
					ErrPermissionDenied, id, method, node, id.Node)
			}
			return nil
		}
		target := ""
		if node != "" {
			target = fmt.Sprintf(" for node %q", node)
		}
		return fmt.Errorf("%w: %s may not call %s%s: only the controller identity (the manager, the CSI controller) may",
			ErrPermissionDenied, id, method, target)
	}
	return fmt.Errorf("%w: %s has no role", ErrPermissionDenied, id)
}

// requestNode is the node a decoded request names ("" for none).
func requestNode(req any) string {
	switch r := req.(type) {
	case *wire.AttachRequest:
		return r.Node
	case *wire.NodeRef:
		return r.Node
	case *wire.LeaveRequest:
		return r.Node
	case *wire.ReadRequest:
		return r.Node
	case *wire.WriteRequest:
		return r.Node
	case *wire.FlushRequest:
		return r.Node
	case *wire.OpenSessionRequest:
		return r.Node
	case *wire.ConnectivityRequest:
		return r.Node
	case *wire.MarkOutOfSyncRequest:
		return r.Node
	case *wire.DirtyRegionsRequest:
		return r.Node
	}
	return ""
}
