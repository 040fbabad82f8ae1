package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/internal/powerfs"
)

// errPowerfsUsage is a powerfs command line that names no backing directory
// or not exactly one mount point.
var errPowerfsUsage = errors.New("powerfs needs --backing DIR and exactly one MOUNTPOINT (both existing directories)")

// powerfsCommand runs the power-loss layer in the foreground: a test tool
// that the chaos harness starts under the datapath's data directory.
func powerfsCommand() *cli.Command {
	return &cli.Command{
		Name:      "powerfs",
		Usage:     "serve BACKING at MOUNTPOINT, keeping unsynced writes in memory only, so that killing this process is a power cut (test tool)",
		ArgsUsage: "MOUNTPOINT",
		Hidden:    true,
		Description: "Every write through MOUNTPOINT stays in this process's memory until the file is fsynced; " +
			"SIGKILL of this process loses it, exactly like RAM at a power cut. Namespace operations (create, rename, unlink) " +
			"reach BACKING at once. SIGTERM unmounts and drops what was pending too. A mount left by a killed layer is " +
			"detached before mounting. Needs root and /dev/fuse.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "backing", Usage: "the directory that holds what was synced"},
		},
		Action: func(c *cli.Context) error {
			if c.String("backing") == "" || c.NArg() != 1 {
				return fmt.Errorf("%w; got --backing %q and %d argument(s)", errPowerfsUsage, c.String("backing"), c.NArg())
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return powerfs.Serve(ctx, c.String("backing"), c.Args().First(), powerfs.Options{}, os.Stdout)
		},
	}
}
