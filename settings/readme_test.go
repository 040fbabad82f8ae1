package settings_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/settings"
)

var update = flag.Bool("update", false, "rewrite the generated settings table in ../README.md")

const (
	tableBegin = "<!-- settings-table:begin -->\n"
	tableEnd   = "<!-- settings-table:end -->"
)

// TestREADME fails when the README's settings table differs from the
// definitions. `go test ./settings -run TestREADME -update` rewrites it.
func TestREADME(t *testing.T) {
	const path = "../README.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	before, rest, ok1 := strings.Cut(readme, tableBegin)
	current, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the markers %q and %q", path, tableBegin, tableEnd)
	}
	want := settings.MarkdownTable()
	if current == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(before+tableBegin+want+tableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the settings table in %s", path)
		return
	}
	t.Fatalf("the settings table in %s is out of date with the definitions; run\n\tgo test ./settings -run TestREADME -update\nwant:\n%s", path, want)
}
