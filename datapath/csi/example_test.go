package csi_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/csi"
)

// ExampleServer_Serve wires the datapath client into a CSI server on a unix
// socket, as vigil-manager does for --csi-endpoint. Serve returns when the
// context ends.
func ExampleServer_Serve() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	volumes, err := client.Dial(ctx, "127.0.0.1:9600", "secret-token")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer volumes.Close()
	dir, _ := os.MkdirTemp("", "csi")
	defer os.RemoveAll(dir)

	srv := csi.NewServer(volumes)
	go func() {
		<-srv.Ready()
		fmt.Println("serving")
		cancel()
	}()
	if err := srv.Serve(ctx, "unix://"+filepath.Join(dir, "csi.sock")); err != nil {
		fmt.Println(err)
	}
	// Output: serving
}
