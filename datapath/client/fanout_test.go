package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/fencebackend"
	"github.com/vigil-storage/vigil/fenceapi"
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

// TestClient_Group_NodeGrantsComeFromEveryHolder: each server reports the
// rows of the volumes it holds, so a client dialed to a server that holds
// none of a node's volumes still lists the node's live grant (a missing row
// would be taken as proof that the node cannot write), and once a server
// that may hold some of them stops, NodeGrants fails naming it. The fence
// back end then takes the rows of the servers that answer and lists the
// stopped server's volumes as unknown (live: nothing proven), so the node's
// volumes on the others can still be fenced and proven.
// FailedVolumes likewise lists every server's failures or fails.
func TestClient_Group_NodeGrantsComeFromEveryHolder(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl := controllerClient(t, []*datapathtest.Server{srvs[1], srvs[0], srvs[2]}, client.WithTimeout(time.Second), client.WithRetries(1))
	atLeader, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token) // given no servers: the create of before, at the leader
	if err != nil {
		t.Fatal(err)
	}
	defer atLeader.Close()
	v, err := atLeader.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO) // on the leader, srvs[0]
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Grant(ctx, v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	rows, err := ctl.NodeGrants(ctx, "n1")
	if err != nil || len(rows) != 1 || rows[0].VolumeID != v.ID || !rows[0].Live() {
		t.Fatalf("grants of n1 through a server that does not hold its volume: %+v, %v; want its live grant on %s", rows, err, v.ID)
	}
	if fs, err := ctl.FailedVolumes(ctx); err != nil || len(fs) != 0 {
		t.Fatalf("failed volumes of the group: %+v, %v; want none", fs, err)
	}
	srvs[0].Stop()
	if fs, err := ctl.FailedVolumes(ctx); err == nil || !strings.Contains(err.Error(), srvs[0].Addr) {
		t.Fatalf("failed volumes with a server down: %+v, %v; want an error naming %s (its failures are not known)", fs, err, srvs[0].Addr)
	}
	rows, err = ctl.NodeGrants(ctx, "n1")
	if err == nil || !strings.Contains(err.Error(), srvs[0].Addr) {
		t.Fatalf("grants of n1 with the holder of its volume stopped: %+v, %v; want an error naming %s", rows, err, srvs[0].Addr)
	}

	// The fence back end uses what the servers that answer know: the
	// stopped server's volume is unknown (live: not proven), and once a new
	// leader holds another volume of n1, that one is fenced and proven.
	be := fencebackend.New(ctl)
	var gg datapath.GroupGrants
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if gg, err = ctl.GroupNodeGrants(ctx, "n1"); err == nil || time.Now().After(deadline) {
			break // an error until a new leader is elected among the others
		}
	}
	if err != nil || len(gg.Rows) != 0 || len(gg.Unknown) != 1 || gg.Unknown[0] != v.ID || len(gg.Silent) != 1 || gg.Silent[0] != srvs[0].Addr {
		t.Fatalf("group grants of n1 with the holder of its volume stopped: %+v, %v; want %s unknown, %s silent", gg, err, v.ID, srvs[0].Addr)
	}
	w, err := ctl.CreateVolume(ctx, "pvc-b", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Grant(ctx, w.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	fenced, err := be.FenceVolumes(ctx, "n1", []string{v.ID, w.ID})
	if len(fenced) != 1 || fenced[0].Handle != w.ID || !errors.Is(err, fenceapi.ErrUnavailable) || !strings.Contains(err.Error(), v.ID) {
		t.Fatalf("FenceVolumes of n1 with one holder stopped: %+v, %v; want %s fenced and an error naming %s", fenced, err, w.ID, v.ID)
	}
	gs, err := be.Grants(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]fenceapi.State{}
	for _, g := range gs {
		states[g.Handle] = g.State
	}
	if states[v.ID] != fenceapi.StateUnknown || !states[v.ID].Live() || states[w.ID] != fenceapi.StateFenced {
		t.Fatalf("grants of n1: %+v; want %s unknown (live, not proven) and %s fenced", gs, v.ID, w.ID)
	}
}

// TestClient_ServerNodes_ASilentServerDoesNotHoldTheOthers: a server that
// accepts connections but never answers contributes nothing, and the
// reports of the others come back within the grace after the first answer,
// not at the end of the caller's deadline (their times would have aged).
func TestClient_ServerNodes_ASilentServerDoesNotHoldTheOthers(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr, srv.Token, client.WithServers(lis.Addr().String()), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	reps, err := c.ServerNodes(ctx)
	if err != nil || len(reps) != 1 {
		t.Fatalf("ServerNodes with a silent server: %d reports, %v; want the one that answers", len(reps), err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("ServerNodes took %s with a silent server; want it to stop waiting shortly after the first answer", took)
	}
}

// TestClient_GroupVolumes_OnlyTheLeaderAnswersCurrent: the group's list of
// volumes, from which the fence back end learns what a silent server holds,
// comes from the leader through a barrier. A client dialed to a follower
// is sent to the leader; a leader cut off from the majority refuses rather
// than answer from what it applied, which may miss a volume created just
// before (a live grant there would then look absent).
func TestClient_GroupVolumes_OnlyTheLeaderAnswersCurrent(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl := controllerClient(t, []*datapathtest.Server{srvs[1], srvs[0], srvs[2]}, client.WithTimeout(time.Second), client.WithRetries(1))
	v, err := ctl.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO) // on the roomiest member
	if err != nil {
		t.Fatal(err)
	}
	vs, err := ctl.GroupVolumes(ctx)
	if err != nil || len(vs) != 1 || vs[0].ID != v.ID || vs[0].Server == "" {
		t.Fatalf("group volumes through a follower: %+v, %v; want %s with its server", vs, err, v.ID)
	}

	lone, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithTimeout(3*time.Second), client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Close()
	srvs[1].Stop()
	srvs[2].Stop()
	if vs, err := lone.GroupVolumes(ctx); err == nil {
		t.Fatalf("group volumes from a leader cut off from the majority: %+v; want a refusal, not its applied state", vs)
	}
}
