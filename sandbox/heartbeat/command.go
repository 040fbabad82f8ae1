package heartbeat

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	dpclient "github.com/vigil-storage/vigil/datapath/client"
)

// Command is the hidden `heartbeat` subcommand of bin/vigil-sandbox: Run for
// the nodes of --nodes (default VIGIL_NODES, which the scale sandbox sets for
// a rack's processes, else every node of --node-tokens-file) until SIGTERM or
// SIGINT, each node's heartbeats sent with its own token over TLS.
func Command() *cli.Command {
	return &cli.Command{
		Name:   "heartbeat",
		Usage:  "heartbeat a rack's nodes to the datapath, standing in for their engines (scale sandbox)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "datapath", Usage: "datapath address, host:port"},
			&cli.StringFlag{Name: "node-tokens-file", Usage: "the nodes' datapath tokens, a line `node NODE TOKEN` each"},
			&cli.StringFlag{Name: "ca-file", Usage: "CA certificate that verifies the datapath's TLS certificate"},
			&cli.StringFlag{Name: "nodes", EnvVars: []string{"VIGIL_NODES"}, Usage: "comma-separated node names (default: every node of --node-tokens-file)"},
			&cli.DurationFlag{Name: "interval", Usage: "time between two rounds (default 1s)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 || c.String("datapath") == "" || c.String("node-tokens-file") == "" || c.String("ca-file") == "" {
				return fmt.Errorf("%w: heartbeat needs --datapath, --node-tokens-file and --ca-file and takes no arguments", ErrBadConfig)
			}
			tokens, err := ReadNodeTokens(c.String("node-tokens-file"))
			if err != nil {
				return err
			}
			nodes, err := nodesOf(c.String("nodes"), tokens, c.String("node-tokens-file"))
			if err != nil {
				return err
			}
			cfg, err := Config{Client: noClient{}, Nodes: nodes, Interval: c.Duration("interval")}.withDefaults()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			clients := PerNode{}
			for _, n := range nodes {
				client, err := dpclient.Dial(ctx, c.String("datapath"), tokens[n], dpclient.WithCAFile(c.String("ca-file")),
					dpclient.WithRetries(0), dpclient.WithTimeout(cfg.Interval), dpclient.WithBulk(false))
				if err != nil {
					return err
				}
				defer client.Close()
				clients[n] = client
			}
			cfg.Client = clients
			cfg.Logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
			return Run(ctx, cfg)
		},
	}
}

// nodesOf is the nodes to heartbeat: those of list (comma-separated), each
// with a token in tokens, or, when list is empty, every node of tokens.
func nodesOf(list string, tokens map[string]string, file string) ([]string, error) {
	if list == "" {
		nodes := make([]string, 0, len(tokens))
		for n := range tokens {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		return nodes, nil
	}
	nodes := strings.Split(list, ",")
	for _, n := range nodes {
		if _, ok := tokens[n]; !ok {
			return nil, fmt.Errorf("%w: node %q has no token in %s; want a line `node %s TOKEN` for every node of --nodes",
				ErrBadConfig, n, file, n)
		}
	}
	return nodes, nil
}

// noClient stands in for the client while the flags are checked.
type noClient struct{}

func (noClient) Heartbeat(context.Context, string) error { return nil }
