package manager

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/settings"
)

// settingsCommand is `vigil-manager settings`: list, get, set, reset and history.
func settingsCommand() *cli.Command {
	return &cli.Command{
		Name:  "settings",
		Usage: "show and change Vigil's settings",
		Description: `Settings are kept in a store: a bolt file (the default, ` + settings.DefaultBoltPath() + `)
or a Kubernetes ConfigMap with one key per setting. Choose it with --store or
` + settings.StoreEnv + `. A managed overlay directory (--settings-dir, usually a mounted
ConfigMap) overrides the store: a setting with a file there is locked, and set or
reset on it is refused, naming the file to change instead. Every change is
recorded in the store with its time, who made it and old -> new; history shows
them.

Every value is validated before anything is written: a bad value, an unknown
setting, a managed setting or an unreachable store exits non-zero with one line on
stderr and changes nothing. Flags may be given anywhere on the line, before or
after the arguments (settings get NAME -o json).`,
		Flags: storeFlags(),
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return fmt.Errorf("unknown settings command %q; want list, get, set, reset or history", c.Args().First())
			}
			return cli.ShowSubcommandHelp(c)
		},
		Subcommands: []*cli.Command{
			settingsListCommand(),
			settingsGetCommand(),
			settingsSetCommand(),
			settingsResetCommand(),
			settingsHistoryCommand(),
		},
	}
}

func settingsListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "show every setting: name, value, default and source (default, store or managed)",
		Flags: append(storeFlags(), outputFlag("table, json or yaml")),
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, ""); err != nil {
				return err
			}
			format, err := outputFormat(c, false)
			if err != nil {
				return err
			}
			s, closeAll, err := openSettings(c)
			if err != nil {
				return err
			}
			defer closeAll()
			return writeEntries(c.App.Writer, format, s.List(), s.Problems()...)
		},
	}
}

func settingsGetCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "show one setting",
		ArgsUsage: "NAME",
		Flags:     append(storeFlags(), outputFlag("table, json, yaml or value (the value alone)")),
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 1, "NAME"); err != nil {
				return err
			}
			format, err := outputFormat(c, true)
			if err != nil {
				return err
			}
			name := c.Args().Get(0)
			if _, err := settings.Lookup(name); err != nil {
				return err
			}
			s, closeAll, err := openSettings(c)
			if err != nil {
				return err
			}
			defer closeAll()
			e, err := s.Get(name)
			if err != nil {
				return err
			}
			if format == "value" {
				_, err := fmt.Fprintln(c.App.Writer, e.Value)
				return err
			}
			return writeEntries(c.App.Writer, format, []settings.Entry{e})
		},
	}
}

func settingsSetCommand() *cli.Command {
	return &cli.Command{
		Name:        "set",
		Usage:       "validate VALUE and store it as the value of setting NAME",
		ArgsUsage:   "NAME VALUE",
		Description: "Settings and the values they accept:\n\n" + settingsCatalog(),
		Flags:       storeFlags(),
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 2, "NAME VALUE"); err != nil {
				return err
			}
			name, value := c.Args().Get(0), c.Args().Get(1)
			// Validate before touching any store: a bad value writes nothing.
			if _, err := settings.ParseValue(name, value); err != nil {
				return err
			}
			s, closeAll, err := openSettings(c)
			if err != nil {
				return err
			}
			defer closeAll()
			before, _ := s.Get(name)
			if err := s.SetAs(c.Context, name, value, cliActor()); err != nil {
				return err
			}
			after, _ := s.Get(name)
			_, err = fmt.Fprintf(c.App.Writer, "%s = %s (was %s, from %s)\n", name, orEmpty(after.Value), orEmpty(before.Value), before.Source)
			return err
		},
	}
}

func settingsResetCommand() *cli.Command {
	return &cli.Command{
		Name:      "reset",
		Usage:     "remove the stored value of setting NAME, so its default applies",
		ArgsUsage: "NAME",
		Flags:     storeFlags(),
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 1, "NAME"); err != nil {
				return err
			}
			name := c.Args().Get(0)
			if _, err := settings.Lookup(name); err != nil {
				return err
			}
			s, closeAll, err := openSettings(c)
			if err != nil {
				return err
			}
			defer closeAll()
			if err := s.ResetAs(c.Context, name, cliActor()); err != nil {
				return err
			}
			e, _ := s.Get(name)
			_, err = fmt.Fprintf(c.App.Writer, "%s = %s (default)\n", name, e.Value)
			return err
		},
	}
}

// checkArgs requires exactly n arguments.
func checkArgs(c *cli.Context, n int, usage string) error {
	if c.Args().Len() == n {
		return nil
	}
	cmd := "settings " + c.Command.Name
	if n == 0 {
		return fmt.Errorf("%s takes no arguments, got %q", cmd, c.Args().Slice())
	}
	return fmt.Errorf("%s takes %s, got %d argument(s) %q", cmd, usage, c.Args().Len(), c.Args().Slice())
}

// settingsCatalog lists every setting and what it accepts, for `set --help`.
func settingsCatalog() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, d := range settings.Definitions() {
		def := d.Default
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "   %s\t%s (default %s)\n", d.Name, d.Allowed(), def)
	}
	_ = tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}
