// Command vigil-engine-node is Vigil's per-node agent; see package enginenode.
// This main wires the concrete datapath client into the engine.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/vigil-storage/vigil/datapath/client"
	enginenode "github.com/vigil-storage/vigil/engine-node"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

func dial(ctx context.Context, cfg enginenode.DialConfig) (enginenode.DatapathClient, error) {
	return client.Dial(ctx, cfg.Addr, "", clientOptions(cfg)...)
}

// clientOptions turns the engine's datapath flags into client options: the
// token file (read again when it rotates), the other servers, TLS with the CA, or plaintext.
func clientOptions(cfg enginenode.DialConfig) []client.Option {
	opts := []client.Option{client.WithTokenFile(cfg.TokenFile), client.WithServers(cfg.Servers...)}
	switch {
	case cfg.CAFile != "":
		opts = append(opts, client.WithCAFile(cfg.CAFile))
	case cfg.Insecure:
		slog.Warn("datapath client: plaintext (--datapath-insecure): this node's token and data cross the network in the clear", "datapath", cfg.Addr)
		opts = append(opts, client.WithInsecure())
	}
	return opts
}

func main() {
	if err := cliflags.Run(enginenode.ProcessApp(dial), os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "vigil-engine-node:", err)
		os.Exit(1)
	}
}
