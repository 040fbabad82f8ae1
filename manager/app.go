package manager

import (
	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil"
)

// App returns the vigil-manager command line application. Each subcommand lives in
// a file of its own (settings_cmd.go, csi_cmd.go, run_cmd.go); `datapath` is the
// deprecated alias of vigil-datapath (datapath_app.go).
func App() *cli.App {
	return &cli.App{
		Name:    "vigil-manager",
		Usage:   "Vigil's storage manager: settings, the CSI controller service and the node-failure controllers (the datapath volume server is vigil-datapath)",
		Version: vigil.Version,
		// Errors are printed once, by main, as one line.
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		Commands: []*cli.Command{
			settingsCommand(),
			datapathAliasCommand(),
			csiCommand(),
			runCommand(),
			certsCommand(),
		},
	}
}
