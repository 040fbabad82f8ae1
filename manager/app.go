package manager

import (
	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil"
)

// App returns the vigil-manager command line application. Each subcommand lives in
// a file of its own (settings_cmd.go, datapath_cmd.go, csi_cmd.go, run_cmd.go).
func App() *cli.App {
	return &cli.App{
		Name:    "vigil-manager",
		Usage:   "Vigil's storage manager: settings, the datapath volume server and the node-failure controllers",
		Version: vigil.Version,
		// Errors are printed once, by main, as one line.
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		Commands: []*cli.Command{
			settingsCommand(),
			datapathCommand(),
			csiCommand(),
			runCommand(),
			certsCommand(),
		},
	}
}
