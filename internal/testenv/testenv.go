package testenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Environment variables that make a missing prerequisite a failure.
const (
	// RequireAllEnv set to 1 (or true) makes every missing prerequisite fail;
	// 0, false or empty leaves it to CI.
	RequireAllEnv = "VIGIL_REQUIRE_ALL"
	// CIEnv is the variable CI systems set to true.
	CIEnv = "CI"
)

// SkipReportEnv names a file to which Main appends its summary line, so a run
// over many packages can print every package's line at the end (go test
// hides the output of a package that passed).
const SkipReportEnv = "VIGIL_SKIP_REPORT"

// Strict reports whether a missing prerequisite fails: CI is true or 1, or
// RequireAllEnv is 1 or true (case does not matter). A value of RequireAllEnv
// other than 1, true, 0, false or empty is an error that names it.
func Strict() (bool, error) {
	switch v := strings.ToLower(os.Getenv(RequireAllEnv)); v {
	case "1", "true":
		return true, nil
	case "", "0", "false":
	default:
		return false, fmt.Errorf("%s=%q: want 1 or true (missing prerequisites fail), 0, false or empty (they skip)", RequireAllEnv, os.Getenv(RequireAllEnv))
	}
	switch strings.ToLower(os.Getenv(CIEnv)) {
	case "1", "true":
		return true, nil
	}
	return false, nil
}

var (
	mu      sync.Mutex
	skipped = map[string]int{} // what → tests skipped for it
)

// Require does nothing when ok. Otherwise the test needs what (a short name:
// "root", "FUSE", "mkfs.ext4") and the machine lacks it for the reason why: in
// strict mode (see Strict) the test fails, naming both; else it is counted for
// Main's summary and skipped.
func Require(t testing.TB, what string, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	strict, err := Strict()
	switch {
	case err != nil:
		t.Fatalf("needs %s (%s), and: %v", what, why, err)
	case strict:
		t.Fatalf("needs %s: %s (a missing prerequisite fails under %s=true or %s=1)", what, why, CIEnv, RequireAllEnv)
	default:
		count(what)
		t.Skipf("needs %s: %s (set %s=1 to make this a failure)", what, why, RequireAllEnv)
	}
}

func count(what string) {
	mu.Lock()
	skipped[what]++
	mu.Unlock()
}

// MainRequire is Require for a TestMain, before any test runs (a suite whose
// every test needs what): with ok it returns proceed; otherwise it prints why
// and returns exit code 1 in strict mode, or 0 after counting the skip.
func MainRequire(what string, ok bool, why string) (code int, proceed bool) {
	if ok {
		return 0, true
	}
	strict, err := Strict()
	switch {
	case err != nil:
		fmt.Fprintf(os.Stderr, "testenv: needs %s (%s), and: %v\n", what, why, err)
		return 1, false
	case strict:
		fmt.Fprintf(os.Stderr, "testenv: FAIL: needs %s: %s (a missing prerequisite fails under %s=true or %s=1)\n", what, why, CIEnv, RequireAllEnv)
		return 1, false
	}
	count(what)
	fmt.Printf("testenv: skipped every test: needs %s: %s (set %s=1 to make this a failure)\n", what, why, RequireAllEnv)
	return 0, false
}

// RequireNoError is Require(t, what, err == nil, err's text).
func RequireNoError(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		Require(t, what, false, err.Error())
	}
}

// RequireRoot needs the effective user id 0, for why (what root is needed for).
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	Require(t, "root", os.Geteuid() == 0, fmt.Sprintf("running as uid %d; root is needed for %s", os.Geteuid(), why))
}

// RequireTool needs the executable name in PATH; pkg names what provides it.
func RequireTool(t testing.TB, name, pkg string) {
	t.Helper()
	_, err := exec.LookPath(name)
	Require(t, name, err == nil, fmt.Sprintf("%v (install %s)", err, pkg))
}

// Summary is the one line Main prints: how many tests were skipped for which
// missing prerequisite, or "" when none was.
func Summary(pkg string) string {
	mu.Lock()
	defer mu.Unlock()
	if len(skipped) == 0 {
		return ""
	}
	whats := make([]string, 0, len(skipped))
	total := 0
	for w, n := range skipped {
		whats = append(whats, fmt.Sprintf("%s ×%d", w, n))
		total += n
	}
	sort.Strings(whats)
	return fmt.Sprintf("testenv: %s: %d test(s) skipped for missing prerequisites: %s (set %s=1 to make them fail)",
		pkg, total, strings.Join(whats, ", "), RequireAllEnv)
}

// Main runs the package's tests and then prints Summary to stdout and, when
// SkipReportEnv names a file, appends it there. It returns m.Run's code, so a
// TestMain is os.Exit(testenv.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if line := Summary(packageName()); line != "" {
		fmt.Println(line)
		if path := os.Getenv(SkipReportEnv); path != "" {
			if err := appendLine(path, line); err != nil {
				fmt.Fprintf(os.Stderr, "testenv: %s=%s: %v\n", SkipReportEnv, path, err)
			}
		}
	}
	return code
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, line+"\n")
	return errors.Join(err, f.Close())
}

// packageName is the directory of the package under test relative to its
// module's root (go test runs a test binary in its package's directory), or
// the test binary's name when that cannot be told.
func packageName() string {
	wd, err := os.Getwd()
	if err != nil {
		return filepath.Base(os.Args[0])
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if rel, err := filepath.Rel(dir, wd); err == nil {
				return filepath.ToSlash(rel)
			}
		}
		if filepath.Dir(dir) == dir {
			return filepath.Base(os.Args[0])
		}
	}
}
