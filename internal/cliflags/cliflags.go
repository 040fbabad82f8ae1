package cliflags

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// Run runs app with its flags moved in front of the arguments (Reorder).
func Run(app *cli.App, args []string) error {
	return app.Run(Reorder(app, args))
}

// level is one command of the line being read: its flags, its subcommands,
// and the flags found for it so far.
type level struct {
	name     string // empty for the app itself
	flags    []cli.Flag
	commands []*cli.Command
	found    []string
}

// Reorder returns args (program name first) with every flag moved in front of
// the positional arguments of the command that defines it.
func Reorder(app *cli.App, args []string) []string {
	if len(args) == 0 {
		return args
	}
	levels := []*level{{flags: app.Flags, commands: app.Commands}}
	var positional []string
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		// After "--" nothing is a flag (cli drops a "--" typed before any
		// argument and keeps one typed after, as an argument).
		if a == "--" {
			positional = append(positional, rest[i:]...)
			break
		}
		if isFlag(a) {
			at, takes, _ := owner(levels, flagName(a))
			at.found = append(at.found, a)
			if takes && !strings.Contains(a, "=") && i+1 < len(rest) {
				i++
				at.found = append(at.found, rest[i])
			}
			continue
		}
		cur := levels[len(levels)-1]
		if len(positional) == 0 {
			if sub := findCommand(cur.commands, a); sub != nil {
				levels = append(levels, &level{name: a, flags: sub.Flags, commands: sub.Subcommands})
				continue
			}
		}
		positional = append(positional, a)
	}
	out := []string{args[0]}
	for i, l := range levels {
		if i > 0 {
			out = append(out, l.name)
		}
		out = append(out, l.found...)
	}
	// Arguments that start with a dash ("-5") need "--" in front, or cli
	// reads them as flags.
	if len(positional) > 0 && positional[0] != "--" && anyDashed(positional) {
		out = append(out, "--")
	}
	return append(out, positional...)
}

// isFlag reports whether a looks like a flag ("-x", "--name", "--name=v").
// A dash before a digit or a dot is a negative number, an argument.
func isFlag(a string) bool {
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	c := a[1]
	return !(c >= '0' && c <= '9' || c == '.')
}

// flagName is a flag's name without dashes or value.
func flagName(a string) string {
	n := strings.TrimLeft(a, "-")
	if i := strings.IndexByte(n, '='); i >= 0 {
		n = n[:i]
	}
	return n
}

// owner finds the innermost level defining the flag name, whether that flag
// takes a value, and whether any level defines it. Help is a flag of every
// level and version one of the app (cli adds both when it runs). A flag nobody
// defines stays with the innermost command, where cli names it in its error.
func owner(levels []*level, name string) (at *level, takes, known bool) {
	for i := len(levels) - 1; i >= 0; i-- {
		for _, f := range levels[i].flags {
			if hasName(f, name) {
				return levels[i], takesValue(f), true
			}
		}
	}
	switch name {
	case "h", "help":
		return levels[len(levels)-1], false, true
	case "v", "version":
		return levels[0], false, true
	}
	return levels[len(levels)-1], false, false
}

func hasName(f cli.Flag, name string) bool {
	for _, n := range f.Names() {
		if n == name {
			return true
		}
	}
	return false
}

// takesValue reports whether f reads the next argument as its value; a bool
// flag does not.
func takesValue(f cli.Flag) bool {
	if d, ok := f.(cli.DocGenerationFlag); ok {
		return d.TakesValue()
	}
	return true
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// anyDashed reports whether an argument would be read as a flag without "--"
// in front of the arguments.
func anyDashed(positional []string) bool {
	for _, p := range positional {
		if p == "--" {
			return false
		}
		if len(p) > 1 && p[0] == '-' {
			return true
		}
	}
	return false
}

// Check walks every command of app and reports the first flag that Reorder
// would not move in front of an argument typed before it. Each binary's tests
// run it, so that a new command or flag is covered without a new test.
func Check(app *cli.App) error {
	return checkCommands(app, []string{app.Name}, app.Commands)
}

func checkCommands(app *cli.App, path []string, cmds []*cli.Command) error {
	for _, c := range cmds {
		p := append(append([]string(nil), path...), c.Name)
		for _, f := range c.Flags {
			flag := "--" + f.Names()[0]
			line := append(append([]string(nil), p...), "ARG", flag)
			if takesValue(f) {
				line = append(line, "VALUE")
			}
			got := Reorder(app, line)
			want := append(append([]string(nil), p...), flag)
			if takesValue(f) {
				want = append(want, "VALUE")
			}
			want = append(want, "ARG")
			if strings.Join(got, " ") != strings.Join(want, " ") {
				return fmt.Errorf("%s: flag %s after an argument reads as %q, want %q",
					strings.Join(p, " "), flag, got, want)
			}
		}
		if err := checkCommands(app, p, c.Subcommands); err != nil {
			return err
		}
	}
	return nil
}
