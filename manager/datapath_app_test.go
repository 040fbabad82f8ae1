package manager

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

func TestDatapathApp_FlagsAfterArguments(t *testing.T) {
	if err := cliflags.Check(DatapathApp()); err != nil {
		t.Fatal(err)
	}
}

// TestDatapathApp_Help: the binary's help says what it is, lists its
// commands, shows how to call them and what the exit codes mean.
func TestDatapathApp_Help(t *testing.T) {
	var out strings.Builder
	app := DatapathApp()
	app.Writer, app.ErrWriter = &out, &out
	if err := app.Run([]string{DatapathBinary, "--help"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vigil-datapath - Vigil's datapath volume server", "serve", "status", "clear-failure",
		"fencing epoch", "vigil-datapath serve --data-dir", "Exit codes", "2 bad input"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDatapathApp_BadInput: an unknown command, an unknown flag, a flag's bad
// value, an argument serve does not take and a required flag left out are
// each refused as a usage error (exit code 2) that names what was wrong and
// where to look, and nothing is created.
func TestDatapathApp_BadInput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	tokens := writeFile(t, "tokens", serveTokens)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown command", []string{"serv"}, []string{`unknown command "serv"`, "serve, status, clear-failure", "vigil-datapath --help"}},
		{"unknown flag", []string{"serve", "--data-dir", dir, "--token-file", tokens, "--listne", "127.0.0.1:0"}, []string{"serve:", "-listne", "vigil-datapath serve --help"}},
		{"bad flag value", []string{"serve", "--data-dir", dir, "--token-file", tokens, "--capacity", "lots"}, []string{"serve:", `invalid value "lots" for flag -capacity`}},
		{"bad duration", []string{"status", "--token-file", tokens, "--timeout", "soon"}, []string{"status:", `invalid value "soon" for flag -timeout`}},
		{"argument to serve", []string{"serve", "--data-dir", dir, "--token-file", tokens, "now"}, []string{"serve takes no arguments", `"now"`}},
		{"negative grace", []string{"serve", "--data-dir", dir, "--token-file", tokens, "--shutdown-grace", "-1s"}, []string{"--shutdown-grace -1s: must not be negative"}},
		{"no data dir", []string{"serve", "--token-file", tokens}, []string{`"data-dir"`}},
		{"no volume", []string{"clear-failure", "--token-file", tokens}, []string{"exactly one argument"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			app := DatapathApp()
			app.Writer, app.ErrWriter = &out, &out
			err := app.Run(append([]string{DatapathBinary}, tc.args...))
			if code := cliflags.ExitCode(err); code != 2 {
				t.Fatalf("err = %v, exit code %d; want a usage error, exit code 2", err, code)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q; want it to say %q", err, w)
				}
			}
		})
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("refused input created the data directory: %v", err)
	}
}

// TestDatapathAlias_SaysSoAndRunsTheCommand: `vigil-manager datapath …`
// still runs vigil-datapath's commands for one release, and says in one line
// on stderr which command to run instead; its bad input is refused alike.
func TestDatapathAlias_SaysSoAndRunsTheCommand(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{})
	v, err := srv.Store.CreateVolume("pvc-alias", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	app := App()
	app.Writer, app.ErrWriter = &out, &errOut
	if err := app.Run([]string{"vigil-manager", "datapath", "status", "--addr", srv.Addr, "--token-file", writeFile(t, "ctl", srv.Token+"\n"), "--timeout", "5s"}); err != nil {
		t.Fatalf("vigil-manager datapath status: %v", err)
	}
	if !strings.Contains(out.String(), v.ID) || !strings.Contains(out.String(), "pvc-alias") {
		t.Fatalf("the alias's status lacks the volume:\n%s", out.String())
	}
	want := "vigil-manager datapath is deprecated and goes away in the next release: run `vigil-datapath status` instead\n"
	if errOut.String() != want {
		t.Fatalf("stderr = %q; want the one line %q", errOut.String(), want)
	}

	app = App()
	errOut.Reset()
	app.Writer, app.ErrWriter = &out, &errOut
	err = app.Run([]string{"vigil-manager", "datapath", "serve", "--bogus"})
	if cliflags.ExitCode(err) != 2 || !strings.Contains(err.Error(), "-bogus") || !strings.Contains(err.Error(), "vigil-manager datapath serve --help") {
		t.Fatalf("vigil-manager datapath serve --bogus: %v (exit code %d); want a usage error naming the flag", err, cliflags.ExitCode(err))
	}
	if !strings.Contains(errOut.String(), "run `vigil-datapath serve` instead") {
		t.Fatalf("stderr = %q; want the deprecation line", errOut.String())
	}
}
