package manager

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/vigil-storage/vigil/settings"
)

const (
	flagLimit = "limit"
	// defaultHistoryLimit is how many changes `settings history` shows unless
	// --limit says otherwise.
	defaultHistoryLimit = 50
	// maxTableValue bounds a value in the history table; json and yaml show it whole.
	maxTableValue = 40
)

// cliActor is who `settings set` and `settings reset` record: the CLI and the OS
// user running it.
func cliActor() settings.Actor {
	return settings.Actor{Source: settings.ActorCLI, Identity: osUser()}
}

// osUser names the user running this process: the login name, else $USER, else
// the numeric uid (a container user without a passwd entry).
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if name := os.Getenv("USER"); name != "" {
		return name
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

func settingsHistoryCommand() *cli.Command {
	return &cli.Command{
		Name:  "history",
		Usage: "show the recorded changes, newest first: time, setting, old -> new (with their sources) and who made them",
		Description: `Every change made through Vigil (the CLI, the API, the UI) is recorded in the
store with the change itself; a running manager also records changes of the
managed overlay (by configmap) and edits of the store made outside Vigil (by
store). The store keeps the last ` + strconv.Itoa(settings.HistoryLimit) + ` changes.`,
		Flags: append(storeFlags(), outputFlag("table, json or yaml"),
			&cli.IntFlag{Name: flagLimit, Value: defaultHistoryLimit,
				Usage: fmt.Sprintf("show at most this many changes, from 1 to %d", settings.HistoryLimit)}),
		Action: func(c *cli.Context) error {
			if err := checkArgs(c, 0, ""); err != nil {
				return err
			}
			format, err := outputFormat(c, false)
			if err != nil {
				return err
			}
			limit := c.Int(flagLimit)
			if limit < 1 || limit > settings.HistoryLimit {
				return fmt.Errorf("invalid --%s %d: allowed: from 1 to %d", flagLimit, limit, settings.HistoryLimit)
			}
			s, closeAll, err := openSettings(c)
			if err != nil {
				return err
			}
			defer closeAll()
			records, err := s.History(c.Context, limit)
			if err != nil {
				return err
			}
			return writeHistory(c.App.Writer, format, records)
		},
	}
}

func writeHistory(w io.Writer, format string, records []settings.ChangeRecord) error {
	if records == nil {
		records = []settings.ChangeRecord{} // [] in json, not null
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(records)
	case "yaml":
		out, err := yaml.Marshal(records)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	if len(records) == 0 {
		_, err := fmt.Fprintln(w, "no changes recorded")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tSETTING\tOLD\tNEW\tBY")
	for _, r := range records {
		by := r.Actor.Source
		if r.Actor.Identity != "" {
			by += " (" + r.Actor.Identity + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s (%s)\t%s (%s)\t%s\n", r.Time.UTC().Format(time.RFC3339), r.Setting,
			tableValue(r.Old), r.OldSource, tableValue(r.New), r.NewSource, by)
	}
	return tw.Flush()
}

// tableValue is v for a table cell: "" shown as "", long values cut.
func tableValue(v string) string {
	if len(v) > maxTableValue {
		return shorten(v, maxTableValue)
	}
	return orEmpty(v)
}
