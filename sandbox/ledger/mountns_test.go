package ledger

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// runCommandEnv makes the test binary the writer command: the tests start it
// as a process of its own, which EnterOwnMountNamespace executes again.
const runCommandEnv = "VIGIL_LEDGER_TEST_RUN_WRITER"

func TestMain(m *testing.M) {
	if os.Getenv(runCommandEnv) == "1" {
		app := &cli.App{Name: "writer-test", Commands: []*cli.Command{Command()}, ExitErrHandler: func(*cli.Context, error) {}}
		if err := app.Run(os.Args); err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(testenv.Main(m))
}

// startWriterProcess runs `writer ARGS...` as a process of its own, with its
// output in log.
func startWriterProcess(t *testing.T, log string, args ...string) *exec.Cmd {
	t.Helper()
	out, err := os.Create(log)
	must(t, err)
	defer out.Close()
	cmd := exec.Command("/proc/self/exe", append([]string{"writer"}, args...)...)
	cmd.Env = append(os.Environ(), runCommandEnv+"=1")
	cmd.Stdout, cmd.Stderr = out, out
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func mountTmpfs(t *testing.T, dir string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
	must(t, unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// TestWriter_OwnMountNamespace: a writer started with --own-mount-namespace
// keeps the volume it started with when the host replaces the bind mount at
// its directory (as a container keeps its private bind), and goes on
// acknowledging records on it; without the option, it would see the new one.
func TestWriter_OwnMountNamespace(t *testing.T) {
	testenv.RequireRoot(t, "mount namespaces and mounts need CAP_SYS_ADMIN")
	dir := t.TempDir()
	// Under a shared mount, as a node's kubelet directory is (Bidirectional
	// propagation): a new namespace's copy would still receive the host's
	// mounts and unmounts there unless it makes its mounts private.
	base := filepath.Join(dir, "base")
	mountTmpfs(t, base)
	must(t, unix.Mount("", base, "", unix.MS_SHARED, ""))
	volA, volB, target := filepath.Join(base, "a"), filepath.Join(base, "b"), filepath.Join(base, "target")
	mountTmpfs(t, volA)
	mountTmpfs(t, volB)
	must(t, os.WriteFile(filepath.Join(volA, "a-marker"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(volB, "b-marker"), nil, 0o644))
	must(t, os.Mkdir(target, 0o755))
	must(t, unix.Mount(volA, target, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })

	ledgerPath := filepath.Join(dir, "ledger")
	w := startWriterProcess(t, filepath.Join(dir, "writer.log"), "--dir", target, "--pod-uid", "u", "--node", "n",
		"--ledger", ledgerPath, "--interval", "10ms", "--own-mount-namespace")
	logOf := func() string { b, _ := os.ReadFile(filepath.Join(dir, "writer.log")); return string(b) }
	waitFor(t, func() bool { acks, _ := ReadLedger(ledgerPath); return len(acks) >= 5 })
	self, err := os.Readlink("/proc/self/ns/mnt")
	must(t, err)
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", w.Process.Pid))
	must(t, err)
	if self == theirs {
		t.Errorf("the writer (pid %d) runs in the test's mount namespace %s, want one of its own", w.Process.Pid, self)
	}

	// The host replaces the bind mount at the target: B instead of A.
	must(t, unix.Unmount(target, unix.MNT_DETACH))
	must(t, unix.Mount(volB, target, "", unix.MS_BIND, ""))
	before, err := ReadLedger(ledgerPath)
	must(t, err)
	waitFor(t, func() bool { acks, _ := ReadLedger(ledgerPath); return len(acks) >= len(before)+10 })

	view := filepath.Join(fmt.Sprintf("/proc/%d/root", w.Process.Pid), target)
	if _, err := os.Stat(filepath.Join(view, "a-marker")); err != nil {
		t.Errorf("the writer's view of %s lacks A's marker after the host's change: %v", target, err)
	}
	if _, err := os.Stat(filepath.Join(view, "b-marker")); err == nil {
		t.Errorf("the writer sees B, the bind mount the host made after it started, at %s: its namespace is not private", target)
	}
	if _, err := os.Stat(filepath.Join(volB, RecordsFile("u"))); err == nil {
		t.Errorf("the writer wrote into B, mounted on the host after it started")
	}
	acks, err := ReadLedger(ledgerPath)
	must(t, err)
	found, err := ReadRecords(filepath.Join(volA, RecordsFile("u")))
	must(t, err)
	if r := Verify(Pod{UID: "u", Node: "n", Acks: acks, Found: found}); !r.OK() {
		t.Errorf("records acknowledged while the host changed its mounts are not all on A: %s\nwriter log:\n%s", r, logOf())
	}
}

func TestWriter_OwnMountNamespace_Bad(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--own-mount-namespace", "--pod-uid", "u", "--node", "n", "--ledger", filepath.Join(dir, "ledger")}, // no --dir
	} {
		log := filepath.Join(dir, "writer.log")
		w := startWriterProcess(t, log, args...)
		done := make(chan error, 1)
		go func() { done <- w.Wait() }()
		select {
		case err := <-done:
			out, _ := os.ReadFile(log)
			if err == nil || !strings.Contains(string(out), "--own-mount-namespace needs --dir") {
				t.Errorf("writer %q: %v, %s; want a refusal naming --dir", args, err, out)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("writer %q still runs", args)
		}
		if _, err := os.Stat(filepath.Join(dir, "ledger")); err == nil {
			t.Errorf("writer %q created its ledger", args)
		}
	}
}
