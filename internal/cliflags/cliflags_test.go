package cliflags

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// testApp is a small tree: a global flag, a command with a value flag and a
// bool flag, and a subcommand under a command with a flag of its own.
func testApp(got *[]string) *cli.App {
	record := func(c *cli.Context) error {
		*got = append(*got, "o="+c.String("o"), "force="+boolStr(c.Bool("force")), "store="+c.String("store"))
		*got = append(*got, c.Args().Slice()...)
		return nil
	}
	return &cli.App{
		Name:  "prog",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "debug"}},
		Commands: []*cli.Command{
			{Name: "get", Aliases: []string{"g"}, Action: record, Flags: []cli.Flag{
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}},
				&cli.BoolFlag{Name: "force", Aliases: []string{"f"}},
			}},
			{Name: "settings", Flags: []cli.Flag{&cli.StringFlag{Name: "store"}}, Subcommands: []*cli.Command{
				{Name: "set", Action: record, Flags: []cli.Flag{&cli.StringFlag{Name: "o"}, &cli.BoolFlag{Name: "force"}}},
			}},
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func TestReorder(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"already in front", "prog get -o json NAME", "prog get -o json NAME"},
		{"value flag after the argument", "prog get NAME -o json", "prog get -o json NAME"},
		{"with equals", "prog get NAME --output=yaml", "prog get --output=yaml NAME"},
		{"bool flag takes no value", "prog get NAME -f OTHER", "prog get -f NAME OTHER"},
		{"alias of the command", "prog g NAME -o json", "prog g -o json NAME"},
		{"global flag after everything", "prog get NAME --debug", "prog --debug get NAME"},
		{"parent's flag after the subcommand", "prog settings set K V --store bolt:x", "prog settings --store bolt:x set K V"},
		{"arguments keep their order", "prog get A -o json B C", "prog get -o json A B C"},
		{"everything after -- is an argument", "prog get A -- -o json", "prog get A -- -o json"},
		{"a dashed argument after the arguments began", "prog settings set K -5", "prog settings set -- K -5"},
		{"an unknown flag before any argument stays for cli", "prog get --bogus NAME", "prog get --bogus NAME"},
		{"help anywhere", "prog get NAME --help", "prog get --help NAME"},
		{"a command name after an argument is an argument", "prog get settings", "prog get settings"},
		{"no arguments", "prog", "prog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sink []string
			got := strings.Join(Reorder(testApp(&sink), strings.Fields(tc.in)), " ")
			if got != tc.want {
				t.Errorf("Reorder(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestRun_ParsesFlagsAfterArguments runs the line through cli itself.
func TestRun_ParsesFlagsAfterArguments(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"prog get NAME -o json --force", []string{"o=json", "force=true", "store=", "NAME"}},
		{"prog settings set K V --store bolt:x -o table", []string{"o=table", "force=false", "store=bolt:x", "K", "V"}},
		{"prog settings set K -5", []string{"o=", "force=false", "store=", "K", "-5"}},
	} {
		var got []string
		app := testApp(&got)
		app.Writer, app.ErrWriter = &bytes.Buffer{}, &bytes.Buffer{}
		if err := Run(app, strings.Fields(tc.in)); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: parsed %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRun_UnknownFlagIsStillAnError: moving flags never hides a typo.
func TestRun_UnknownFlagIsStillAnError(t *testing.T) {
	var got []string
	app := testApp(&got)
	app.Writer, app.ErrWriter = &bytes.Buffer{}, &bytes.Buffer{}
	err := Run(app, strings.Fields("prog get NAME --bogus"))
	if err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("err = %v, want one naming --bogus", err)
	}
	if len(got) != 0 {
		t.Errorf("the command ran with %q", got)
	}
}

func TestCheck(t *testing.T) {
	var sink []string
	if err := Check(testApp(&sink)); err != nil {
		t.Fatal(err)
	}
}
