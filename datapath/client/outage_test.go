package client_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

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
