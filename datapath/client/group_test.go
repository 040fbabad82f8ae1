package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestClient_Group_FollowerRefusesWithTheLeaderAndTheClientFindsIt: three
// servers in one control group over loopback TCP. A change sent to a
// follower is refused with ErrNotLeader (gRPC Unavailable, reason
// NOT_LEADER) naming the leader's datapath address; a client given the
// servers sends it to the leader by itself, also after the leader is
// stopped and another elected, within its bounded retries. A fence, a
// FenceNode and a delete of the stopped server's volume are committed by
// the new leader but not reported done (ErrNotApplied): that server could
// not apply them.
func TestClient_Group_FollowerRefusesWithTheLeaderAndTheClientFindsIt(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lone, err := client.Dial(ctx, srvs[1].Addr, srvs[1].Token, client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Close()
	_, err = lone.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	var re *datapath.RemoteError
	if !errors.Is(err, datapath.ErrNotLeader) || !errors.As(err, &re) || re.LeaderAddress != srvs[0].Addr {
		t.Fatalf("create at a follower: %v (%+v); want ErrNotLeader naming the leader at %s", err, re, srvs[0].Addr)
	}

	c, err := client.Dial(ctx, srvs[1].Addr, srvs[1].Token, client.WithServers(srvs[2].Addr, srvs[0].Addr), client.WithTimeout(2*time.Second),
		client.WithApplyWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	placed, err := c.CreateVolume(ctx, "pvc-placed", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatalf("create through a client that knows the servers: %v", err)
	}
	if _, err := srvs[1].Store.GetVolume(placed.ID); err != nil {
		t.Fatalf("the volume's data is not on the server dialed, first of those with the most free space: %v", err)
	}
	// A client given no servers creates at the leader, which holds the data.
	atLeader, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token)
	if err != nil {
		t.Fatal(err)
	}
	defer atLeader.Close()
	v, err := atLeader.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srvs[0].Store.GetVolume(v.ID); err != nil {
		t.Fatalf("the volume's data is not on the leader that created it: %v", err)
	}
	if e, err := c.Grant(ctx, v.ID, "n1"); err != nil || e != 1 {
		t.Fatalf("grant through the client: %d, %v", e, err)
	}
	if e, err := c.Fence(ctx, v.ID, "n1"); err != nil || e != 2 {
		t.Fatalf("fence through the client: %d, %v", e, err)
	}

	if _, err := c.Grant(ctx, v.ID, "n9"); err != nil {
		t.Fatal(err)
	}
	srvs[0].Stop()
	start := time.Now()
	w, err := c.CreateVolume(ctx, "pvc-b", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatalf("create after the leader stopped: %v", err)
	}
	if e, err := c.Grant(ctx, w.ID, "n2"); err != nil || e != 1 {
		t.Fatalf("grant after the leader stopped: %d, %v", e, err)
	}
	t.Logf("the first change after the leader stopped took %s", time.Since(start))
	_, err = c.Fence(ctx, v.ID, "n2")
	if !errors.Is(err, datapath.ErrNotApplied) {
		t.Fatalf("fence of a volume whose data server is gone: %v; want ErrNotApplied (its data server must apply the fence)", err)
	}
	if _, err := c.Grant(ctx, w.ID, "n1"); err == nil {
		t.Fatal("grant of the RWO volume to a second node succeeded")
	}
	// The dead server holds n9's live grant: a new leader that fenced n9 and
	// returned would claim a fence that server never applied.
	if fs, err := c.FenceNode(ctx, "n9"); !errors.Is(err, datapath.ErrNotApplied) || len(fs) != 0 {
		t.Fatalf("FenceNode of n9, whose live grant is on the stopped server's volume: %v, %v; want ErrNotApplied and nothing reported fenced", fs, err)
	}
	if _, err := c.FenceNode(ctx, "n2"); err != nil {
		t.Fatalf("FenceNode of n2, whose live grants are all on the leader's volumes: %v", err)
	}
	if err := c.DeleteVolume(ctx, v.ID); !errors.Is(err, datapath.ErrNotApplied) {
		t.Fatalf("delete of a volume whose data server is gone: %v; want ErrNotApplied, not success", err)
	}
}
