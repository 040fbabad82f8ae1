package heartbeat

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
)

// Command is the hidden `heartbeat` subcommand of bin/vigil-sandbox: Run for
// the nodes of --nodes (default VIGIL_NODES, which the scale sandbox sets for
// a rack's processes) until SIGTERM or SIGINT.
func Command() *cli.Command {
	return &cli.Command{
		Name:   "heartbeat",
		Usage:  "heartbeat a rack's nodes to the datapath, standing in for their engines (scale sandbox)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "datapath", Usage: "datapath address, host:port"},
			&cli.StringFlag{Name: "token-file", Usage: "file holding the datapath token"},
			&cli.StringFlag{Name: "nodes", EnvVars: []string{"VIGIL_NODES"}, Usage: "comma-separated node names"},
			&cli.DurationFlag{Name: "interval", Usage: "time between two rounds (default 1s)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 || c.String("datapath") == "" || c.String("token-file") == "" {
				return fmt.Errorf("%w: heartbeat needs --datapath and --token-file and takes no arguments", ErrBadConfig)
			}
			var nodes []string
			if s := c.String("nodes"); s != "" {
				nodes = strings.Split(s, ",")
			}
			cfg, err := Config{Client: noClient{}, Nodes: nodes, Interval: c.Duration("interval")}.withDefaults()
			if err != nil {
				return err
			}
			tok, err := datapath.ReadTokenFile(c.String("token-file"))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			client, err := dpclient.Dial(ctx, c.String("datapath"), tok, dpclient.WithRetries(0), dpclient.WithTimeout(cfg.Interval))
			if err != nil {
				return err
			}
			defer client.Close()
			cfg.Client = client
			cfg.Logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
			return Run(ctx, cfg)
		},
	}
}

// noClient stands in for the client while the flags are checked.
type noClient struct{}

func (noClient) Heartbeat(context.Context, string) error { return nil }
