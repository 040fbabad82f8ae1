package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// outcome is a testing.TB that records Fatalf and Skipf instead of stopping.
type outcome struct {
	testing.TB
	fatal, skip string
}

func (o *outcome) Helper()                      {}
func (o *outcome) Fatalf(f string, args ...any) { o.fatal = sprintf(f, args...) }
func (o *outcome) Skipf(f string, args ...any)  { o.skip = sprintf(f, args...) }

func resetCounts(t *testing.T) {
	mu.Lock()
	saved := skipped
	skipped = map[string]int{}
	mu.Unlock()
	t.Cleanup(func() { mu.Lock(); skipped = saved; mu.Unlock() })
}

func setMode(t *testing.T, ci, requireAll string) {
	t.Setenv(CIEnv, ci)
	t.Setenv(RequireAllEnv, requireAll)
}

func TestRequire_Present_NothingHappens(t *testing.T) {
	resetCounts(t)
	setMode(t, "true", "1")
	o := &outcome{TB: t}
	Require(o, "FUSE", true, "unused")
	if o.fatal != "" || o.skip != "" || Summary("p") != "" {
		t.Fatalf("fatal %q, skip %q, summary %q; want nothing", o.fatal, o.skip, Summary("p"))
	}
}

func TestRequire_Missing_FailsInStrictModes(t *testing.T) {
	for _, c := range []struct{ name, ci, all string }{
		{"CI=true", "true", ""}, {"CI=1", "1", ""}, {"VIGIL_REQUIRE_ALL=1", "", "1"}, {"VIGIL_REQUIRE_ALL=TRUE", "false", "TRUE"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resetCounts(t)
			setMode(t, c.ci, c.all)
			o := &outcome{TB: t}
			Require(o, "FUSE", false, "open /dev/fuse: no such file")
			if !strings.Contains(o.fatal, "needs FUSE: open /dev/fuse: no such file") || o.skip != "" {
				t.Fatalf("fatal %q, skip %q; want a failure naming FUSE and why", o.fatal, o.skip)
			}
			if Summary("p") != "" {
				t.Fatalf("a failure was counted as a skip: %q", Summary("p"))
			}
		})
	}
}

func TestRequire_Missing_SkipsAndCountsOutsideCI(t *testing.T) {
	resetCounts(t)
	setMode(t, "", "0")
	for _, what := range []string{"FUSE", "root", "FUSE"} {
		o := &outcome{TB: t}
		Require(o, what, false, "absent")
		if o.fatal != "" || !strings.Contains(o.skip, "needs "+what+": absent") || !strings.Contains(o.skip, RequireAllEnv+"=1") {
			t.Fatalf("fatal %q, skip %q; want a skip naming %s and how to make it fail", o.fatal, o.skip, what)
		}
	}
	want := "testenv: engine-node: 3 test(s) skipped for missing prerequisites: FUSE ×2, root ×1 (set VIGIL_REQUIRE_ALL=1 to make them fail)"
	if got := Summary("engine-node"); got != want {
		t.Fatalf("summary\n got %q\nwant %q", got, want)
	}
}

func TestRequire_BadRequireAllValue_FailsNamingIt(t *testing.T) {
	resetCounts(t)
	setMode(t, "", "yes")
	o := &outcome{TB: t}
	Require(o, "FUSE", false, "absent")
	if !strings.Contains(o.fatal, `VIGIL_REQUIRE_ALL="yes"`) || !strings.Contains(o.fatal, "want 1 or true") || o.skip != "" {
		t.Fatalf("fatal %q, skip %q; want a failure naming the bad value and what is allowed", o.fatal, o.skip)
	}
}

func TestMainRequire_Modes(t *testing.T) {
	cases := []struct {
		name, ci, all string
		ok            bool
		code          int
		proceed       bool
	}{
		{"present", "true", "", true, 0, true},
		{"missing under CI", "true", "", false, 1, false},
		{"missing with VIGIL_REQUIRE_ALL", "", "1", false, 1, false},
		{"missing, bad VIGIL_REQUIRE_ALL", "", "2", false, 1, false},
		{"missing outside CI", "", "", false, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resetCounts(t)
			setMode(t, c.ci, c.all)
			code, proceed := MainRequire("root", c.ok, "uid 1000")
			if code != c.code || proceed != c.proceed {
				t.Fatalf("MainRequire = %d, %t; want %d, %t", code, proceed, c.code, c.proceed)
			}
			if counted := Summary("p") != ""; counted != (c.code == 0 && !c.proceed) {
				t.Fatalf("counted as skipped: %t (summary %q)", counted, Summary("p"))
			}
		})
	}
}

func TestRequireTool_Missing_NamesToolAndPackage(t *testing.T) {
	resetCounts(t)
	setMode(t, "", "")
	t.Setenv("PATH", t.TempDir())
	o := &outcome{TB: t}
	RequireTool(o, "mkfs.ext4", "e2fsprogs")
	if !strings.Contains(o.skip, "needs mkfs.ext4") || !strings.Contains(o.skip, "install e2fsprogs") {
		t.Fatalf("skip %q", o.skip)
	}
}

func TestAppendLine_Accumulates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report")
	for _, l := range []string{"one", "two"} {
		if err := appendLine(path, l); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "one\ntwo\n" {
		t.Fatalf("report = %q", b)
	}
}

func TestPackageName_RelativeToModule(t *testing.T) {
	if got := packageName(); got != "internal/testenv" {
		t.Fatalf("packageName() = %q, want internal/testenv", got)
	}
}

func sprintf(f string, args ...any) string { return fmt.Sprintf(f, args...) }
