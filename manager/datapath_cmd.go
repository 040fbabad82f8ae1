package manager

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// datapathCommand is a placeholder until the work that builds it lands.
func datapathCommand() *cli.Command {
	return &cli.Command{
		Name:   "datapath",
		Usage:  "(not built yet)",
		Hidden: true,
		Action: func(*cli.Context) error { return errors.New("datapath: not built yet") },
	}
}
