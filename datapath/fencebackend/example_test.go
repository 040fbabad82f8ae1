package fencebackend_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/fencebackend"
)

// Example fences a node that holds two volumes and shows the proof: the
// node's rows on both are no longer live.
func Example() {
	dir, _ := os.MkdirTemp("", "fencer-example")
	defer os.RemoveAll(dir)
	store, _ := datapath.Open(dir, datapath.Options{Capacity: 1 << 30})
	defer store.Close()
	tokens, _ := datapath.ParseTokens(strings.NewReader("controller example-controller-token\n"), "example")
	srv, _ := datapath.NewServer(store, tokens)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop(0)

	ctx := context.Background()
	dp, _ := client.Dial(ctx, lis.Addr().String(), "example-controller-token")
	defer dp.Close()
	for _, name := range []string{"pvc-a", "pvc-b"} {
		v, _ := dp.CreateVolume(ctx, name, 1<<20, datapath.AccessRWO)
		_, _ = dp.Grant(ctx, v.ID, "node-a")
	}

	f := fencebackend.New(dp)
	fenced, _ := f.FenceNode(ctx, "node-a")
	again, _ := f.FenceNode(ctx, "node-a")
	grants, _ := f.Grants(ctx, "node-a")
	live := 0
	for _, g := range grants {
		if g.State.Live() {
			live++
		}
	}
	fmt.Printf("%s fenced %d volumes (then %d); live grants left: %d\n", f.Driver(), len(fenced), len(again), live)
	// Output:
	// driver.vigil.io fenced 2 volumes (then 0); live grants left: 0
}
