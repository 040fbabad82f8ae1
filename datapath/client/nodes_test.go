package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

func TestClient_FenceNode_NodeGrantsNodesLeave(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	epochs := map[string]uint64{}
	for i := range 3 {
		v, err := c.CreateVolume(ctx, fmt.Sprintf("pvc-%d", i), 4096, datapath.AccessRWO)
		if err != nil {
			t.Fatal(err)
		}
		if epochs[v.ID], err = c.Grant(ctx, v.ID, "dead"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Heartbeat(ctx, "alive"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Nodes(ctx)
	if err != nil || len(r.Nodes) != 2 || r.Nodes[0].Node != "alive" || r.Nodes[1].Node != "dead" || r.Nodes[1].LiveGrants != 3 ||
		r.Nodes[0].LastHeartbeat.IsZero() || r.Started.IsZero() || r.Now.Before(r.Started) {
		t.Fatalf("Nodes = %+v, %v", r, err)
	}
	fenced, err := c.FenceNode(ctx, "dead")
	if err != nil || len(fenced) != 3 {
		t.Fatalf("FenceNode = %+v, %v; want 3 volumes", fenced, err)
	}
	for _, f := range fenced {
		if f.Epoch <= epochs[f.VolumeID] {
			t.Fatalf("volume %s fenced at epoch %d, granted at %d", f.VolumeID, f.Epoch, epochs[f.VolumeID])
		}
		err := c.WriteAt(ctx, f.VolumeID, "dead", epochs[f.VolumeID], 0, []byte("zombie"))
		if !errors.Is(err, datapath.ErrFenced) {
			t.Fatalf("zombie write after FenceNode: %v", err)
		}
	}
	gs, err := c.NodeGrants(ctx, "dead")
	if err != nil || len(gs) != 3 {
		t.Fatalf("NodeGrants = %+v, %v", gs, err)
	}
	for i, g := range gs {
		if g.Live() || g.State != datapath.StateFenced || g.Epoch != fenced[i].Epoch || g.VolumeID != fenced[i].VolumeID || g.Updated.IsZero() {
			t.Fatalf("row %d = %+v; want fenced like %+v", i, g, fenced[i])
		}
	}
	if again, err := c.FenceNode(ctx, "dead"); err != nil || len(again) != 0 {
		t.Fatalf("second FenceNode = %+v, %v; want nothing", again, err)
	}
	if gs, err := c.NodeGrants(ctx, "never-seen"); err != nil || len(gs) != 0 {
		t.Fatalf("NodeGrants of an unknown node = %+v, %v; want none", gs, err)
	}
	until, err := c.Leave(ctx, "alive", time.Hour)
	if err != nil || until.Sub(r.Now) < datapath.MaxLeave-time.Minute || time.Until(until) > datapath.MaxLeave {
		t.Fatalf("Leave for an hour = %s, %v; want about now + %s", until, err, datapath.MaxLeave)
	}
	r, _ = c.Nodes(ctx)
	if len(r.Nodes) != 1 || r.Nodes[0].Node != "alive" || !r.Nodes[0].LeavingUntil.Equal(until) {
		t.Fatalf("after the fence and the leave Nodes = %+v; want alive, leaving until %s (dead: no live grant, never spoke)", r.Nodes, until)
	}
}

func TestServer_NodeCalls_BadInputClearErrorsNothingChanged(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	v, _ := c.CreateVolume(ctx, "pvc-a", 4096, datapath.AccessRWO)
	e, _ := c.Grant(ctx, v.ID, "n1")
	long := strings.Repeat("n", datapath.MaxNodeLen+1)
	checks := []badCall{
		{"NodeGrants empty", second(c.NodeGrants(ctx, "")), "node is empty"},
		{"NodeGrants long", second(c.NodeGrants(ctx, long)), "at most 253"},
		{"FenceNode space", second(c.FenceNode(ctx, "n 1")), "white space"},
		{"FenceNode empty", second(c.FenceNode(ctx, "")), "node is empty"},
		{"Leave negative", second(c.Leave(ctx, "n1", -time.Second)), "must be positive"},
		{"Leave zero", second(c.Leave(ctx, "n1", 0)), "must be positive"},
	}
	// An engine acts only as its own node: n1's engine naming a bad node is
	// refused before the name is even looked at.
	if _, err := c.Node("n1").Leave(ctx, "n\x001", time.Second); !errors.Is(err, datapath.ErrPermissionDenied) || !strings.Contains(err.Error(), `"n\x001"`) {
		t.Errorf("Leave by n1 as a bad node: %v; want ErrPermissionDenied naming it", err)
	}
	conn, ctl := rawConn(t, srv, srv.Token)
	_, n1 := rawConn(t, srv, srv.NodeToken("n1"))
	codec := grpc.ForceCodecV2(wire.Codec{})
	raw := func(method string, body []byte) error {
		creds := ctl
		if method == wire.MethodLeave {
			creds = n1
		}
		return datapath.FromStatus(conn.Invoke(ctx, wire.FullMethod(method), rawBytes(body), &wire.Empty{}, codec, creds))
	}
	// Unknown fields (bytes after the last known one) and truncated requests.
	leave := (&wire.LeaveRequest{Node: "n1", DurationNanos: int64(time.Minute)}).MarshalAppend(nil)
	fence := (&wire.NodeRef{Node: "n1"}).MarshalAppend(nil)
	checks = append(checks,
		badCall{"Leave extra field", raw(wire.MethodLeave, append(leave, 1, 2)), "trailing bytes"},
		badCall{"Leave truncated", raw(wire.MethodLeave, leave[:3]), "malformed"},
		badCall{"FenceNode extra field", raw(wire.MethodFenceNode, append(fence, 0)), "trailing bytes"},
		badCall{"Nodes with a body", raw(wire.MethodNodes, []byte{1}), "trailing bytes"},
	)
	for _, ch := range checks {
		if !errors.Is(ch.err, datapath.ErrInvalidArgument) || !strings.Contains(ch.err.Error(), ch.mention) {
			t.Errorf("%s: %v; want ErrInvalidArgument mentioning %q", ch.name, ch.err, ch.mention)
		}
	}
	// Nothing changed: n1's grant is live with its epoch, nobody is leaving.
	if gs, err := c.NodeGrants(ctx, "n1"); err != nil || len(gs) != 1 || !gs[0].Live() || gs[0].Epoch != e {
		t.Fatalf("after refused calls n1's rows = %+v, %v", gs, err)
	}
	if r, _ := c.Nodes(ctx); len(r.Nodes) != 1 || !r.Nodes[0].LeavingUntil.IsZero() {
		t.Fatalf("after refused calls Nodes = %+v", r.Nodes)
	}
	// A wrong token fences nothing.
	bad, err := client.Dial(ctx, srv.Addr, "not-the-token", client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.FenceNode(ctx, "n1"); !errors.Is(err, datapath.ErrUnauthenticated) {
		t.Fatalf("FenceNode with a wrong token: %v", err)
	}
	if _, err := bad.Leave(ctx, "n1", time.Minute); !errors.Is(err, datapath.ErrUnauthenticated) {
		t.Fatalf("Leave with a wrong token: %v", err)
	}
	if gs, _ := c.NodeGrants(ctx, "n1"); len(gs) != 1 || !gs[0].Live() {
		t.Fatalf("a call with a wrong token changed n1's rows: %+v", gs)
	}
}

// badCall is a refused call: its error must be ErrInvalidArgument and mention
// what was wrong.
type badCall struct {
	name    string
	err     error
	mention string
}

func second[T any](_ T, err error) error { return err }

func TestClient_FenceNode_NoWriteLandsAfterFenceOverBulk(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	for round := 0; round < 2; round++ {
		v, _ := c.CreateVolume(ctx, fmt.Sprintf("race-%d", round), 1<<20, datapath.AccessRWO)
		epoch, _ := c.Grant(ctx, v.ID, "zombie")
		write := func(off int64, p []byte) error { return c.WriteAt(ctx, v.ID, "zombie", epoch, off, p) }
		fence := func() error {
			fs, err := c.FenceNode(ctx, "zombie")
			if err == nil && len(fs) != 1 {
				err = fmt.Errorf("FenceNode fenced %+v, want the one volume", fs)
			}
			return err
		}
		datapathtest.RaceFence(t, srv.Store.DataFile(v.ID), write, fence)
	}
}
