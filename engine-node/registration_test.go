package enginenode

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	vigil "github.com/vigil-storage/vigil"
)

// serveRegistration serves a Registration in dir and returns a client of it
// (as the kubelet dials it), the log, the metrics, and stop, which stops the
// server and returns what ServeRegistration returned.
func serveRegistration(t *testing.T, dir string) (registerapi.RegistrationClient, *bytes.Buffer, *Metrics, func() error) {
	t.Helper()
	var log bytes.Buffer
	m := NewMetrics(prometheus.NewRegistry())
	r := &Registration{Endpoint: "/var/lib/kubelet/plugins/driver.vigil.io/csi.sock", Metrics: m,
		Log: slog.New(slog.NewTextHandler(&log, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeRegistration(ctx, dir, r) }()
	sock := filepath.Join(dir, RegistrationSocketName)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if fi, err := os.Lstat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if c, err := net.Dial("unix", sock); err == nil {
				c.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no registration socket at %s", sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var err2 error
	stopped := false
	stop := func() error {
		if !stopped {
			stopped = true
			conn.Close()
			cancel()
			err2 = <-done
		}
		return err2
	}
	t.Cleanup(func() { _ = stop() })
	return registerapi.NewRegistrationClient(conn), &log, m, stop
}

func TestRegistration_GetInfo(t *testing.T) {
	c, _, _, _ := serveRegistration(t, t.TempDir())
	info, err := c.GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != registerapi.CSIPlugin || info.Name != vigil.DriverName ||
		info.Endpoint != "/var/lib/kubelet/plugins/driver.vigil.io/csi.sock" || !slices.Equal(info.SupportedVersions, []string{"1.0.0"}) {
		t.Fatalf("GetInfo = %+v, want type CSIPlugin, name %s, the CSI socket, versions [1.0.0]", info, vigil.DriverName)
	}
}

func TestRegistration_NotifyFailedIsWarningAndMetric(t *testing.T) {
	c, log, m, _ := serveRegistration(t, t.TempDir())
	ctx := context.Background()
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false,
		Error: "plugin registration failed with err: node info"}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.registrations.WithLabelValues(RegistrationFailed)); got != 1 {
		t.Errorf("vigil_engine_kubelet_registrations_total{outcome=failed} = %v, want 1", got)
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "plugin registration failed with err: node info") {
		t.Errorf("log %q: want a Warning with the kubelet's error", log.String())
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.registrations.WithLabelValues(RegistrationRegistered)); got != 1 {
		t.Errorf("vigil_engine_kubelet_registrations_total{outcome=registered} = %v, want 1", got)
	}
}

func TestServeRegistration_StaleSocketReplacedAndRemovedOnExit(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, RegistrationSocketName)
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // the socket file stays, as after a SIGKILL
	c, _, _, stop := serveRegistration(t, dir)
	if _, err := c.GetInfo(context.Background(), &registerapi.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo through the socket that replaced the stale one: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("ServeRegistration after its context ended: %v, want nil", err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("registration socket still there after the engine stopped (%v)", err)
	}
}

func TestServeRegistration_BadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "reg"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "reg", RegistrationSocketName), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &Registration{Metrics: NewMetrics(nil), Log: slog.New(slog.DiscardHandler)}
	for _, c := range []struct{ name, dir, want string }{
		{"missing", filepath.Join(dir, "missing"), "--kubelet-registration-dir"},
		{"a file", file, "a regular file, not a directory: want the kubelet's existing plugin registration directory"},
		{"a file in the socket's way", filepath.Join(dir, "reg"), "a regular file is in the way; only a stale socket is replaced"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := ServeRegistration(context.Background(), c.dir, r)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(dir, "reg", RegistrationSocketName)); err != nil || string(b) != "x" {
		t.Errorf("the file in the socket's way was changed: %q, %v", b, err)
	}
}

// TestApp_Run_ServesKubeletRegistration: `run` with --kubelet-registration-dir
// serves the registration socket there once the CSI socket listens, names the
// CSI socket as its endpoint, and removes the socket when it stops.
func TestApp_Run_ServesKubeletRegistration(t *testing.T) {
	dir, err := os.MkdirTemp("", "vreg") // short: a socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	regDir := filepath.Join(dir, "plugins_registry")
	if err := os.Mkdir(regDir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := with(runArgs(t, dir, "127.0.0.1:1", "tok"), "--kubelet-registration-dir", regDir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	app := App(testDial)
	app.ErrWriter = io.Discard
	done := make(chan error, 1)
	go func() { done <- app.RunContext(ctx, args) }()
	sock := filepath.Join(regDir, RegistrationSocketName)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var info *registerapi.PluginInfo
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if info, err = registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{}); err == nil {
			break
		}
	}
	if err != nil || info.Endpoint != filepath.Join(dir, "csi.sock") || info.Name != vigil.DriverName {
		t.Fatalf("GetInfo = %+v, %v; want %s at the CSI socket %s", info, err, vigil.DriverName, filepath.Join(dir, "csi.sock"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run returned %v", err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("registration socket still there after the engine stopped (%v)", err)
	}
}
