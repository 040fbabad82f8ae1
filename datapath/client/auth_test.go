package client_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/devcerts"
)

// snapshot is what the calls below could change: the volume's attachment
// table and data, and the node table.
func snapshot(t *testing.T, srv *datapathtest.Server, volumeID string) string {
	t.Helper()
	as, err := srv.Store.Attachments(volumeID)
	if err != nil {
		t.Fatal(err)
	}
	r, err := srv.Store.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	vs, _ := srv.Store.ListVolumes()
	data, _ := srv.Store.ReadAt(volumeID, "node-b", as[1].Epoch, 0, 16)
	var b strings.Builder
	for _, a := range as {
		b.WriteString(a.Node + " " + string(a.State) + "\n")
	}
	for _, n := range r.Nodes {
		b.WriteString(n.Node + " " + n.LastHeartbeat.String() + " " + n.LeavingUntil.String() + "\n")
	}
	b.WriteString(string(data))
	b.WriteString(strings.Repeat("v", len(vs)))
	return b.String()
}

// TestClient_Identities_NodeACannotActAsNodeB: node-a's engine, over gRPC and
// the bulk channel, cannot write, read, flush, heartbeat, leave or release as
// node-b, and cannot create, delete, grant or fence at all; the controller
// cannot write or heartbeat as any node. Every refusal is ErrPermissionDenied
// and changes nothing.
func TestClient_Identities_NodeACannotActAsNodeB(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	ctx := context.Background()
	ctl := dial(t, srv).Client
	v, err := ctl.CreateVolume(ctx, "pvc-shared", 1<<20, datapath.AccessRWX)
	if err != nil {
		t.Fatal(err)
	}
	ea, _ := ctl.Grant(ctx, v.ID, "node-a")
	eb, _ := ctl.Grant(ctx, v.ID, "node-b")
	var a, aGRPC *client.Client
	for _, c := range []**client.Client{&a, &aGRPC} {
		opts := []client.Option{client.WithRetries(0)}
		if c == &aGRPC {
			opts = append(opts, client.WithBulk(false))
		}
		if *c, err = client.Dial(ctx, srv.Addr, srv.NodeToken("node-a"), opts...); err != nil {
			t.Fatal(err)
		}
		defer (*c).Close()
	}
	// node-a does its own part.
	if err := a.WriteAt(ctx, v.ID, "node-a", ea, 0, bytes.Repeat([]byte{1}, 256<<10)); err != nil {
		t.Fatalf("node-a writes as node-a over bulk: %v", err)
	}
	if err := aGRPC.Heartbeat(ctx, "node-a"); err != nil {
		t.Fatalf("node-a heartbeats: %v", err)
	}
	before := snapshot(t, srv, v.ID)
	big := bytes.Repeat([]byte{2}, 256<<10)
	refusals := map[string]error{
		"write as node-b over bulk": a.WriteAt(ctx, v.ID, "node-b", eb, 0, big),
		"write as node-b over gRPC": aGRPC.WriteAt(ctx, v.ID, "node-b", eb, 0, []byte("x")),
		"read as node-b":            second(aGRPC.ReadAt(ctx, v.ID, "node-b", eb, 0, 1)),
		"flush as node-b":           aGRPC.Flush(ctx, v.ID, "node-b", eb),
		"heartbeat as node-b":       aGRPC.Heartbeat(ctx, "node-b"),
		"leave as node-b":           second(aGRPC.Leave(ctx, "node-b", time.Minute)),
		"release node-b":            aGRPC.Release(ctx, v.ID, "node-b"),
		"node-b's grants":           second(aGRPC.NodeGrants(ctx, "node-b")),
		"fence node-b":              second(aGRPC.Fence(ctx, v.ID, "node-b")),
		"fence node-b's volumes":    second(aGRPC.FenceNode(ctx, "node-b")),
		"grant itself":              second(aGRPC.Grant(ctx, v.ID, "node-a")),
		"grant node-c":              second(aGRPC.Grant(ctx, v.ID, "node-c")),
		"create a volume":           second(aGRPC.CreateVolume(ctx, "pvc-mine", 4096, datapath.AccessRWO)),
		"delete the volume":         aGRPC.DeleteVolume(ctx, v.ID),
		"list the nodes":            second(aGRPC.Nodes(ctx)),
		"the controller writes":     ctl.WriteAt(ctx, v.ID, "node-b", eb, 0, big),
		"the controller heartbeats": ctl.Heartbeat(ctx, "node-b"),
		"the controller leaves":     second(ctl.Leave(ctx, "node-b", time.Minute)),
	}
	for what, err := range refusals {
		if !errors.Is(err, datapath.ErrPermissionDenied) {
			t.Errorf("%s: %v; want ErrPermissionDenied", what, err)
		}
	}
	if after := snapshot(t, srv, v.ID); after != before {
		t.Fatalf("refused calls changed the state:\n%s\n---\n%s", before, after)
	}
	// What an engine may read, and its own release.
	if _, err := aGRPC.GetVolume(ctx, v.ID); err != nil {
		t.Errorf("node-a reads the volume: %v", err)
	}
	if _, err := aGRPC.Attachments(ctx, v.ID); err != nil {
		t.Errorf("node-a reads its attachments: %v", err)
	}
	if gs, err := aGRPC.NodeGrants(ctx, "node-a"); err != nil || len(gs) != 1 {
		t.Errorf("node-a reads its grants: %+v, %v", gs, err)
	}
	if err := aGRPC.Release(ctx, v.ID, "node-a"); err != nil {
		t.Errorf("node-a releases its own grant: %v", err)
	}
}

// TestClient_TLS_VerifiesTheServer: over TLS the client writes (bulk and
// gRPC) and reads; a client without the CA, with another CA, or in plaintext
// is refused, and so is a TLS client of a plaintext server.
func TestClient_TLS_VerifiesTheServer(t *testing.T) {
	srv := datapathtest.StartWith(t, datapathtest.Config{TLS: true})
	ctx := context.Background()
	ctl := dial(t, srv, client.WithCAFile(srv.CAFile)).Client
	v, err := ctl.CreateVolume(ctx, "pvc-tls", 4<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := ctl.Grant(ctx, v.ID, "node-a")
	p := bytes.Repeat([]byte("tls!"), 256<<10) // 1 MiB: the bulk channel
	for _, bulk := range []bool{true, false} {
		c, err := client.Dial(ctx, srv.Addr, srv.NodeToken("node-a"), client.WithCAFile(srv.CAFile), client.WithBulk(bulk))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteAt(ctx, v.ID, "node-a", e, 0, p); err != nil {
			t.Fatalf("write over TLS (bulk %v): %v", bulk, err)
		}
		got, err := c.ReadAt(ctx, v.ID, "node-a", e, 0, len(p))
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("read over TLS (bulk %v): %v", bulk, err)
		}
		_ = c.Close()
	}
	otherCA, err := devcerts.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string][]client.Option{
		"plaintext":  nil,
		"another CA": {client.WithRootCAs(otherCA.Pool())},
		"no CA":      {client.WithRootCAs(x509.NewCertPool())},
	}
	for name, opts := range bad {
		c, err := client.Dial(ctx, srv.Addr, srv.Token, append(opts, client.WithRetries(0), client.WithTimeout(3*time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ListVolumes(ctx); err == nil {
			t.Errorf("%s: ListVolumes succeeded against a TLS server", name)
		}
		if err := c.WriteAt(ctx, v.ID, "node-a", e, 0, p); err == nil {
			t.Errorf("%s: a write succeeded against a TLS server", name)
		}
		_ = c.Close()
	}
	if got, _ := srv.Store.ReadAt(v.ID, "node-a", e, 0, 4); string(got) != "tls!" {
		t.Fatalf("a refused client changed the data: %q", got)
	}
	plain := datapathtest.Start(t, datapath.Options{})
	c, err := client.Dial(ctx, plain.Addr, plain.Token, client.WithCAFile(srv.CAFile), client.WithRetries(0), client.WithTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ListVolumes(ctx); err == nil {
		t.Error("a TLS client got an answer from a plaintext server")
	}
}

func TestClient_Dial_TransportAndTokenBadInput(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		addr    string
		token   string
		opts    []client.Option
		mention string
	}{
		{"plaintext off loopback", "10.1.2.3:9600", "tok", nil, "not a loopback address"},
		{"CA and insecure", "10.1.2.3:9600", "tok", []client.Option{client.WithRootCAs(x509.NewCertPool()), client.WithInsecure()}, "contradict"},
		{"CA file and pool", "127.0.0.1:9600", "tok", []client.Option{client.WithRootCAs(x509.NewCertPool()), client.WithCAFile("x")}, "not both"},
		{"token and token file", "127.0.0.1:9600", "tok", []client.Option{client.WithTokenFile("/etc/hostname")}, "a token and a token file"},
		{"missing token file", "127.0.0.1:9600", "", []client.Option{client.WithTokenFile("/nonexistent/token")}, "/nonexistent/token"},
		{"no token", "127.0.0.1:9600", "", nil, "empty token"},
	} {
		if _, err := client.Dial(ctx, tc.addr, tc.token, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v; want an error mentioning %q", tc.name, err, tc.mention)
		}
	}
}
