package fusedisk

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vigil-storage/vigil/engine-node/fdkeeper"
	"github.com/vigil-storage/vigil/internal/testenv"
)

// The handover test runs servers and a writer as child processes of the test
// binary; childEnv says which part a child plays (see TestMain).
const (
	childEnv   = "VIGIL_TEST_FUSEDISK_CHILD" // "mount", "adopt" or "writer"
	dirEnv     = "VIGIL_TEST_FUSEDISK_DIR"
	backingEnv = "VIGIL_TEST_FUSEDISK_BACKING"
	socketEnv  = "VIGIL_TEST_FUSEDISK_SOCKET"
	stopEnv    = "VIGIL_TEST_FUSEDISK_STOP"
	holdEnv    = "VIGIL_TEST_FUSEDISK_HOLD"
	volumeKey  = "handover"
	recordSize = 4096
	holdFor    = 300 * time.Millisecond
	restartGap = 200 * time.Millisecond
)

// fileBackend keeps the disk in a regular file shared by successive servers.
// While the file hold names exists, a flush never returns: the server holds
// a request it read when it is killed.
type fileBackend struct {
	f    *os.File
	hold string
}

func (b fileBackend) ReadAt(_ context.Context, off int64, n int) ([]byte, error) {
	p := make([]byte, n)
	if _, err := b.f.ReadAt(p, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return p, nil
}
func (b fileBackend) WriteAt(_ context.Context, off int64, p []byte) error {
	_, err := b.f.WriteAt(p, off)
	return err
}
func (b fileBackend) Flush(context.Context) error {
	if _, err := os.Stat(b.hold); b.hold != "" && err == nil {
		select {}
	}
	return b.f.Sync()
}

// runChild plays the part childEnv names and returns the exit code.
func runChild(part string) int {
	var err error
	switch part {
	case "mount", "adopt":
		err = serveChild(part)
	case "writer":
		err = writerChild()
	default:
		err = fmt.Errorf("unknown part %q", part)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, part+":", err)
		return 1
	}
	return 0
}

// serveChild mounts (and deposits with the keeper) or adopts (from the keeper)
// the disk, says "ready", and serves until SIGTERM, when it drains and exits.
func serveChild(part string) error {
	f, err := os.OpenFile(os.Getenv(backingEnv), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	keeper := fdkeeper.Client{Path: os.Getenv(socketEnv)}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	var d *Disk
	if part == "mount" {
		if d, err = Mount(os.Getenv(dirEnv), st.Size(), fileBackend{f, os.Getenv(holdEnv)}, Options{}); err != nil {
			return err
		}
		if err := keeper.Put(volumeKey, d.Fd(), d.Meta()); err != nil {
			return err
		}
	} else {
		var meta Meta
		fd, err := keeper.Get(volumeKey, &meta)
		if err != nil {
			return err
		}
		if d, err = Adopt(fd, meta, fileBackend{f, ""}, Options{}); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	<-term
	d.Stop()
	return nil
}

// writerChild writes and fsyncs numbered records into the disk file until the
// stop file exists, then prints "done LAST MAX_STALL_NS". Any error ends it.
func writerChild() error {
	f, err := os.OpenFile(filepath.Join(os.Getenv(dirEnv), FileName), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	var stall time.Duration
	i := 0
	for ; int64(i+1)*recordSize <= st.Size(); i++ {
		if _, err := os.Stat(os.Getenv(stopEnv)); err == nil {
			break
		}
		start := time.Now()
		if _, err := f.WriteAt(record(i), int64(i)*recordSize); err != nil {
			return fmt.Errorf("write record %d: %w", i, err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("fsync record %d: %w", i, err)
		}
		stall = max(stall, time.Since(start))
		if i == 0 {
			fmt.Println("writing")
		}
	}
	fmt.Println("done", i-1, int64(stall))
	return nil
}

func record(i int) []byte {
	p := make([]byte, recordSize)
	copy(p, fmt.Sprintf("record %08d\n", i))
	return p
}

type child struct {
	cmd   *exec.Cmd
	lines chan string
	errs  *strings.Builder
}

// startChild runs the test binary as part with env and waits for the line want.
func startChild(t *testing.T, part, want string, env []string, attr *syscall.SysProcAttr) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+part), env...)
	cmd.SysProcAttr = attr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 16), errs: &strings.Builder{}}
	cmd.Stderr = c.errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	c.expect(t, want)
	return c
}

func (c *child) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			_ = c.cmd.Wait()
			t.Fatalf("%s: got %q, want %q; its stderr:\n%s", c.cmd.Env[len(os.Environ())], l, prefix, c.errs.String())
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("no %q within 30 s; stderr:\n%s", prefix, c.errs.String())
	}
	return ""
}

// TestDisk_Handover_WriterSeesNoError is the fd keeper's reason to exist: a
// writer in a mount namespace of its own (as a container) writes and fsyncs
// numbered records into the disk while the server process is killed
// (SIGKILL) or stopped (SIGTERM) and a new one adopts the connection from the
// keeper. The writer must see no error, every fsynced record must be in the
// backing file, and the longest write+fsync is reported. Before the SIGKILL
// the server holds an fsync it read for holdFor, so the kill always leaves a
// request read and unanswered, which only FUSE_NOTIFY_RESEND brings to the
// next server; SIGTERM drains instead.
func TestDisk_Handover_WriterSeesNoError(t *testing.T) {
	testenv.RequireNoError(t, "FUSE", Usable())
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) { testHandover(t, sig) })
	}
}

func testHandover(t *testing.T, sig syscall.Signal) {
	tmp := t.TempDir()
	dir, backing := filepath.Join(tmp, "mnt"), filepath.Join(tmp, "backing")
	socket, stop := filepath.Join(tmp, "k.sock"), filepath.Join(tmp, "stop")
	hold := filepath.Join(tmp, "hold")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(backing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, 16<<20); err != nil {
		t.Fatal(err)
	}
	l, err := fdkeeper.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	keeper := fdkeeper.New(nil)
	ctx, cancel := context.WithCancel(context.Background())
	go keeper.Serve(ctx, l)
	t.Cleanup(func() {
		// Unmounting ends the connection although the keeper holds it.
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		cancel()
		keeper.Close()
	})
	env := []string{dirEnv + "=" + dir, backingEnv + "=" + backing, socketEnv + "=" + socket, stopEnv + "=" + stop, holdEnv + "=" + hold}
	first := startChild(t, "mount", "ready", env, nil)
	writer := startChild(t, "writer", "writing", env, &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS})
	// First of the cleanups: a writer stuck on a request nobody answers
	// (the fix broken) cannot even exit until the connection is aborted.
	t.Cleanup(func() { abortConnection(t, dir) })
	time.Sleep(300 * time.Millisecond)
	if sig == syscall.SIGKILL {
		if err := os.WriteFile(hold, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(holdFor)
	}
	if err := first.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if err := first.cmd.Wait(); err != nil && sig == syscall.SIGTERM {
		t.Fatalf("server after SIGTERM: %v; stderr:\n%s", err, first.errs.String())
	}
	time.Sleep(restartGap)
	second := startChild(t, "adopt", "ready", env, nil)
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	done := writer.expect(t, "done")
	if err := writer.cmd.Wait(); err != nil {
		t.Fatalf("writer: %v; stderr:\n%s", err, writer.errs.String())
	}
	var last int
	var stall int64
	if _, err := fmt.Sscanf(done, "done %d %d", &last, &stall); err != nil {
		t.Fatalf("writer said %q: %v", done, err)
	}
	checkRecords(t, backing, last)
	t.Logf("%s: %d records written and fsynced across the handover; longest write+fsync %s (of it %s between the server's end and the next one's start, and before a SIGKILL %s of an fsync held on purpose)",
		sig, last+1, time.Duration(stall), restartGap, holdFor)
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("second server: %v; stderr:\n%s", err, second.errs.String())
	}
}

func checkRecords(t *testing.T, backing string, last int) {
	t.Helper()
	data, err := os.ReadFile(backing)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= last; i++ {
		got := string(data[i*recordSize : i*recordSize+16])
		if want := string(record(i)[:16]); got != want {
			t.Fatalf("record %d of %d: backing file holds %q, want %q", i, last, got, want)
		}
	}
	if last < 10 {
		t.Fatalf("only %d records written: the test proves nothing", last+1)
	}
}

// abortConnection aborts the FUSE connection mounted at dir, through fusectl.
func abortConnection(t *testing.T, dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == dir {
			var major, minor uint32
			if _, err := fmt.Sscanf(f[2], "%d:%d", &major, &minor); err == nil {
				_ = os.WriteFile(fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Mkdev(major, minor)), []byte("1"), 0o200)
			}
		}
	}
}
