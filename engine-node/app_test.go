package enginenode

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// testDial is the main package's dial: the token file, TLS with the CA file,
// or plaintext.
func testDial(ctx context.Context, cfg DialConfig) (DatapathClient, error) {
	opts := []client.Option{client.WithTokenFile(cfg.TokenFile)}
	if cfg.CAFile != "" {
		opts = append(opts, client.WithCAFile(cfg.CAFile))
	}
	if cfg.Insecure {
		opts = append(opts, client.WithInsecure())
	}
	return client.Dial(ctx, cfg.Addr, "", opts...)
}

// runArgs are valid `run` arguments for the files in dir; token is node-a's.
func runArgs(t *testing.T, dir, addr, token string) []string {
	t.Helper()
	tokenFile := filepath.Join(dir, "token")
	bootFile := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bootFile, []byte("boot-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"vigil-engine-node", "run", "--node-name", "node-a", "--datapath", addr,
		"--datapath-token-file", tokenFile, "--state-dir", filepath.Join(dir, "state"),
		"--csi-endpoint", "unix://" + filepath.Join(dir, "csi.sock"), "--boot-id-file", bootFile,
		"--heartbeat-interval", "50ms", "--metrics-address", ""}
}

func with(args []string, flag, value string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if out[i] == flag {
			out[i+1] = value
		}
	}
	return out
}

func TestApp_Run_BadFlags(t *testing.T) {
	dir := t.TempDir()
	args := runArgs(t, dir, "127.0.0.1:1", "tok")
	cases := []struct{ name, flag, value, mention string }{
		{"node name", "--node-name", "a b", "--node-name"},
		{"datapath", "--datapath", "nohostport", "--datapath"},
		{"plaintext off loopback", "--datapath", "10.1.2.3:9600", "--datapath-ca-file"},
		{"token file", "--datapath-token-file", filepath.Join(dir, "missing"), "--datapath-token-file"},
		{"endpoint", "--csi-endpoint", "tcp://1.2.3.4:5", "--csi-endpoint"},
		{"boot id", "--boot-id-file", filepath.Join(dir, "missing"), "--boot-id-file"},
		{"heartbeat", "--heartbeat-interval", "0s", "--heartbeat-interval"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			app := App(testDial)
			app.Writer, app.ErrWriter = io.Discard, io.Discard
			err := app.Run(with(args, c.flag, c.value))
			if err == nil || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("got %v, want an error naming %s", err, c.mention)
			}
			if exists(filepath.Join(dir, "state")) {
				t.Fatal("a bad flag still created the state directory")
			}
		})
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestApp_Run_ServesNodeHeartbeatsAndMetrics(t *testing.T) {
	srv := datapathtest.Start(t, datapath.Options{Logger: quiet})
	dir, err := os.MkdirTemp("", "vapp") // short: a socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	metricsAddr := freePort(t)
	args := with(runArgs(t, dir, srv.Addr, srv.NodeToken("node-a")), "--metrics-address", metricsAddr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	app := App(testDial)
	var logs bytes.Buffer
	app.ErrWriter = &logs
	go func() { done <- app.RunContext(ctx, args) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	})

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "csi.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var info *csi.NodeGetInfoResponse
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if info, err = csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}); err == nil {
			break
		}
	}
	if err != nil || info.GetNodeId() != "node-a" {
		t.Fatalf("NodeGetInfo = %v, %v", info, err)
	}
	dp, err := client.Dial(ctx, srv.Addr, srv.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	time.Sleep(200 * time.Millisecond)
	conn2, err := dp.Connectivity(ctx, "node-a", "", time.Second)
	if err != nil || !conn2.Connected {
		t.Fatalf("datapath sees node-a as %+v, %v; want heartbeats", conn2, err)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"vigil_engine_volumes_staged", "vigil_engine_cleanup_total", "vigil_engine_writes_fenced_total",
		"vigil_engine_heartbeat_failures_total", "vigil_engine_stage_duration_seconds", "vigil_engine_publish_duration_seconds"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}
