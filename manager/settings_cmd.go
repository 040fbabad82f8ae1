package manager

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// settingsCommand is a placeholder until the work that builds it lands.
func settingsCommand() *cli.Command {
	return &cli.Command{
		Name:   "settings",
		Usage:  "(not built yet)",
		Hidden: true,
		Action: func(*cli.Context) error { return errors.New("settings: not built yet") },
	}
}
