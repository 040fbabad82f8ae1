package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// mainChildEnv makes the test binary run main with the arguments after
// "--" (see TestMain): the tests see the real exit code and stderr.
const mainChildEnv = "VIGIL_TEST_DATAPATH_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainChildEnv) != "" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"vigil-datapath"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), mainChildEnv+"=1")
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestMain_ExitCodes: --help exits 0; bad input exits 2 with one line on
// stderr that says what was wrong; a failure that is not the command line's
// (a tokens file that does not exist) exits 1.
func TestMain_ExitCodes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"help", []string{"--help"}, 0, ""},
		{"unknown command", []string{"bogus"}, 2, `vigil-datapath: unknown command "bogus"; the commands are serve, status, clear-failure`},
		{"unknown flag", []string{"serve", "--data-dir", dir, "--bogus"}, 2, "vigil-datapath: serve: flag provided but not defined: -bogus"},
		{"bad flag value", []string{"status", "--token-file", "x", "--timeout", "x"}, 2, `invalid value "x" for flag -timeout`},
		{"required flag", []string{"serve"}, 2, `Required flag "data-dir" not set`},
		{"missing tokens file", []string{"serve", "--data-dir", dir, "--token-file", dir + "/nope"}, 1, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := run(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit code %d, stderr %q; want %d and %q (stdout %q)", code, errOut, tc.code, tc.want, out)
			}
			if tc.code == 0 && !strings.Contains(out, "serve") {
				t.Fatalf("--help: %q", out)
			}
		})
	}
}
