package cliflags

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// UsageError is bad input on the command line (an unknown command or flag, a
// flag's bad value, a wrong number of arguments): the binary exits with code
// 2 and changes nothing. Other errors exit with 1.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with the formatted message.
func Usagef(format string, args ...any) error {
	return UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitCode is the exit code for err: 0 for nil, 2 for a UsageError or a
// required flag left out, 1 for any other error.
func ExitCode(err error) int {
	var u UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &u), requiredFlagMissing(err):
		return 2
	}
	return 1
}

// requiredFlagMissing recognises cli's error for a required flag left out. Its
// type is unexported and it does not pass through OnUsageError, so its text
// is all there is to go by ("Required flag \"x\" not set", "Required flags
// \"x, y\" not set").
func requiredFlagMissing(err error) bool {
	return strings.HasPrefix(err.Error(), "Required flag")
}

// Strict makes app report bad input as UsageError, in one line that names
// what was wrong and what is allowed, instead of printing its help and
// returning a generic error: a flag cli cannot parse, an unknown command at
// the top or under a command with subcommands. It returns app.
func Strict(app *cli.App) *cli.App {
	app.OnUsageError = onUsageError("", app.Name)
	if app.Action == nil {
		app.Action = unknownCommand("", app.Name, app.Commands)
	}
	StrictCommands(app.Name, app.Commands)
	return app
}

// StrictCommands does Strict's work for cmds (and their subcommands) only;
// path is the line that leads to them (the app's name, the commands above).
func StrictCommands(path string, cmds []*cli.Command) {
	for _, c := range cmds {
		p := path + " " + c.Name
		c.OnUsageError = onUsageError(c.Name+": ", p)
		if len(c.Subcommands) > 0 && c.Action == nil {
			c.Action = unknownCommand(c.Name+": ", p, c.Subcommands)
		}
		StrictCommands(p, c.Subcommands)
	}
}

func onUsageError(prefix, path string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return Usagef("%s%v (see %s --help)", prefix, err, path)
	}
}

// unknownCommand is the action of a command that only holds subcommands:
// without arguments it shows the help, with one it refuses it and lists
// the commands there are.
func unknownCommand(prefix, path string, cmds []*cli.Command) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 {
			return cli.ShowSubcommandHelp(c)
		}
		var names []string
		for _, sub := range cmds {
			if !sub.Hidden {
				names = append(names, sub.Name)
			}
		}
		return Usagef("%sunknown command %q; the commands are %s (see %s --help)",
			prefix, c.Args().First(), strings.Join(names, ", "), path)
	}
}
