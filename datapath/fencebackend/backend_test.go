package fencebackend_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/fencebackend"
	"github.com/vigil-storage/vigil/fenceapi"
	"github.com/vigil-storage/vigil/fenceapi/fenceapitest"
)

// clock is the datapath server's clock in these tests, moved by Advance.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// cutter is the fencer's way to the server: a dialer that the test can cut,
// closing the connections it made and refusing new ones.
type cutter struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, addr string) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("cut off by the test")
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutter) set(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
	if cut {
		for _, conn := range c.conns {
			_ = conn.Close()
		}
		c.conns = nil
	}
}

// control arranges the datapath's state through a client of its own.
type control struct {
	dp    *datapathtest.Roles // the controller's calls as the controller, heartbeats as each node
	clock *clock
	cut   *cutter
}

func (c *control) NewVolume(ctx context.Context, name string) (string, error) {
	v, err := c.dp.CreateVolume(ctx, name, 4096, datapath.AccessRWO)
	return v.ID, err
}
func (c *control) Grant(ctx context.Context, handle, node string) (uint64, error) {
	return c.dp.Grant(ctx, handle, node)
}
func (c *control) Release(ctx context.Context, handle, node string) error {
	return c.dp.Release(ctx, handle, node)
}
func (c *control) Heartbeat(ctx context.Context, node string) error { return c.dp.Heartbeat(ctx, node) }
func (c *control) Leave(ctx context.Context, node string, d time.Duration) error {
	_, err := c.dp.Leave(ctx, node, d)
	return err
}
func (c *control) Advance(d time.Duration) { c.clock.Advance(d) }
func (c *control) SetUnavailable(cut bool) { c.cut.set(cut) }

// newBackend starts a real datapath server with a test clock and returns a
// Backend over a cuttable connection and a control over its own connection.
func newBackend(t *testing.T) (*fencebackend.Backend, *control) {
	clk := &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	srv := datapathtest.Start(t, datapath.Options{Now: clk.Now})
	ctx := context.Background()
	own := srv.DialRoles(t)
	cut := &cutter{}
	dp, err := client.Dial(ctx, srv.Addr, srv.Token,
		client.WithRetries(8), client.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		client.WithDialOptions(grpc.WithContextDialer(cut.dial), grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.5, MaxDelay: 50 * time.Millisecond},
			MinConnectTimeout: time.Second,
		})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dp.Close() })
	return fencebackend.New(dp), &control{dp: own, clock: clk, cut: cut}
}

func TestBackend_Conformance(t *testing.T) {
	fenceapitest.RunConformance(t, fenceapitest.Backend{
		New: func(t *testing.T) (fenceapitest.FenceBackend, fenceapitest.Control) { return newBackend(t) },
	})
}

func TestBackend_Driver_IsVigils(t *testing.T) {
	if got := fencebackend.New(nil).Driver(); got != vigil.DriverName {
		t.Fatalf("Driver() = %q, want %q", got, vigil.DriverName)
	}
}

// fakeDatapath answers with fixed results, for the error and state mapping.
type fakeDatapath struct {
	err    error
	rows   []datapath.Attachment
	nodes  datapath.NodesReport
	failed []datapath.FailedVolume
}

func (f *fakeDatapath) FenceNode(context.Context, string) ([]datapath.FencedVolume, error) {
	return nil, f.err
}
func (f *fakeDatapath) Fence(context.Context, string, string) (uint64, error) { return 0, f.err }
func (f *fakeDatapath) NodeGrants(context.Context, string) ([]datapath.Attachment, error) {
	return f.rows, f.err
}
func (f *fakeDatapath) Nodes(context.Context) (datapath.NodesReport, error) { return f.nodes, f.err }
func (f *fakeDatapath) FailedVolumes(context.Context) ([]datapath.FailedVolume, error) {
	return f.failed, f.err
}

func TestBackend_Errors_OnlyInputRefusalsAreNotUnavailable(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		err         error
		unavailable bool
	}{
		{&datapath.RemoteError{Message: "node is empty", Sentinel: datapath.ErrInvalidArgument}, false},
		{&datapath.RemoteError{Message: "wrong token", Sentinel: datapath.ErrUnauthenticated}, true},
		{errors.New("connection refused"), true},
		{context.DeadlineExceeded, true},
		{&datapath.RemoteError{Message: "disk full", Sentinel: datapath.ErrNoSpace}, true},
	}
	for _, c := range cases {
		f := fencebackend.New(&fakeDatapath{err: c.err})
		_, e1 := f.FenceNode(ctx, "n1")
		_, e2 := f.Grants(ctx, "n1")
		_, e3 := f.Connectivity(ctx)
		_, e4 := f.FailedVolumes(ctx)
		_, e5 := f.FenceVolumes(ctx, "n1", []string{"vol-0000000000000001"})
		for _, err := range []error{e1, e2, e3, e4, e5} {
			if !errors.Is(err, c.err) || errors.Is(err, fenceapi.ErrUnavailable) != c.unavailable {
				t.Errorf("datapath error %v became %v; want it wrapped, ErrUnavailable %v", c.err, err, c.unavailable)
			}
		}
	}
}

func TestBackend_Grants_UnknownStateIsNoProof(t *testing.T) {
	f := fencebackend.New(&fakeDatapath{rows: []datapath.Attachment{
		{VolumeID: "vol-0000000000000001", Node: "n1", Epoch: 3, State: datapath.StateFenced},
		{VolumeID: "vol-0000000000000002", Node: "n1", Epoch: 4, State: "suspended"},
	}})
	gs, err := f.Grants(context.Background(), "n1")
	if !errors.Is(err, fenceapi.ErrUnavailable) || gs != nil || !strings.Contains(err.Error(), `"suspended"`) {
		t.Fatalf("Grants with an unknown state = %+v, %v; want no rows and ErrUnavailable naming it", gs, err)
	}
}

func TestBackend_Connectivity_LastHeartbeatIsLastSeen(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	f := fencebackend.New(&fakeDatapath{nodes: datapath.NodesReport{Now: now, Started: now.Add(-time.Hour), Nodes: []datapath.NodeStatus{
		{Node: "io-only", LastIO: now.Add(-time.Second)},
		{Node: "both", LastHeartbeat: now.Add(-5 * time.Second), LastIO: now.Add(-2 * time.Second), LeavingUntil: now.Add(time.Minute)},
	}}})
	r, err := f.Connectivity(context.Background())
	if err != nil || !r.Now.Equal(now) || !r.Since.Equal(now.Add(-time.Hour)) || len(r.Nodes) != 2 {
		t.Fatalf("Connectivity = %+v, %v", r, err)
	}
	if d, ok := r.Silence("io-only"); !ok || d != time.Second {
		t.Fatalf("I/O counts as a sign of life: silence %s, %v; want 1s", d, ok)
	}
	if _, ok := r.Silence("both"); ok || !r.Nodes[1].LeavingUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("leaving node: %+v", r.Nodes[1])
	}
}

// TestBackend_FailedVolumes_SaysWhyAndHowToClear: a failed volume comes out
// with its handle, when and why it failed, and the command that clears it,
// from a real server whose flush failed.
func TestBackend_FailedVolumes_SaysWhyAndHowToClear(t *testing.T) {
	faults := datapathtest.NewFaults()
	srv := datapathtest.Start(t, datapath.Options{OpenFile: faults.Open})
	v, err := srv.Store.CreateVolume("pvc-1", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	e, err := srv.Store.Grant(v.ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	f := fencebackend.New(srv.DialRoles(t))
	if fs, err := f.FailedVolumes(context.Background()); err != nil || len(fs) != 0 {
		t.Fatalf("FailedVolumes before any failure = %+v, %v", fs, err)
	}
	faults.FailNextSync(srv.Store.DataFile(v.ID))
	if err := srv.Store.Flush(v.ID, "n1", e); !errors.Is(err, datapath.ErrVolumeFailed) {
		t.Fatalf("flush: %v", err)
	}
	fs, err := f.FailedVolumes(context.Background())
	if err != nil || len(fs) != 1 || fs[0].Handle != v.ID || fs[0].Since.IsZero() ||
		!strings.Contains(fs[0].Reason, "input/output error") || fs[0].Clear != "vigil-datapath clear-failure "+v.ID {
		t.Fatalf("FailedVolumes = %+v, %v", fs, err)
	}
}
