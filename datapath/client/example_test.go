package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/devcerts"
)

// exampleTokens is the examples' tokens file: one token for the controller
// and one per node, never one for all.
const exampleTokens = `controller example-controller-token
node node-a example-node-a-token
node node-b example-node-b-token
`

// exampleServer serves a fresh store on loopback with exampleTokens.
func exampleServer() (addr string, stop func()) {
	dir, _ := os.MkdirTemp("", "datapath-example")
	store, _ := datapath.Open(dir, datapath.Options{Capacity: 1 << 30})
	tokens, _ := datapath.ParseTokens(strings.NewReader(exampleTokens), "example")
	srv, _ := datapath.NewServer(store, tokens)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().String(), func() { srv.Stop(0); _ = store.Close(); _ = os.RemoveAll(dir) }
}

// Example shows the life of an RWO volume: a node is granted it, writes, is
// fenced, and its late write is refused while the new node reads the data.
func Example() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	ctl, _ := client.Dial(ctx, addr, "example-controller-token") // the manager, the CSI controller
	defer ctl.Close()
	nodeA, _ := client.Dial(ctx, addr, "example-node-a-token") // node-a's engine
	defer nodeA.Close()
	nodeB, _ := client.Dial(ctx, addr, "example-node-b-token") // node-b's engine
	defer nodeB.Close()

	v, _ := ctl.CreateVolume(ctx, "pvc-data", 1<<20, datapath.AccessRWO)
	old, _ := ctl.Grant(ctx, v.ID, "node-a")
	_ = nodeA.WriteAt(ctx, v.ID, "node-a", old, 0, []byte("hello"))

	// node-a stops answering: fence it, then hand the volume to node-b.
	fenced, _ := ctl.Fence(ctx, v.ID, "node-a")
	err := nodeA.WriteAt(ctx, v.ID, "node-a", old, 0, []byte("zombie"))
	fmt.Println("zombie write refused:", errors.Is(err, datapath.ErrFenced))
	epoch, _ := ctl.Grant(ctx, v.ID, "node-b")
	p, _ := nodeB.ReadAt(ctx, v.ID, "node-b", epoch, 0, 5)
	fmt.Printf("node-b reads %q; epochs %d < %d < %d\n", p, old, fenced, epoch)
	// Output:
	// zombie write refused: true
	// node-b reads "hello"; epochs 1 < 2 < 3
}

// Example_identities shows what each identity may do: an engine acts only as
// its own node and never grants or fences; the controller never writes.
func Example_identities() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	ctl, _ := client.Dial(ctx, addr, "example-controller-token")
	defer ctl.Close()
	nodeA, _ := client.Dial(ctx, addr, "example-node-a-token")
	defer nodeA.Close()
	v, _ := ctl.CreateVolume(ctx, "pvc-data", 1<<20, datapath.AccessRWO)
	e, _ := ctl.Grant(ctx, v.ID, "node-a")

	fmt.Println("node-a writes as node-a:", nodeA.WriteAt(ctx, v.ID, "node-a", e, 0, []byte("mine")))
	_, err := nodeA.Grant(ctx, v.ID, "node-b")
	fmt.Println("node-a grants:", errors.Is(err, datapath.ErrPermissionDenied))
	err = nodeA.Heartbeat(ctx, "node-b")
	fmt.Println("node-a heartbeats as node-b:", errors.Is(err, datapath.ErrPermissionDenied))
	err = ctl.WriteAt(ctx, v.ID, "node-a", e, 0, []byte("not mine"))
	fmt.Println("the controller writes:", errors.Is(err, datapath.ErrPermissionDenied))
	_, err = client.Dial(ctx, "10.0.0.1:9600", "example-node-a-token")
	fmt.Println("plaintext off loopback:", errors.Is(err, datapath.ErrInvalidArgument))
	// Output:
	// node-a writes as node-a: <nil>
	// node-a grants: true
	// node-a heartbeats as node-b: true
	// the controller writes: true
	// plaintext off loopback: true
}

// ExampleWithBulk sends writes over gRPC instead of the bulk channel (for
// comparison, or through a proxy that carries only HTTP/2).
func ExampleWithBulk() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	ctl, _ := client.Dial(ctx, addr, "example-controller-token")
	defer ctl.Close()
	c, _ := client.Dial(ctx, addr, "example-node-a-token", client.WithBulk(false))
	defer c.Close()
	v, _ := ctl.CreateVolume(ctx, "pvc-data", 1<<20, datapath.AccessRWO)
	e, _ := ctl.Grant(ctx, v.ID, "node-a")
	fmt.Println("write:", c.WriteAt(ctx, v.ID, "node-a", e, 0, []byte("over gRPC")))
	// Output:
	// write: <nil>
}

// ExampleClient_FenceNode fences every volume a dead node holds with one call
// and reads the node table the manager's connectivity check uses; a node
// that stops on purpose announces it with Leave.
func ExampleClient_FenceNode() {
	addr, stop := exampleServer()
	defer stop()

	ctx := context.Background()
	c, _ := client.Dial(ctx, addr, "example-controller-token")
	defer c.Close()
	nodeB, _ := client.Dial(ctx, addr, "example-node-b-token")
	defer nodeB.Close()
	for _, name := range []string{"pvc-a", "pvc-b", "pvc-c"} {
		v, _ := c.CreateVolume(ctx, name, 1<<20, datapath.AccessRWO)
		_, _ = c.Grant(ctx, v.ID, "node-a")
	}
	_ = nodeB.Heartbeat(ctx, "node-b")
	_, _ = nodeB.Leave(ctx, "node-b", 30*time.Second) // node-b's engine restarts on purpose

	fenced, _ := c.FenceNode(ctx, "node-a")
	again, _ := c.FenceNode(ctx, "node-a")
	fmt.Printf("fenced %d volumes, then %d\n", len(fenced), len(again))
	r, _ := c.Nodes(ctx)
	for _, n := range r.Nodes {
		fmt.Printf("%s: live grants %d, leaving %v\n", n.Node, n.LiveGrants, !n.LeavingUntil.IsZero())
	}
	// Output:
	// fenced 3 volumes, then 0
	// node-b: live grants 0, leaving true
}

// ExampleWithCAFile reaches a datapath that serves TLS: the client verifies
// its certificate against the CA, for gRPC and the bulk channel alike.
func ExampleWithCAFile() {
	dir, _ := os.MkdirTemp("", "datapath-example")
	defer os.RemoveAll(dir)
	files, _ := devcerts.WriteServerFiles(dir, []string{"127.0.0.1"}, time.Hour)
	tlsCfg, _ := datapath.ServerTLS(files.Cert, files.Key)
	store, _ := datapath.Open(filepath.Join(dir, "data"), datapath.Options{Capacity: 1 << 30})
	defer store.Close()
	tokens, _ := datapath.ParseTokens(strings.NewReader(exampleTokens), "example")
	srv, _ := datapath.NewServer(store, tokens, datapath.WithTLS(tlsCfg))
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop(0)

	ctx := context.Background()
	ctl, _ := client.Dial(ctx, lis.Addr().String(), "example-controller-token", client.WithCAFile(files.CA))
	defer ctl.Close()
	nodeA, _ := client.Dial(ctx, lis.Addr().String(), "example-node-a-token", client.WithCAFile(files.CA))
	defer nodeA.Close()
	v, _ := ctl.CreateVolume(ctx, "pvc-data", 1<<20, datapath.AccessRWO)
	e, _ := ctl.Grant(ctx, v.ID, "node-a")
	fmt.Println("write over TLS:", nodeA.WriteAt(ctx, v.ID, "node-a", e, 0, []byte("secret")))
	// Output:
	// write over TLS: <nil>
}
