// Command vigil-engine-node is Vigil's per-node agent; see package enginenode.
// This main wires the concrete datapath client into the engine.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/vigil-storage/vigil/datapath/client"
	enginenode "github.com/vigil-storage/vigil/engine-node"
)

func dial(ctx context.Context, addr, token string) (enginenode.DatapathClient, error) {
	return client.Dial(ctx, addr, token)
}

func main() {
	if err := enginenode.App(dial).Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "vigil-engine-node:", err)
		os.Exit(1)
	}
}
