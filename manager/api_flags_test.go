package manager

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun_BadAPIFlagsAreRefused(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"cert without key":      {[]string{"--tls-cert-file", "c.pem"}, "--tls-cert-file and --tls-private-key-file go together"},
		"key without cert":      {[]string{"--tls-private-key-file", "k.pem"}, "go together"},
		"open address no TLS":   {[]string{"--listen", "0.0.0.0:9500"}, "is not a loopback address: serve TLS"},
		"all interfaces no TLS": {[]string{"--listen", ":9500"}, "--insecure-listen"},
		"no token source":       {[]string{"--state-dir", ""}, "needed for the API token"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := App().Run(append([]string{"vigil-manager", "run"}, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestAPIOptions_LoadToken_GeneratedOnceThenReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	o := apiOptions{stateDir: dir}
	tok, err := o.loadToken(quietLog())
	if err != nil || len(tok) != 64 {
		t.Fatalf("generate: %q %v", tok, err)
	}
	st, err := os.Stat(filepath.Join(dir, tokenFileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	again, err := o.loadToken(quietLog())
	if err != nil || again != tok {
		t.Fatalf("second start: %q %v, want the same token", again, err)
	}
}

func TestAPIOptions_LoadToken_BadFilesAreRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := map[string]struct {
		file string
		want string
	}{
		"missing": {filepath.Join(dir, "nope"), "no such file"},
		"empty":   {write("empty", "\n"), "the token is empty"},
		"short":   {write("short", "abc\n"), "at least 16"},
		"spaces":  {write("spaces", "abcdefgh ijklmnopq\n"), "one line without spaces"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := apiOptions{tokenFile: tc.file}.loadToken(quietLog())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--api-token-file") {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	tok, err := apiOptions{tokenFile: write("good", "  0123456789abcdef0123\n")}.loadToken(quietLog())
	if err != nil || tok != "0123456789abcdef0123" {
		t.Fatalf("good file: %q %v", tok, err)
	}
}
