package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
)

// dialStack connects to the stack's datapath over TLS with the token in
// tokenFile (read again when it changes): to every server, when the
// datapath runs as servers on nodes.
func dialStack(t *testing.T, ctx context.Context, stk *sandbox.Stack, tokenFile string) *dpclient.Client {
	t.Helper()
	addrs := stk.DatapathAddrs()
	opts := []dpclient.Option{dpclient.WithTokenFile(tokenFile), dpclient.WithCAFile(stk.CAFile)}
	if len(addrs) > 1 {
		opts = append(opts, dpclient.WithServers(addrs[1:]...))
	}
	dp, err := dpclient.Dial(ctx, addrs[0], "", opts...)
	must(t, err)
	return dp
}

// checkStackIdentities: on a running stack, node A's engine credentials (by
// default a ServiceAccount token bound to node A, checked by TokenReview)
// heartbeat as node A but cannot heartbeat, write or fence as node B, nor
// grant; a client without the CA gets nothing. ctl is the manager's client.
func checkStackIdentities(t *testing.T, ctx context.Context, s *sandbox.Sandbox, stk *sandbox.Stack, ctl *dpclient.Client) {
	t.Helper()
	nodeA, nodeB := sandbox.NodeName(0), sandbox.NodeName(1)
	v, err := ctl.CreateVolume(ctx, "identity-check", 1<<20, datapath.AccessRWO)
	must(t, err)
	defer func() { must(t, ctl.DeleteVolume(ctx, v.ID)) }()
	a := dialStack(t, ctx, stk, sandbox.NodeTokenFile(nodeDir(s, nodeA)))
	defer a.Close()
	if err := a.Heartbeat(ctx, nodeA); err != nil {
		t.Fatalf("%s's engine credentials heartbeat as %s: %v", nodeA, nodeA, err)
	}
	for what, err := range map[string]error{
		"heartbeat as " + nodeB: a.Heartbeat(ctx, nodeB),
		"write as " + nodeB:     a.WriteAt(ctx, v.ID, nodeB, 1, 0, []byte("x")),
		"fence " + nodeB:        second(a.Fence(ctx, v.ID, nodeB)),
		"grant itself":          second(a.Grant(ctx, v.ID, nodeA)),
	} {
		if !errors.Is(err, datapath.ErrPermissionDenied) {
			t.Errorf("%s's engine credentials %s: %v; want ErrPermissionDenied", nodeA, what, err)
		}
	}
	tok, err := datapath.ReadTokenFile(stk.TokenFile)
	must(t, err)
	// Plaintext on purpose (WithInsecure: a server on a node listens on the
	// node's address, which a client refuses to reach in plaintext unless told).
	plain, err := dpclient.Dial(ctx, stk.DatapathAddrs()[0], tok, dpclient.WithInsecure(), dpclient.WithRetries(0), dpclient.WithTimeout(3*time.Second))
	must(t, err)
	defer plain.Close()
	if _, err := plain.ListVolumes(ctx); err == nil {
		t.Error("a plaintext client got an answer from the stack's TLS datapath")
	}
}

func second[T any](_ T, err error) error { return err }
