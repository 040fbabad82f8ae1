package enginenode

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// engineChildEnv makes TestApp_Child run `vigil-engine-node run` for real
// with the arguments it holds (separated by \x1f); the graceful-stop test
// starts the test binary again with it set, so signals reach a real process.
const engineChildEnv = "VIGIL_TEST_ENGINE_RUN_ARGS"

func TestApp_Child(t *testing.T) {
	args := os.Getenv(engineChildEnv)
	if args == "" {
		t.Skip("runs only as the child of TestApp_Run_SIGTERMAnnouncesLeaveSIGKILLDoesNot")
	}
	if err := App(testDial).Run(append([]string{"vigil-engine-node"}, strings.Split(args, "\x1f")...)); err != nil {
		t.Fatal(err)
	}
}

// startEngine runs the engine as a child process with args and waits until the
// datapath has its heartbeat.
func startEngine(t *testing.T, dp *client.Client, node string, args []string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestApp_Child$")
	cmd.Env = append(os.Environ(), engineChildEnv+"="+strings.Join(args[1:], "\x1f"))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n, ok := nodeStatus(t, dp, node); ok && !n.LastHeartbeat.IsZero() {
			return cmd, &logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine %s never heartbeated; its output:\n%s", node, logs.String())
		}
	}
}

func nodeStatus(t *testing.T, dp *client.Client, node string) (datapath.NodeStatus, bool) {
	t.Helper()
	r, err := dp.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.Nodes {
		if n.Node == node {
			return n, true
		}
	}
	return datapath.NodeStatus{}, false
}

// engineArgs are `run` arguments for node with its own files under a short
// temporary directory (a socket path must fit in 108 bytes).
func engineArgs(t *testing.T, srv *datapathtest.Server, node string) []string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vleave")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return with(runArgs(t, dir, srv.Addr, srv.NodeToken(node)), "--node-name", node)
}

// TestApp_Run_SIGTERMAnnouncesLeaveSIGKILLDoesNot runs real engine processes:
// one killed with SIGKILL announces nothing (its silence must become a
// failover), one stopped with SIGTERM tells the datapath it leaves for
// --graceful-leave, after its last heartbeat, and the announcement is still in
// force once the engine has exited.
func TestApp_Run_SIGTERMAnnouncesLeaveSIGKILLDoesNot(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{Logger: quiet})
	dp, err := client.Dial(context.Background(), srv.Addr, srv.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()

	killed, _ := startEngine(t, dp, "node-k", engineArgs(t, srv, "node-k"))
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	if n, _ := nodeStatus(t, dp, "node-k"); !n.LeavingUntil.IsZero() {
		t.Fatalf("a SIGKILLed engine announced a stop: %+v", n)
	}

	args := with(engineArgs(t, srv, "node-t"), "--heartbeat-interval", "10ms")
	args = append(args, "--graceful-leave", "45s")
	stopped, logs := startEngine(t, dp, "node-t", args)
	sent := time.Now()
	if err := stopped.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := stopped.Wait(); err != nil {
		t.Fatalf("engine exit after SIGTERM: %v\n%s", err, logs.String())
	}
	n, ok := nodeStatus(t, dp, "node-t")
	if !ok || n.LeavingUntil.Before(sent.Add(45*time.Second)) || n.LeavingUntil.After(time.Now().Add(45*time.Second)) {
		t.Fatalf("after SIGTERM the datapath has node-t as %+v (listed %v); want leaving until about %s\n%s",
			n, ok, sent.Add(45*time.Second), logs.String())
	}
	if !strings.Contains(logs.String(), "announced a graceful stop") {
		t.Fatalf("the engine did not log its announcement:\n%s", logs.String())
	}
}

// leaveRecorder is a Leaver and Heartbeater that records the order of calls.
type leaveRecorder struct {
	calls  []string
	leaves []time.Duration
	err    error
}

func (r *leaveRecorder) Heartbeat(context.Context, string) error {
	r.calls = append(r.calls, "heartbeat")
	return nil
}

func (r *leaveRecorder) Leave(_ context.Context, node string, d time.Duration) (time.Time, error) {
	r.calls = append(r.calls, "leave "+node)
	r.leaves = append(r.leaves, d)
	return time.Now().Add(d), r.err
}

func TestServeWithHeartbeats_LeavesOnlyWhenToldToStop(t *testing.T) {
	o := runOptions{node: "node-a", heartbeat: time.Hour, leave: 30 * time.Second, log: quiet}
	cases := []struct {
		name      string
		stop      bool // the context ends (SIGTERM) before serve returns
		leave     time.Duration
		wantLeave bool
	}{
		{"stopped", true, 30 * time.Second, true},
		{"serve failed on its own", false, 30 * time.Second, false},
		{"stopped, announcing disabled", true, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &leaveRecorder{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := o
			o.leave = c.leave
			served := make(chan struct{})
			err := serveWithHeartbeats(ctx, o, recorderClient{rec}, NewMetrics(prometheus.NewRegistry()), func() error {
				close(served)
				if c.stop {
					cancel()
					return nil
				}
				return io.ErrUnexpectedEOF
			})
			<-served
			if !c.stop && err != io.ErrUnexpectedEOF {
				t.Fatalf("serve's error was not returned: %v", err)
			}
			gotLeave := len(rec.leaves) > 0
			if gotLeave != c.wantLeave {
				t.Fatalf("calls %v; want a Leave: %v", rec.calls, c.wantLeave)
			}
			if gotLeave && (rec.calls[len(rec.calls)-1] != "leave node-a" || rec.leaves[0] != c.leave) {
				t.Fatalf("calls %v with %v; want the Leave last, for %s", rec.calls, rec.leaves, c.leave)
			}
		})
	}
}

// recorderClient is a DatapathClient whose heartbeats and leaves go to a
// leaveRecorder; nothing else is called by serveWithHeartbeats.
type recorderClient struct{ *leaveRecorder }

func (recorderClient) ReadAt(context.Context, string, string, uint64, int64, int) ([]byte, error) {
	panic("not called")
}
func (recorderClient) WriteAt(context.Context, string, string, uint64, int64, []byte) error {
	panic("not called")
}
func (recorderClient) Flush(context.Context, string, string, uint64) error { panic("not called") }
func (recorderClient) GetVolume(context.Context, string) (datapath.Volume, error) {
	panic("not called")
}
func (recorderClient) Release(context.Context, string, string) error { panic("not called") }
func (recorderClient) Attachments(context.Context, string) ([]datapath.Attachment, error) {
	panic("not called")
}
func (recorderClient) Close() error { return nil }

func TestApp_Run_BadGracefulLeave(t *testing.T) {
	dir := t.TempDir()
	args := runArgs(t, dir, "127.0.0.1:1", "tok")
	for _, v := range []string{"-1s", "3m", "soon"} {
		app := App(testDial)
		app.Writer, app.ErrWriter = io.Discard, io.Discard
		err := app.Run(append(append([]string(nil), args...), "--graceful-leave", v))
		if err == nil || !strings.Contains(err.Error(), "graceful-leave") {
			t.Errorf("--graceful-leave %s: %v; want an error naming the flag", v, err)
		}
	}
	if exists(filepath.Join(dir, "state")) {
		t.Fatal("a bad --graceful-leave still created the state directory")
	}
}
