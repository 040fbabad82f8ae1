package ledger

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

// Command is the hidden `writer` subcommand of bin/vigil-sandbox: Run until
// SIGTERM or SIGINT. The chaos suite starts it on a pod's node (RunOnNode):
//
//	vigil-sandbox writer --dir TARGET-PATH --pod-uid UID --ledger FILE [--own-mount-namespace]
//
// --node defaults to VIGIL_NODE, which the sandbox sets for a node's processes.
func Command() *cli.Command {
	return &cli.Command{
		Name:   "writer",
		Usage:  "append fsync'd records to a pod's volume and acknowledge each in a ledger (chaos suite)",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "dir", Usage: "root of the pod's volume (its target path)"},
			&cli.StringFlag{Name: "pod-uid", Usage: "UID of the pod the writer stands for"},
			&cli.StringFlag{Name: "node", EnvVars: []string{"VIGIL_NODE"}, Usage: "node name written in each record"},
			&cli.StringFlag{Name: "ledger", Usage: "ledger file on the host (appended to)"},
			&cli.DurationFlag{Name: "interval", Usage: "time between records (default 100ms)"},
			&cli.BoolFlag{Name: "require-mount", Value: true,
				Usage: "open the records file only while --dir is a mount point (as a container sees its volume)"},
			&cli.BoolFlag{Name: "own-mount-namespace",
				Usage: "run in a mount namespace of its own with a private bind of --dir made at start, as a container: " +
					"mounts changed on the host at --dir later are not seen, a dead mount stays an error (needs CAP_SYS_ADMIN)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("%w: writer takes no arguments, got %q", ErrBadConfig, c.Args().Slice())
			}
			if c.Bool("own-mount-namespace") {
				if c.String("dir") == "" {
					return fmt.Errorf("%w: --own-mount-namespace needs --dir", ErrBadConfig)
				}
				if err := EnterOwnMountNamespace(c.String("dir")); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return Run(ctx, Config{Dir: c.String("dir"), PodUID: c.String("pod-uid"), Node: c.String("node"),
				Ledger: c.String("ledger"), Interval: c.Duration("interval"), RequireMount: c.Bool("require-mount"),
				Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
		},
	}
}
