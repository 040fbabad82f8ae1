// Command vigil-writer is `vigil-sandbox writer` alone, for the writer image:
// the same command (package ledger) in a binary of a few megabytes instead of
// the whole sandbox. The image's entrypoint is `vigil-writer writer`, so a
// container's args are the writer's flags:
//
//	--dir /data --pod-uid $(POD_UID) --node $(NODE_NAME) --ledger /ledger/writes.log
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/internal/cliflags"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

func main() {
	app := &cli.App{
		Name:            "vigil-writer",
		Usage:           "append fsync'd records to a volume and acknowledge each in a ledger (`vigil-writer writer --help`)",
		Version:         vigil.Version,
		HideHelpCommand: true,
		Commands:        []*cli.Command{ledger.Command()},
	}
	if err := cliflags.Run(app, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "vigil-writer:", err)
		os.Exit(1)
	}
}
