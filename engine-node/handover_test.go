package enginenode

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/engine-node/fdkeeper"
	"github.com/vigil-storage/vigil/engine-node/loopdev"
)

// writerEnv makes the test binary the handover test's writer: it writes and
// fsyncs numbered records into the file it names (see runWriterChild).
const writerEnv = "VIGIL_TEST_ENGINE_WRITER"

const recordLen = 4096

func handoverRecord(i int) []byte {
	p := make([]byte, recordLen)
	copy(p, fmt.Sprintf("record %08d\n", i))
	return p
}

// runWriterChild writes and fsyncs records into path until path+".stop"
// exists, then prints "done LAST". On SIGUSR1 it prints "max NS", the
// longest write+fsync since the last SIGUSR1. Any error ends it with 1.
func runWriterChild(path string) int {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	var stall time.Duration
	i := 0
	for ; ; i++ {
		if _, err := os.Stat(path + ".stop"); err == nil {
			break
		}
		select {
		case <-usr1:
			fmt.Println("max", int64(stall))
			stall = 0
		default:
		}
		start := time.Now()
		if _, err := f.WriteAt(handoverRecord(i), int64(i)*recordLen); err != nil {
			fmt.Fprintf(os.Stderr, "write record %d: %v\n", i, err)
			return 1
		}
		if err := f.Sync(); err != nil {
			fmt.Fprintf(os.Stderr, "fsync record %d: %v\n", i, err)
			return 1
		}
		stall = max(stall, time.Since(start))
		if i == 0 {
			fmt.Println("writing")
		}
	}
	fmt.Println("done", i-1)
	return 0
}

// flagValue is the value of flag in args.
func flagValue(args []string, flag string) string {
	for i := range args[:len(args)-1] {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

// TestApp_Run_RestartKeepsVolumesServed runs real engine processes, a real
// datapath and an fd keeper: a volume is staged (ext4 on a loop device over
// the FUSE disk), a writer in a mount namespace of its own (as a container)
// writes and fsyncs numbered records into a file on it, and the engine is
// killed (SIGKILL) and started again, then stopped (SIGTERM) and started
// again. The writer must see no error, the new engines must adopt the kept
// connection instead of rebuilding the stack, and every fsynced record must
// be on the datapath (read back through a fresh stack). The longest
// write+fsync across each restart is reported.
func TestApp_Run_RestartKeepsVolumesServed(t *testing.T) {
	requireRealStack(t)
	ctx := context.Background()
	roles, srv := startRealDatapathServer(t)
	vol, err := roles.CreateVolume(ctx, "pvc-handover", testSize, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := roles.Grant(ctx, vol.ID, "node-h")
	if err != nil {
		t.Fatal(err)
	}
	dp, err := client.Dial(ctx, srv.Addr, srv.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	args := engineArgs(t, srv, "node-h")
	stateDir := flagValue(args, "--state-dir")
	sock := filepath.Join(filepath.Dir(stateDir), "keeper.sock")
	args = append(args, "--fd-keeper-socket", sock, "--graceful-leave", "0")
	l, err := fdkeeper.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	keeper := fdkeeper.New(quiet)
	kctx, stopKeeper := context.WithCancel(ctx)
	go keeper.Serve(kctx, l)
	t.Cleanup(func() { stopKeeper(); keeper.Close() })
	t.Cleanup(func() { tearDownLeftovers(t, stateDir) }) // after the engines' kills

	engine, logs := startLoggedEngine(t, args, "engine-node starting")
	node := nodeClient(t, flagValue(args, "--csi-endpoint"))
	staging := filepath.Join(filepath.Dir(stateDir), "staging")
	if _, err := node.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
		t.Fatalf("stage: %v\n%s", err, logs)
	}
	if keeper.Len() != 1 {
		t.Fatalf("after the stage the keeper holds %d connections, want 1\n%s", keeper.Len(), logs)
	}
	writer := startWriter(t, filepath.Join(staging, "records"))
	t.Cleanup(func() { abortDisks(stateDir) }) // first: a stuck writer exits only then

	stalls := map[string]time.Duration{}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		time.Sleep(300 * time.Millisecond)
		if err := engine.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if err := engine.Wait(); err != nil && sig == syscall.SIGTERM {
			t.Fatalf("engine after SIGTERM: %v\n%s", err, logs)
		}
		engine, logs = startLoggedEngine(t, args, "engine-node starting")
		if !strings.Contains(logs.String(), "adopted the volume's FUSE connection") {
			t.Fatalf("after %s the new engine did not adopt the kept connection:\n%s", sig, logs)
		}
		time.Sleep(300 * time.Millisecond)
		if err := writer.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		var ns int64
		if _, err := fmt.Sscanf(writer.expect(t, "max"), "max %d", &ns); err != nil {
			t.Fatal(err)
		}
		stalls[sig.String()] = time.Duration(ns)
	}
	if err := os.WriteFile(filepath.Join(staging, "records.stop"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var last int
	if _, err := fmt.Sscanf(writer.expect(t, "done"), "done %d", &last); err != nil {
		t.Fatal(err)
	}
	if err := writer.cmd.Wait(); err != nil {
		t.Fatalf("writer: %v: %s", err, writer.errs)
	}
	// Read back through a fresh stack: the datapath holds every record.
	unstage := &csi.NodeUnstageVolumeRequest{VolumeId: vol.ID, StagingTargetPath: staging}
	if _, err := node.NodeUnstageVolume(ctx, unstage); err != nil {
		t.Fatalf("unstage: %v\n%s", err, logs)
	}
	if keeper.Len() != 0 {
		t.Fatalf("after the unstage the keeper holds %d connections, want none", keeper.Len())
	}
	if _, err := node.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
		t.Fatalf("stage again: %v\n%s", err, logs)
	}
	data, err := os.ReadFile(filepath.Join(staging, "records"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.NodeUnstageVolume(ctx, unstage); err != nil {
		t.Fatalf("unstage: %v\n%s", err, logs)
	}
	for i := 0; i <= last; i++ {
		if got, want := string(data[i*recordLen:i*recordLen+16]), string(handoverRecord(i)[:16]); got != want {
			t.Fatalf("record %d of %d reads %q, want %q", i, last, got, want)
		}
	}
	if last < 10 {
		t.Fatalf("only %d records: the test proves nothing", last+1)
	}
	t.Logf("%d records fsynced across an engine SIGKILL and a SIGTERM; longest write+fsync across the SIGKILL restart %s, across the SIGTERM restart %s",
		last+1, stalls["killed"], stalls["terminated"])
}

// syncBuffer is a bytes.Buffer safe to read while a child writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startLoggedEngine runs the engine as a child process with args and waits
// until its log says ready (it logs that after Recover).
func startLoggedEngine(t *testing.T, args []string, ready string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestApp_Child$")
	cmd.Env = append(os.Environ(), engineChildEnv+"="+strings.Join(args[1:], "\x1f"))
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), ready); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("engine never logged %q; its output:\n%s", ready, logs)
		}
	}
	// The engine logs that it starts before it serves its CSI socket (and a
	// killed engine leaves its socket file behind): wait until one answers.
	if ep := flagValue(args, "--csi-endpoint"); strings.HasPrefix(ep, "unix://") {
		path := strings.TrimPrefix(ep, "unix://")
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			c, err := net.Dial("unix", path)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("engine's CSI socket %s never answered: %v; its output:\n%s", path, err, logs)
			}
		}
	}
	return cmd, logs
}

func nodeClient(t *testing.T, endpoint string) csi.NodeClient {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return csi.NewNodeClient(conn)
}

type writerChild struct {
	cmd   *exec.Cmd
	lines chan string
	errs  *strings.Builder
}

// startWriter runs the writer in a mount namespace of its own, every mount
// private, as a container sees its volume, and waits until it writes.
func startWriter(t *testing.T, path string) *writerChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &writerChild{cmd: cmd, lines: make(chan string, 16), errs: &strings.Builder{}}
	cmd.Stderr = w.errs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	w.expect(t, "writing")
	return w
}

func (w *writerChild) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-w.lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			t.Fatalf("writer said %q, want %q; its stderr: %s", l, prefix, w.errs)
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatalf("writer: no %q within 30 s (stuck?); its stderr: %s", prefix, w.errs)
	}
	return ""
}

// abortDisks aborts the FUSE connections of the disks under stateDir.
func abortDisks(stateDir string) {
	dirs, _ := filepath.Glob(filepath.Join(stateDir, "disks", "*"))
	for _, d := range dirs {
		_ = abortFuse(d)
	}
}

// tearDownLeftovers removes what a failed run left mounted under stateDir's
// parent: the staging mount, loop devices and FUSE disks.
func tearDownLeftovers(t *testing.T, stateDir string) {
	abortDisks(stateDir)
	_ = unmountAll(filepath.Join(filepath.Dir(stateDir), "staging"))
	devs, _ := loopdev.Under(filepath.Join(stateDir, "disks"))
	for _, d := range devs {
		_ = loopdev.Detach(d)
	}
	dirs, _ := filepath.Glob(filepath.Join(stateDir, "disks", "*"))
	for _, d := range dirs {
		if err := unmountDisk(d); err != nil {
			t.Error(err)
		}
	}
}
