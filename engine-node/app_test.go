package enginenode

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// testDial is the main package's dial: the token file, TLS with the CA file,
// or plaintext.
func testDial(ctx context.Context, cfg DialConfig) (DatapathClient, error) {
	opts := []client.Option{client.WithTokenFile(cfg.TokenFile), client.WithServers(cfg.Servers...)}
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
		"--heartbeat-interval", "50ms", "--metrics-address", "", "--kubelet-registration-dir", ""}
}

func with(args []string, flag, value string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if out[i] == flag {
			out[i+1] = value
			return out
		}
	}
	return append(out, flag, value)
}

func TestApp_Run_BadFlags(t *testing.T) {
	dir := t.TempDir()
	args := runArgs(t, dir, "127.0.0.1:1", "tok")
	cases := []struct{ name, flag, value, mention string }{
		{"node name", "--node-name", "a b", "--node-name"},
		{"datapath", "--datapath", "nohostport", "--datapath"},
		{"plaintext off loopback", "--datapath", "10.1.2.3:9600", "--datapath-ca-file"},
		{"server list with a bad port", "--datapath", "127.0.0.1:1,127.0.0.1:0", `--datapath: datapath servers "127.0.0.1:1,127.0.0.1:0": item 2: "127.0.0.1:0": port "0"`},
		{"server list with a duplicate", "--datapath", "127.0.0.1:1,127.0.0.1:1", "127.0.0.1:1 is given twice"},
		{"server list off loopback in plaintext", "--datapath", "127.0.0.1:1,10.1.2.3:9600", "--datapath 10.1.2.3:9600 is not on loopback"},
		{"token file", "--datapath-token-file", filepath.Join(dir, "missing"), "--datapath-token-file"},
		{"endpoint", "--csi-endpoint", "tcp://1.2.3.4:5", "--csi-endpoint"},
		{"boot id", "--boot-id-file", filepath.Join(dir, "missing"), "--boot-id-file"},
		{"heartbeat", "--heartbeat-interval", "0s", "--heartbeat-interval"},
		{"unflushed budget too small", "--unflushed-write-budget", "4096", "--unflushed-write-budget 4096: want 1048576 (1 MiB)"},
		{"unflushed budget too large", "--unflushed-write-budget", "2147483648", "to 1073741824 (1 GiB)"},
		{"node budget below a volume's", "--unflushed-write-node-budget", "1048576", "--unflushed-write-node-budget 1048576: want --unflushed-write-budget (67108864) to"},
		{"node budget too large", "--unflushed-write-node-budget", "34359738368", "to 17179869184 (16 GiB)"},
		{"registration dir missing", "--kubelet-registration-dir", filepath.Join(dir, "missing"),
			"--kubelet-registration-dir \"" + filepath.Join(dir, "missing") + "\": stat"},
		{"registration dir a file", "--kubelet-registration-dir", filepath.Join(dir, "token"),
			"a regular file, not a directory: want the kubelet's existing plugin registration directory"},
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
	beat := make(chan struct{})
	app := App(func(ctx context.Context, cfg DialConfig) (DatapathClient, error) {
		c, err := testDial(ctx, cfg)
		return &beatSignal{DatapathClient: c, acked: beat}, err
	})
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
	select { // the engine's first heartbeat the datapath acknowledged
	case <-beat:
	case <-time.After(30 * time.Second): // a hang guard, not a timing goal
		t.Fatal("the engine made no acknowledged heartbeat in 30 s")
	}
	conn2, err := dp.Connectivity(ctx, "node-a", "", datapath.MaxConnectivityWindow)
	if err != nil || !conn2.Connected || conn2.LastHeartbeat.IsZero() {
		t.Fatalf("datapath sees node-a as %+v, %v; want its heartbeat recorded", conn2, err)
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
	// The liveness endpoint calls the CSI Probe of the engine's own socket.
	resp, err = http.Get("http://" + metricsAddr + vigil.CSIProbePath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("%s: HTTP %d %q, want 200 ok", vigil.CSIProbePath, resp.StatusCode, body)
	}
}

// beatSignal is the engine's datapath client; it closes acked after the first
// heartbeat the datapath acknowledged.
type beatSignal struct {
	DatapathClient
	acked chan struct{}
	once  sync.Once
}

func (b *beatSignal) Heartbeat(ctx context.Context, node string) error {
	err := b.DatapathClient.Heartbeat(ctx, node)
	if err == nil {
		b.once.Do(func() { close(b.acked) })
	}
	return err
}

// stallingAPIServer is a loopback stand-in for the kube-apiserver that serves
// this engine's Node, except that GET of the Node answers 503 until opened:
// the engine cannot learn whether it is fenced until then.
type stallingAPIServer struct {
	open atomic.Bool
}

func (s *stallingAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	node := corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", ResourceVersion: "1"}}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/api/v1/nodes/node-a" && !s.open.Load():
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable})
	case r.URL.Path == "/api/v1/nodes/node-a":
		_ = json.NewEncoder(w).Encode(node)
	case r.URL.Path == "/api/v1/nodes" && r.URL.Query().Get("watch") == "true":
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // nothing changes
	case r.URL.Path == "/api/v1/nodes":
		_ = json.NewEncoder(w).Encode(corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: []corev1.Node{node}})
	default:
		http.NotFound(w, r)
	}
}

// writeKubeconfig points a kubeconfig in dir at server.
func writeKubeconfig(t *testing.T, dir, server string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\ncurrent-context: t\n" +
		"clusters:\n- name: t\n  cluster:\n    server: " + server + "\n" +
		"contexts:\n- name: t\n  context:\n    cluster: t\n    user: u\n" +
		"users:\n- name: u\n  user: {}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The engine serves its CSI socket at once, but until it has read its Node it
// does not know whether it is fenced, and the gate refuses every stage, even
// one with a live grant; once the Node is read (not fenced), the stage goes
// through.
func TestApp_Run_GateHoldsUntilFenceStateKnown(t *testing.T) {
	requireRealStack(t)
	srv := datapathtest.Start(t, datapath.Options{Logger: quiet})
	api := &stallingAPIServer{}
	apiSrv := httptest.NewServer(api) // loopback
	t.Cleanup(apiSrv.Close)
	dir, err := os.MkdirTemp("", "vapp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	args := append(runArgs(t, dir, srv.Addr, srv.NodeToken("node-a")), "--kubeconfig", writeKubeconfig(t, dir, apiSrv.URL), "--cleanup-interval", "50ms")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	app := App(testDial)
	app.ErrWriter = io.Discard
	go func() { done <- app.RunContext(ctx, args) }()
	t.Cleanup(func() {
		cancel()
		apiSrv.CloseClientConnections()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	})
	dp, err := client.Dial(ctx, srv.Addr, srv.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	vol, err := dp.CreateVolume(ctx, "pvc-gate", testSize, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := dp.Grant(ctx, vol.ID, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	node := dialNode(t, ctx, filepath.Join(dir, "csi.sock"))
	staging := filepath.Join(dir, "staging")
	t.Cleanup(func() { // before the engine stops, whatever the outcome
		if _, err := node.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: vol.ID, StagingTargetPath: staging}); err != nil {
			t.Error(err)
		}
	})
	stage := func() error {
		_, err := node.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap()))
		return err
	}
	err = stage()
	wantCode(t, err, codes.FailedPrecondition, "not known yet")

	api.open.Store(true)
	deadline := time.Now().Add(30 * time.Second) // a hang guard, not a timing goal
	for err = stage(); err != nil && strings.Contains(err.Error(), "not known yet") && time.Now().Before(deadline); err = stage() {
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("stage with a live grant once the node is known to be unfenced: %v", err)
	}
}

// dialNode connects to the CSI socket once it answers NodeGetInfo.
func dialNode(t *testing.T, ctx context.Context, sock string) csi.NodeClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	node := csi.NewNodeClient(conn)
	deadline := time.Now().Add(30 * time.Second) // a hang guard
	for {
		_, err := node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{}, grpc.WaitForReady(true))
		if err == nil {
			return node
		}
		if time.Now().After(deadline) {
			t.Fatalf("CSI socket %s: %v", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
