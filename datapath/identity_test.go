package datapath

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// TestAuthorize_Table is the specification of who may do what: the
// controller everything but a node's own acts; an engine the volumes' and
// the group's reads, and I/O, heartbeats, Leave, Release and NodeGrants as its own node only.
func TestAuthorize_Table(t *testing.T) {
	ctl := Identity{Role: RoleController, Name: "ctl"}
	a := Identity{Role: RoleEngine, Node: "node-a", Name: "a"}
	const own, other, none = "node-a", "node-b", ""
	rows := []struct {
		method              string
		controller          bool
		engineOwn, engineOf bool // as node-a, as node-b
	}{
		{wire.MethodCreateVolume, true, false, false},
		{wire.MethodDeleteVolume, true, false, false},
		{wire.MethodListVolumes, true, false, false},
		{wire.MethodCapacity, true, false, false},
		{wire.MethodGrant, true, false, false},
		{wire.MethodFence, true, false, false},
		{wire.MethodFenceNode, true, false, false},
		{wire.MethodConnectivity, true, false, false},
		{wire.MethodNodes, true, false, false},
		{wire.MethodFailedVolumes, true, false, false},
		{wire.MethodServers, true, true, true},
		{wire.MethodGroupVolumes, true, true, true},
		{wire.MethodClearFailure, true, false, false},
		{wire.MethodWaitApplied, true, true, true},
		{wire.MethodPrepareVolume, true, false, false},
		{wire.MethodAddServer, true, false, false},
		{wire.MethodForceReplicas, true, false, false},
		{wire.MethodPrepareReplica, true, false, false},
		{wire.MethodGetVolume, true, true, true},
		{wire.MethodAttachments, true, true, true},
		{wire.MethodRelease, true, true, false},
		{wire.MethodNodeGrants, true, true, false},
		{wire.MethodMarkOutOfSync, true, true, false},
		{wire.MethodDirtyRegions, true, true, false},
		{wire.MethodRead, false, true, false},
		{wire.MethodWrite, false, true, false},
		{wire.MethodOpenWriteSession, false, true, false},
		{wire.MethodFlush, false, true, false},
		{wire.MethodHeartbeat, false, true, false},
		{wire.MethodLeave, false, true, false},
	}
	if len(rows) != len(serviceDesc.Methods) {
		t.Fatalf("the table has %d rows for %d methods", len(rows), len(serviceDesc.Methods))
	}
	check := func(id Identity, method, node string, want bool) {
		t.Helper()
		err := Authorize(id, method, node)
		if want && err != nil {
			t.Errorf("%s calling %s for %q: %v; want allowed", id, method, node, err)
		}
		if !want && !errors.Is(err, ErrPermissionDenied) {
			t.Errorf("%s calling %s for %q: %v; want ErrPermissionDenied", id, method, node, err)
		}
	}
	for _, r := range rows {
		check(ctl, r.method, other, r.controller)
		check(a, r.method, own, r.engineOwn)
		check(a, r.method, other, r.engineOf)
	}
	// Requests without a node are the volume-wide calls.
	check(a, wire.MethodGetVolume, none, true)
	check(a, wire.MethodNodes, none, false)
	check(a, wire.MethodWrite, none, false)
	check(Identity{}, wire.MethodGetVolume, none, false)
	check(ctl, "Format", none, false)
}

func TestAuthorize_RefusalNamesIdentityMethodAndBothNodes(t *testing.T) {
	a := Identity{Role: RoleEngine, Node: "node-a", Name: "node token, line 3 of tokens"}
	err := Authorize(a, wire.MethodWrite, "node-b")
	for _, want := range []string{"node-a", `"node-b"`, "Write", "line 3 of tokens", "own node"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	err = Authorize(a, wire.MethodFence, "node-b")
	for _, want := range []string{"node-a", `"node-b"`, "Fence", "only the controller"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	err = Authorize(Identity{Role: RoleController, Name: "ctl"}, wire.MethodHeartbeat, "node-b")
	for _, want := range []string{"controller", `"node-b"`, "Heartbeat", "only that node's engine"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
}

func TestMethodAccess_EveryMethodHasARow(t *testing.T) {
	names := map[string]bool{}
	for _, m := range serviceDesc.Methods {
		names[m.MethodName] = true
		if _, ok := methodAccess[m.MethodName]; !ok {
			t.Errorf("method %s has no row in methodAccess: it would be refused to everyone", m.MethodName)
		}
	}
	for m := range methodAccess {
		if !names[m] {
			t.Errorf("methodAccess has a row for %s, which the service does not serve", m)
		}
	}
}

// TestRequestNode_EveryRequestWithANode: the node a request names is found for
// every request type that carries one, or Authorize would see "" and an
// engine's own-node check would not apply.
func TestRequestNode_EveryRequestWithANode(t *testing.T) {
	io := wire.IOTarget{VolumeID: "vol-0123456789abcdef", Node: "n", Epoch: 1}
	for _, req := range []any{&wire.AttachRequest{Node: "n"}, &wire.NodeRef{Node: "n"}, &wire.LeaveRequest{Node: "n"},
		&wire.ReadRequest{IOTarget: io}, &wire.WriteRequest{IOTarget: io}, &wire.FlushRequest{IOTarget: io},
		&wire.ConnectivityRequest{Node: "n"}} {
		if got := requestNode(req); got != "n" {
			t.Errorf("requestNode(%T) = %q", req, got)
		}
	}
	if got := requestNode(&wire.VolumeRef{ID: "x"}); got != "" {
		t.Errorf("requestNode(VolumeRef) = %q; want none", got)
	}
}

type authFunc func(context.Context, string) (Identity, error)

func (f authFunc) Authenticate(ctx context.Context, tok string) (Identity, error) { return f(ctx, tok) }

func TestAuthenticators_FirstYesWinsAndTheMostTellingRefusal(t *testing.T) {
	no := authFunc(func(context.Context, string) (Identity, error) { return Identity{}, ErrUnauthenticated })
	denied := authFunc(func(context.Context, string) (Identity, error) { return Identity{}, ErrPermissionDenied })
	down := authFunc(func(context.Context, string) (Identity, error) { return Identity{}, ErrAuthUnavailable })
	odd := authFunc(func(context.Context, string) (Identity, error) { return Identity{}, errors.New("odd") })
	yes := authFunc(func(context.Context, string) (Identity, error) { return Identity{Role: RoleController, Name: "y"}, nil })
	ctx := context.Background()
	if id, err := (Authenticators{no, down, yes}).Authenticate(ctx, "t"); err != nil || id.Name != "y" {
		t.Fatalf("a later yes: %+v, %v", id, err)
	}
	for _, tc := range []struct {
		chain Authenticators
		want  error
	}{
		{Authenticators{no, denied}, ErrPermissionDenied},
		{Authenticators{denied, down, no}, ErrAuthUnavailable},
		{Authenticators{no}, ErrUnauthenticated},
		{Authenticators{}, ErrUnauthenticated},
	} {
		if _, err := tc.chain.Authenticate(ctx, "t"); !errors.Is(err, tc.want) {
			t.Errorf("%d authenticators: %v; want %v", len(tc.chain), err, tc.want)
		}
	}
	if _, err := (Authenticators{no, odd}).Authenticate(ctx, "t"); authError(err) == nil || !errors.Is(authError(err), ErrAuthUnavailable) {
		t.Errorf("an unexpected error: %v; want it refused as ErrAuthUnavailable", authError(err))
	}
}

func TestNewServer_NoAuthenticatorRefused(t *testing.T) {
	if _, err := NewServer(nil, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NewServer without an authenticator: %v", err)
	}
}
