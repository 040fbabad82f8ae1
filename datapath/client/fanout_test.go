package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/fencebackend"
)

// TestClient_Group_HeartbeatsReachEveryServerAndOneDownIsolatesNobody: an
// engine given the group's three servers heartbeats to each; with one server
// stopped (the one both clients dial first) its heartbeats still land on
// the other two, the manager's client gets the Nodes reports of the two
// that answer, and the fence back end's merged report has the node heard
// just now, not silent.
func TestClient_Group_HeartbeatsReachEveryServerAndOneDownIsolatesNobody(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng, err := client.Dial(ctx, srvs[0].Addr, srvs[0].NodeToken("n1"), client.WithServers(srvs[1].Addr, srvs[2].Addr),
		client.WithTimeout(time.Second), client.WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := eng.Heartbeat(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	for i, s := range srvs {
		r, err := s.Store.Nodes()
		if err != nil || len(r.Nodes) != 1 || r.Nodes[0].LastHeartbeat.IsZero() {
			t.Fatalf("server %d after one heartbeat: %+v, %v; want n1 heard", i, r, err)
		}
	}

	srvs[0].Stop()
	if err := eng.Heartbeat(ctx, "n1"); err != nil {
		t.Fatalf("heartbeat with one server of three down: %v", err)
	}
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(srvs[1].Addr, srvs[2].Addr),
		client.WithTimeout(time.Second), client.WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	reps, err := ctl.ServerNodes(ctx)
	if err != nil || len(reps) != 2 {
		t.Fatalf("ServerNodes with one server down: %d reports, %v; want the two that answer", len(reps), err)
	}
	rep, err := fencebackend.New(ctl).Connectivity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := rep.Silence("n1"); !ok || d > 5*time.Second {
		t.Fatalf("n1 in the merged report: silent %s (judged %v); want heard within the last seconds", d, ok)
	}
}
