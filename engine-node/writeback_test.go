package enginenode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestApp_Run_BadWritebackGuard(t *testing.T) {
	dir := t.TempDir()
	args := runArgs(t, dir, "127.0.0.1:1", "tok")
	for _, v := range []string{"", "on", "WARN", "required", "false"} {
		app := App(testDial)
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		err := app.Run(append(append([]string{}, args...), "--writeback-guard", v))
		if err == nil || !strings.Contains(err.Error(), `--writeback-guard "`+v+`": want warn`) || !strings.Contains(err.Error(), "require") {
			t.Errorf("--writeback-guard %q = %v, want an error naming the value and warn, require, off", v, err)
		}
		if exists(filepath.Join(dir, "state")) {
			t.Fatalf("--writeback-guard %q still created the state directory", v)
		}
	}
}

// TestGuardWriteback_Modes is the specification of --writeback-guard.
func TestGuardWriteback_Modes(t *testing.T) {
	full := WritebackGuard{IOFlusher: true, MemoryLocked: true}
	partial := WritebackGuard{MemoryLocked: true, Missing: []string{"PR_SET_IO_FLUSHER: operation not permitted (needs CAP_SYS_RESOURCE)"}}
	for _, c := range []struct {
		name      string
		mode      string
		guard     *WritebackGuard // nil: the engine runs inside another program
		wantErr   string
		wantWarns int
		wantInfo  bool
		wantCall  bool
	}{
		{"warn, all set", WritebackGuardWarn, &full, "", 0, true, true},
		{"warn, missing", WritebackGuardWarn, &partial, "", 1, false, true},
		{"require, all set", WritebackGuardRequire, &full, "", 0, true, true},
		{"require, missing", WritebackGuardRequire, &partial, "CAP_SYS_RESOURCE", 0, false, true},
		{"off", WritebackGuardOff, &partial, "", 0, false, false},
		{"in-process, warn", WritebackGuardWarn, nil, "", 0, false, false},
		{"in-process, require", WritebackGuardRequire, nil, "inside another program", 0, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			called := false
			var guard func() WritebackGuard
			if c.guard != nil {
				guard = func() WritebackGuard { called = true; return *c.guard }
			}
			err := guardWriteback(c.mode, guard, log)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("got %v, want nil", err)
			case c.wantErr != "" && (!errors.Is(err, ErrWritebackUnguarded) || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("got %v, want ErrWritebackUnguarded naming %q", err, c.wantErr)
			}
			if called != c.wantCall {
				t.Errorf("guard called: %v, want %v", called, c.wantCall)
			}
			if n := strings.Count(logs.String(), "level=WARN"); n != c.wantWarns {
				t.Errorf("%d warnings, want %d:\n%s", n, c.wantWarns, logs.String())
			}
			if c.wantWarns > 0 && !strings.Contains(logs.String(), "CAP_SYS_RESOURCE") {
				t.Errorf("the warning does not name what is missing:\n%s", logs.String())
			}
			if got := strings.Contains(logs.String(), "writeback guard on"); got != c.wantInfo {
				t.Errorf("logged the guard on: %v, want %v:\n%s", got, c.wantInfo, logs.String())
			}
		})
	}
}

// guardHelperEnv makes the test binary a process that runs GuardWriteback
// with a PR_SET_IO_FLUSHER that always succeeds (so the execve that follows
// happens even without CAP_SYS_RESOURCE), counting its images in
// guardRunsEnv, and prints what it got.
const (
	guardHelperEnv = "VIGIL_ENGINE_TEST_GUARD_HELPER"
	guardRunsEnv   = "VIGIL_ENGINE_TEST_GUARD_RUNS"
)

func guardHelper() {
	runs := len(os.Getenv(guardRunsEnv)) + 1
	_ = os.Setenv(guardRunsEnv, strings.Repeat("x", runs))
	setIOFlusher = func(uintptr) error { return nil }
	g := GuardWriteback()
	fmt.Printf("pid=%d runs=%d marker=%q io-flusher=%v missing=%q\n", os.Getpid(), runs, os.Getenv(ioFlusherExecEnv), g.IOFlusher, strings.Join(g.Missing, "; "))
	os.Exit(0)
}

// TestGuardWriteback_ExecutesItselfOnce follows the execve of the I/O
// flusher step: the same process (PID) runs a second image, once, which
// checks the state it inherited (here: not set, since the helper's prctl
// did nothing, so it says it was lost) and hides the marker from children.
func TestGuardWriteback_ExecutesItselfOnce(t *testing.T) {
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), guardHelperEnv+"=1", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("guard helper: %v\n%s", err, out)
	}
	want := fmt.Sprintf("pid=%d runs=2 marker=\"\" io-flusher=false", cmd.Process.Pid)
	if !strings.Contains(string(out), want) || !strings.Contains(string(out), "lost across execve") {
		t.Errorf("guard helper printed %q, want %q (one execve, same process) and the state reported lost", out, want)
	}
}
