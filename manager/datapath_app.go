package manager

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

// DatapathBinary is the datapath's own binary (cmd/vigil-datapath).
const DatapathBinary = "vigil-datapath"

// DatapathApp returns the command line application of vigil-datapath, the
// volume server: serve, status, clear-failure. Bad input (an unknown command
// or flag, a flag's bad value, wrong arguments) is a cliflags.UsageError:
// the binary exits with 2 and changes nothing.
//
// The commands' code lives in this package for now because `csi serve` and
// `run` share its flags for reaching the datapath; the manager's own
// `datapath` command (datapathAliasCommand) runs the same commands for one
// release.
func DatapathApp() *cli.App {
	return cliflags.Strict(&cli.App{
		Name:    DatapathBinary,
		Usage:   "Vigil's datapath volume server: volumes, the attachment table with fencing epochs, I/O, heartbeats",
		Version: vigil.Version,
		Description: "vigil-datapath is the \"array\" Vigil's volumes live on. `serve` runs the server: it stores each volume's data\n" +
			"in a file under --data-dir, gives each ReadWriteOnce volume at most one writer node under a fencing epoch, refuses\n" +
			"a fenced node's I/O, and records heartbeats. Callers prove who they are (a tokens file, or ServiceAccount tokens\n" +
			"checked with TokenReview): the controller role (vigil-manager, the CSI controller) creates, grants, fences and\n" +
			"releases; an engine (vigil-engine-node) does I/O and heartbeats as its own node. `status` and `clear-failure`\n" +
			"call a running server with a controller token.\n\n" +
			"Examples:\n" +
			"   vigil-datapath serve --data-dir /var/lib/vigil-datapath --token-file tokens\n" +
			"   vigil-datapath status --token-file controller-token\n" +
			"   vigil-datapath clear-failure vol-0123456789abcdef --token-file controller-token\n\n" +
			"Exit codes: 0 success, 1 a failure (the server could not start, a call failed), 2 bad input on the command line.",
		// Errors are printed once, by main, as one line.
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		Commands:        datapathCommands(),
	})
}

// datapathAliasCommand is `vigil-manager datapath …`: the commands of
// vigil-datapath, kept for one release so that scripts and manifests that
// call them through vigil-manager go on working. Every use says so on
// stderr, in one line that names the command to use instead.
func datapathAliasCommand() *cli.Command {
	c := &cli.Command{
		Name:  "datapath",
		Usage: "deprecated alias of " + DatapathBinary + " (serve, status, clear-failure); removed in the next release",
		Before: func(c *cli.Context) error {
			sub := "COMMAND"
			if c.NArg() > 0 {
				sub = c.Args().First()
			}
			_, err := fmt.Fprintf(c.App.ErrWriter, "vigil-manager datapath is deprecated and goes away in the next release: run `%s %s` instead\n", DatapathBinary, sub)
			return err
		},
		Subcommands: datapathCommands(),
	}
	cliflags.StrictCommands("vigil-manager", []*cli.Command{c})
	return c
}
