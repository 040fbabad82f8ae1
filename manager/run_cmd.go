package manager

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// runCommand is a placeholder until the work that builds it lands.
func runCommand() *cli.Command {
	return &cli.Command{
		Name:   "run",
		Usage:  "(not built yet)",
		Hidden: true,
		Action: func(*cli.Context) error { return errors.New("run: not built yet") },
	}
}
