package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// dial returns a client that makes each call as production would: I/O,
// heartbeats and Leave as the named node's engine, the rest as the controller.
func dial(t testing.TB, srv *datapathtest.Server, opts ...client.Option) *datapathtest.Roles {
	t.Helper()
	return srv.DialRoles(t, opts...)
}

// grantedVolume creates a read-write-once volume of size through c and
// grants it to node n1, failing t on any error; it returns the volume and the
// grant's epoch.
func grantedVolume(t testing.TB, c *datapathtest.Roles, size int64) (datapath.Volume, uint64) {
	t.Helper()
	ctx := context.Background()
	v, err := c.CreateVolume(ctx, "pvc-a", size, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Grant(ctx, v.ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return v, e
}

func TestClient_VolumeLifecycle(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{Capacity: 1 << 30})
	c := dial(t, srv)
	ctx := context.Background()
	v, err := c.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO); err != nil || again != v {
		t.Fatalf("idempotent create = %+v, %v; want %+v", again, err, v)
	}
	if _, err := c.CreateVolume(ctx, "pvc-a", 2<<20, datapath.AccessRWO); !errors.Is(err, datapath.ErrAlreadyExists) {
		t.Fatalf("conflicting create: %v", err)
	}
	if _, err := c.CreateVolume(ctx, "pvc-huge", 2<<30, datapath.AccessRWO); !errors.Is(err, datapath.ErrNoSpace) {
		t.Fatalf("too big: %v", err)
	}
	if got, err := c.GetVolume(ctx, v.ID); err != nil || got != v {
		t.Fatalf("GetVolume = %+v, %v", got, err)
	}
	if vs, err := c.ListVolumes(ctx); err != nil || len(vs) != 1 || vs[0] != v {
		t.Fatalf("ListVolumes = %+v, %v", vs, err)
	}
	if avail, err := c.Capacity(ctx); err != nil || avail != 1<<30-1<<20 {
		t.Fatalf("Capacity = %d, %v", avail, err)
	}
	if err := c.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := c.GetVolume(ctx, v.ID); !errors.Is(err, datapath.ErrNotFound) {
		t.Fatalf("GetVolume deleted: %v", err)
	}
}

func TestClient_Fence_SentinelsCrossTheWire(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	v, _ := c.CreateVolume(ctx, "pvc-a", 64<<10, datapath.AccessRWO)
	e1, err := c.Grant(ctx, v.ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteAt(ctx, v.ID, "n1", e1, 0, []byte("before")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Grant(ctx, v.ID, "n2"); !errors.Is(err, datapath.ErrAttachedElsewhere) {
		t.Fatalf("second RWO grant: %v", err)
	}
	if err := c.DeleteVolume(ctx, v.ID); !errors.Is(err, datapath.ErrInUse) {
		t.Fatalf("delete while granted: %v", err)
	}
	fe, err := c.Fence(ctx, v.ID, "n1")
	if err != nil || fe <= e1 {
		t.Fatalf("Fence = %d, %v", fe, err)
	}
	err = c.WriteAt(ctx, v.ID, "n1", e1, 0, []byte("zombie"))
	if !errors.Is(err, datapath.ErrFenced) || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("zombie write: %v, want ErrFenced", err)
	}
	if err := c.Flush(ctx, v.ID, "n1", e1); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("zombie flush: %v", err)
	}
	e2, err := c.Grant(ctx, v.ID, "n2")
	if err != nil || e2 <= fe {
		t.Fatalf("grant n2 = %d, %v", e2, err)
	}
	p, err := c.ReadAt(ctx, v.ID, "n2", e2, 0, 6)
	if err != nil || string(p) != "before" {
		t.Fatalf("read = %q, %v", p, err)
	}
	as, err := c.Attachments(ctx, v.ID)
	if err != nil || len(as) != 2 || as[0].State != datapath.StateFenced || as[1].State != datapath.StateGranted || as[1].Epoch != e2 {
		t.Fatalf("Attachments = %+v, %v", as, err)
	}
	if err := c.Release(ctx, v.ID, "n2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadAt(ctx, v.ID, "n2", e2, 0, 1); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("read after release: %v", err)
	}
	if _, err := c.ReadAt(ctx, v.ID, "n2", e2, 1<<20, 1); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("fence check comes first: %v", err)
	}
	e3, _ := c.Grant(ctx, v.ID, "n2")
	if _, err := c.ReadAt(ctx, v.ID, "n2", e3, 64<<10, 1); !errors.Is(err, datapath.ErrOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if err := c.WriteAt(ctx, "vol-0000000000000001", "n2", e3, 0, []byte("x")); !errors.Is(err, datapath.ErrNotFound) {
		t.Fatalf("unknown volume: %v", err)
	}
	if _, err := c.Grant(ctx, "not-an-id", "n2"); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Fatalf("bad id: %v", err)
	}
}

func TestClient_Dial_WrongOrMissingToken(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	ctx := context.Background()
	good := dial(t, srv)
	v, _ := good.CreateVolume(ctx, "pvc-a", 4096, datapath.AccessRWO)
	bad, err := client.Dial(ctx, srv.Addr, "not-the-token", client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = bad.CreateVolume(ctx, "pvc-b", 4096, datapath.AccessRWO)
	if !errors.Is(err, datapath.ErrUnauthenticated) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("wrong token: %v", err)
	}
	if err := bad.DeleteVolume(ctx, v.ID); !errors.Is(err, datapath.ErrUnauthenticated) {
		t.Fatalf("wrong token delete: %v", err)
	}
	// No token at all, straight through gRPC.
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Invoke(ctx, wire.FullMethod(wire.MethodDeleteVolume), &wire.VolumeRef{ID: v.ID}, &wire.Empty{}, grpc.ForceCodecV2(wire.Codec{}))
	if err = datapath.FromStatus(err); !errors.Is(err, datapath.ErrUnauthenticated) || !strings.Contains(err.Error(), "no token") {
		t.Fatalf("no token: %v", err)
	}
	if vs, _ := good.ListVolumes(ctx); len(vs) != 1 {
		t.Fatalf("unauthenticated calls changed the volumes: %+v", vs)
	}
	if _, err := client.Dial(ctx, srv.Addr, ""); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Fatalf("empty token: %v", err)
	}
}

// rawConn talks to the server with token and without the client's own
// checks, to prove the server refuses bad requests by itself.
func rawConn(t *testing.T, srv *datapathtest.Server, token string) (*grpc.ClientConn, grpc.CallOption) {
	t.Helper()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, grpc.PerRPCCredsCallOption{Creds: bearer(token)}
}

// rawIO is node n1's raw connection (rawConn) for I/O requests on target.
type rawIO struct {
	conn   *grpc.ClientConn
	creds  grpc.CallOption
	target wire.IOTarget
}

func newRawIO(t *testing.T, srv *datapathtest.Server, volumeID string, epoch uint64) rawIO {
	t.Helper()
	conn, creds := rawConn(t, srv, srv.NodeToken("n1"))
	return rawIO{conn: conn, creds: creds, target: wire.IOTarget{VolumeID: volumeID, Node: "n1", Epoch: epoch}}
}

// invoke calls method with req and resp in the wire codec, and returns its
// error as the datapath's.
func (r rawIO) invoke(ctx context.Context, method string, req, resp any) error {
	return datapath.FromStatus(r.conn.Invoke(ctx, wire.FullMethod(method), req, resp, grpc.ForceCodecV2(wire.Codec{}), r.creds))
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

func TestServer_BadRequests_ClearErrorsNothingChanged(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	v, e := grantedVolume(t, c, 8<<20)
	raw := newRawIO(t, srv, v.ID, e)
	var session wire.Generation
	if err := raw.invoke(ctx, wire.MethodOpenWriteSession, &wire.OpenSessionRequest{IOTarget: raw.target}, &session); err != nil {
		t.Fatal(err)
	}
	write := func(data []byte) error {
		req := &wire.WriteRequest{IOTarget: raw.target, Gen: session.Gen, Data: data}
		return raw.invoke(ctx, wire.MethodWrite, req, &wire.Empty{})
	}
	if err := write(make([]byte, datapath.MaxIOSize+1)); !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), "at most") && !strings.Contains(err.Error(), "allowed") {
		t.Fatalf("oversize write: %v", err)
	}
	if err := write(make([]byte, 8<<20)); err == nil || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("far oversize write: %v", err)
	}
	// A request that does not decode.
	err := raw.invoke(ctx, wire.MethodWrite, rawBytes{0xff, 0xff}, &wire.Empty{})
	if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("garbage request: %v", err)
	}
	if err := c.WriteAt(ctx, v.ID, "n1", e, 0, make([]byte, datapath.MaxIOSize+1)); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Fatalf("client-side oversize: %v", err)
	}
	p, _ := c.ReadAt(ctx, v.ID, "n1", e, 0, 4096)
	for _, b := range p {
		if b != 0 {
			t.Fatal("a refused request wrote data")
		}
	}
}

// rawBytes is a message whose encoding is given verbatim.
type rawBytes []byte

func (r rawBytes) MarshalAppend(b []byte) []byte { return append(b, r...) }
func (r rawBytes) Unmarshal([]byte) error        { return nil }

func TestClient_Fence_NoWriteLandsAfterFenceOverGRPC(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv, client.WithBulk(false))
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		v, _ := c.CreateVolume(ctx, "race-"+string(rune('a'+round)), 1<<20, datapath.AccessRWO)
		epoch, _ := c.Grant(ctx, v.ID, "zombie")
		write := func(off int64, p []byte) error { return c.WriteAt(ctx, v.ID, "zombie", epoch, off, p) }
		fence := func() error { _, err := c.Fence(ctx, v.ID, "zombie"); return err }
		datapathtest.RaceFence(t, srv.Store.DataFile(v.ID), write, fence)
	}
}

func TestClient_Connectivity_Heartbeat(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	c := dial(t, srv)
	ctx := context.Background()
	v, _ := c.CreateVolume(ctx, "pvc-a", 4096, datapath.AccessRWO)
	conn, err := c.Connectivity(ctx, "n1", v.ID, time.Minute)
	if err != nil || conn.Connected {
		t.Fatalf("before heartbeat: %+v, %v", conn, err)
	}
	if err := c.Heartbeat(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	e, _ := c.Grant(ctx, v.ID, "n1")
	_ = c.WriteAt(ctx, v.ID, "n1", e, 0, []byte("x"))
	conn, err = c.Connectivity(ctx, "n1", v.ID, time.Minute)
	if err != nil || !conn.Connected || !conn.IOActive || conn.LastHeartbeat.IsZero() || conn.LastIO.Before(conn.LastHeartbeat) {
		t.Fatalf("after heartbeat and I/O: %+v, %v", conn, err)
	}
	if _, err := c.Connectivity(ctx, "n1", v.ID, -time.Second); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Fatalf("negative window: %v", err)
	}
	if err := c.Heartbeat(ctx, "bad node"); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Fatalf("bad node name: %v", err)
	}
}

func TestClient_Retries_ServerStartsLate(t *testing.T) {
	// Reserve a port, start nothing on it yet.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	c, err := client.Dial(context.Background(), addr, "tok", client.WithRetries(2), client.WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.ListVolumes(context.Background())
	if err == nil || !strings.Contains(err.Error(), "connect") && !strings.Contains(err.Error(), "refused") {
		t.Fatalf("no server: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("retries took %s", time.Since(start))
	}
}
