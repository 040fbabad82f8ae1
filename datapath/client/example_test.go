package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
)

// Example shows the life of an RWO volume: a node is granted it, writes, is
// fenced, and its late write is refused while the new node reads the data.
func Example() {
	dir, _ := os.MkdirTemp("", "datapath-example")
	defer os.RemoveAll(dir)
	store, _ := datapath.Open(dir, datapath.Options{Capacity: 1 << 30})
	defer store.Close()
	srv, _ := datapath.NewServer(store, "example-token")
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop(0)

	ctx := context.Background()
	c, _ := client.Dial(ctx, lis.Addr().String(), "example-token")
	defer c.Close()
	v, _ := c.CreateVolume(ctx, "pvc-data", 1<<20, datapath.AccessRWO)
	old, _ := c.Grant(ctx, v.ID, "node-a")
	_ = c.WriteAt(ctx, v.ID, "node-a", old, 0, []byte("hello"))

	// node-a stops answering: fence it, then hand the volume to node-b.
	fenced, _ := c.Fence(ctx, v.ID, "node-a")
	err := c.WriteAt(ctx, v.ID, "node-a", old, 0, []byte("zombie"))
	fmt.Println("zombie write refused:", errors.Is(err, datapath.ErrFenced))
	epoch, _ := c.Grant(ctx, v.ID, "node-b")
	p, _ := c.ReadAt(ctx, v.ID, "node-b", epoch, 0, 5)
	fmt.Printf("node-b reads %q; epochs %d < %d < %d\n", p, old, fenced, epoch)
	// Output:
	// zombie write refused: true
	// node-b reads "hello"; epochs 1 < 2 < 3
}

// ExampleWithBulk sends writes over gRPC instead of the bulk channel (for
// comparison, or through a proxy that carries only HTTP/2).
func ExampleWithBulk() {
	dir, _ := os.MkdirTemp("", "datapath-example")
	defer os.RemoveAll(dir)
	store, _ := datapath.Open(dir, datapath.Options{Capacity: 1 << 30})
	defer store.Close()
	srv, _ := datapath.NewServer(store, "example-token")
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop(0)

	ctx := context.Background()
	c, _ := client.Dial(ctx, lis.Addr().String(), "example-token", client.WithBulk(false))
	defer c.Close()
	v, _ := c.CreateVolume(ctx, "pvc-data", 1<<20, datapath.AccessRWO)
	e, _ := c.Grant(ctx, v.ID, "node-a")
	fmt.Println("write:", c.WriteAt(ctx, v.ID, "node-a", e, 0, []byte("over gRPC")))
	// Output:
	// write: <nil>
}

// ExampleClient_FenceNode fences every volume a dead node holds with one call
// and reads the node table the manager's connectivity check uses; a node
// that stops on purpose announces it with Leave.
func ExampleClient_FenceNode() {
	dir, _ := os.MkdirTemp("", "datapath-example")
	defer os.RemoveAll(dir)
	store, _ := datapath.Open(dir, datapath.Options{Capacity: 1 << 30})
	defer store.Close()
	srv, _ := datapath.NewServer(store, "example-token")
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop(0)

	ctx := context.Background()
	c, _ := client.Dial(ctx, lis.Addr().String(), "example-token")
	defer c.Close()
	for _, name := range []string{"pvc-a", "pvc-b", "pvc-c"} {
		v, _ := c.CreateVolume(ctx, name, 1<<20, datapath.AccessRWO)
		_, _ = c.Grant(ctx, v.ID, "node-a")
	}
	_ = c.Heartbeat(ctx, "node-b")
	_, _ = c.Leave(ctx, "node-b", 30*time.Second) // node-b's engine restarts on purpose

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
