package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// outageAuth accepts two tokens while the API server answers; during an
// outage it cannot check any; a revoked token is refused.
type outageAuth struct {
	outage, revoked atomic.Bool
}

func (a *outageAuth) Authenticate(_ context.Context, tok string) (datapath.Identity, error) {
	if a.outage.Load() {
		return datapath.Identity{}, datapath.ErrAuthUnavailable
	}
	switch {
	case tok == "ctl-token":
		return datapath.Identity{Role: datapath.RoleController, Name: "manager"}, nil
	case tok == "node-a-token" && !a.revoked.Load():
		return datapath.Identity{Role: datapath.RoleEngine, Node: "node-a", Name: "engine"}, nil
	}
	return datapath.Identity{}, datapath.ErrUnauthenticated
}

// TestClient_APIServerOutage_ConnectionKeepsItsIdentity: when the API server
// cannot check tokens, an engine's connection that proved its token keeps its
// identity: heartbeats and I/O go on. A new connection cannot prove itself
// until the API server is back, and a revoked token ends the identity.
func TestClient_APIServerOutage_ConnectionKeepsItsIdentity(t *testing.T) {
	auth := &outageAuth{}
	srv := datapathtest.StartWith(t, datapathtest.Config{Auth: auth})
	ctx := context.Background()
	ctl, err := client.Dial(ctx, srv.Addr, "ctl-token", client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	v, err := ctl.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := ctl.Grant(ctx, v.ID, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	a, err := client.Dial(ctx, srv.Addr, "node-a-token", client.WithRetries(0), client.WithBulk(false))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Heartbeat(ctx, "node-a"); err != nil {
		t.Fatalf("heartbeat before the outage: %v", err)
	}

	auth.outage.Store(true)
	for i := 0; i < 3; i++ {
		if err := a.Heartbeat(ctx, "node-a"); err != nil {
			t.Fatalf("heartbeat %d during the outage: %v; want the connection's proved identity kept", i, err)
		}
		if err := a.WriteAt(ctx, v.ID, "node-a", epoch, 0, []byte("during")); err != nil {
			t.Fatalf("write %d during the outage: %v", i, err)
		}
	}
	b, err := client.Dial(ctx, srv.Addr, "node-a-token", client.WithRetries(0), client.WithBulk(false))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Heartbeat(ctx, "node-a"); !errors.Is(err, datapath.ErrAuthUnavailable) {
		t.Fatalf("a new connection during the outage: %v; want ErrAuthUnavailable (nothing proved on it)", err)
	}

	auth.outage.Store(false)
	auth.revoked.Store(true)
	if err := a.Heartbeat(ctx, "node-a"); !errors.Is(err, datapath.ErrUnauthenticated) {
		t.Fatalf("heartbeat with a revoked token: %v; want ErrUnauthenticated", err)
	}
	auth.outage.Store(true) // the revocation ended the binding: an outage now does not bring it back
	if err := a.Heartbeat(ctx, "node-a"); !errors.Is(err, datapath.ErrAuthUnavailable) {
		t.Fatalf("heartbeat after the revocation, during an outage: %v; want ErrAuthUnavailable", err)
	}
}

// startingAuth accepts two tokens while the API server answers; while it
// starts again (hang) a check waits until released, as a TokenReview does
// against an API server that accepts connections before it answers; then it
// refuses node-a's token when revoked.
type startingAuth struct {
	outageAuth
	hang    atomic.Bool
	release chan struct{}
}

func (a *startingAuth) Authenticate(ctx context.Context, tok string) (datapath.Identity, error) {
	if a.hang.Load() {
		<-a.release
	}
	return a.outageAuth.Authenticate(ctx, tok)
}

// TestClient_APIServerStarting_HeartbeatsAndNodesDoNotWaitOnTokenReview: while
// token checks hang (an API server starting again), an engine's heartbeats
// and writes and the controller's node report on connections that proved
// their tokens answer within the engine's heartbeat timeout (1 s), and the
// report shows the heartbeats: a heartbeat that waited on the check stalled
// every node's heartbeats past the manager's connectivity-loss threshold. A
// new connection has nothing proved and waits; the check's refusal, when it
// comes, ends the old connection's identity.
func TestClient_APIServerStarting_HeartbeatsAndNodesDoNotWaitOnTokenReview(t *testing.T) {
	auth := &startingAuth{release: make(chan struct{})}
	srv := datapathtest.StartWith(t, datapathtest.Config{Auth: auth})
	ctx := context.Background()
	dial := func(tok string) *client.Client {
		c, err := client.Dial(ctx, srv.Addr, tok, client.WithRetries(0), client.WithBulk(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctl, a := dial("ctl-token"), dial("node-a-token")
	v, err := ctl.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := ctl.Grant(ctx, v.ID, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Heartbeat(ctx, "node-a"); err != nil {
		t.Fatalf("heartbeat before: %v", err)
	}

	auth.hang.Store(true)
	released := false
	defer func() {
		if !released {
			close(auth.release)
		}
	}()
	within := func(what string, f func(context.Context) error) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		start := time.Now()
		if err := f(cctx); err != nil {
			t.Fatalf("%s while token checks hang: %v after %s; want an answer within 1s (the engine's heartbeat timeout)", what, err, time.Since(start).Round(time.Millisecond))
		}
	}
	for i := 0; i < 3; i++ {
		within("heartbeat", func(c context.Context) error { return a.Heartbeat(c, "node-a") })
		within("write", func(c context.Context) error { return a.WriteAt(c, v.ID, "node-a", epoch, 0, []byte("starting")) })
		within("node report", func(c context.Context) error {
			r, err := ctl.Nodes(c)
			if err != nil {
				return err
			}
			for _, n := range r.Nodes {
				if n.Node == "node-a" && r.Now.Sub(n.LastHeartbeat) < time.Second {
					return nil
				}
			}
			return fmt.Errorf("report %+v: no heartbeat of node-a within 1s", r.Nodes)
		})
	}
	b := dial("node-a-token")
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := b.Heartbeat(wctx, "node-a"); err == nil {
		t.Fatal("a new connection's heartbeat was accepted while its token's check hangs; want it to wait (nothing proved on it)")
	}

	auth.revoked.Store(true)
	close(auth.release)
	released = true
	deadline := time.Now().Add(5 * time.Second)
	for err := a.Heartbeat(ctx, "node-a"); !errors.Is(err, datapath.ErrUnauthenticated); err = a.Heartbeat(ctx, "node-a") {
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat after the check refused the token: %v; want ErrUnauthenticated", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
