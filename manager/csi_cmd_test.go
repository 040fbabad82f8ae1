package manager

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

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/settings"
)

func writeToken(t *testing.T, token string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCSIServe_ServesControllerOnTheDatapath(t *testing.T) {
	dp := datapathtest.StartWith(t, datapathtest.Config{TLS: true})
	sock := filepath.Join(t.TempDir(), "csi.sock")
	health := freeAddr(t)
	// One server: the managed overlay sets the default replica count to 1
	// (the setting's default, 3, would be refused).
	overlay := t.TempDir()
	if err := os.WriteFile(filepath.Join(overlay, settings.NameDefaultReplicaCount), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	app := App()
	var out bytes.Buffer
	app.Writer = &out
	go func() {
		done <- app.RunContext(ctx, []string{"vigil-manager", "csi", "serve",
			"--csi-endpoint", "unix://" + sock, "--datapath", dp.Addr, "--datapath-token-file", writeToken(t, dp.Token),
			"--datapath-ca-file", dp.CAFile, "--health-address", health, "--settings-dir", overlay})
	}()
	var stopped bool
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("csi serve: %v", err)
			}
		}
	}
	t.Cleanup(stop)

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var info *csipb.GetPluginInfoResponse
	deadline := time.Now().Add(10 * time.Second)
	for {
		callCtx, callCancel := context.WithTimeout(ctx, time.Second)
		info, err = csipb.NewIdentityClient(conn).GetPluginInfo(callCtx, &csipb.GetPluginInfoRequest{})
		callCancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("GetPluginInfo: %v", err)
	}
	if info.GetName() != vigil.DriverName {
		t.Fatalf("driver name %q, want %q", info.GetName(), vigil.DriverName)
	}
	vol, err := csipb.NewControllerClient(conn).CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name:          "pvc-1",
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	if got := vol.GetVolume().GetVolumeContext()["replicas"]; got != "1" {
		t.Errorf("volume_context[replicas] = %q, want 1 (the managed overlay's)", got)
	}
	_, err = csipb.NewControllerClient(conn).CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "pvc-2", Parameters: map[string]string{"replicas": "2"},
		VolumeCapabilities: []*csipb.VolumeCapability{{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}},
	})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "the datapath has 1 server(s)") {
		t.Errorf("2 replicas on one server: %v, want ResourceExhausted naming the one server", err)
	}
	if _, err := dp.Store.GetVolume(vol.GetVolume().GetVolumeId()); err != nil {
		t.Fatalf("the volume CreateVolume returned is not in the datapath: %v", err)
	}
	// The liveness endpoint: the CSI Probe through the socket, ready as the
	// datapath answers.
	resp, err := http.Get("http://" + health + vigil.CSIProbePath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("%s: HTTP %d %q, want 200 ok", vigil.CSIProbePath, resp.StatusCode, body)
	}
	stop() // the output is read only once the command has returned
	if !strings.Contains(out.String(), "csi: serving "+vigil.DriverName) {
		t.Fatalf("no readiness line in %q", out.String())
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestCSIServe_BadFlags_ClearErrors(t *testing.T) {
	token := writeToken(t, "s3cret")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"tcp endpoint", []string{"--csi-endpoint", "tcp://127.0.0.1:1", "--datapath-token-file", token}, "--csi-endpoint"},
		{"missing token file", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", "/nonexistent/token"}, "/nonexistent/token"},
		{"no endpoint", []string{"--datapath-token-file", token}, "csi-endpoint"},
		{"stray argument", []string{"--csi-endpoint", "/tmp/x.sock", "--datapath-token-file", token, "extra"}, "takes no arguments"},
		{"missing CA file", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--datapath-ca-file", "/nonexistent/ca.crt"}, "/nonexistent/ca.crt"},
		{"CA file without a certificate", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--datapath-ca-file", token}, "no PEM certificate"},
		{"CA and insecure", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--datapath-ca-file", token, "--datapath-insecure"}, "contradict"},
		{"plaintext off loopback", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--datapath", "10.1.2.3:9600"}, "--datapath-ca-file"},
		{"duplicate server", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--datapath", "127.0.0.1:9600,127.0.0.1:9600"}, "--datapath: datapath servers \"127.0.0.1:9600,127.0.0.1:9600\": 127.0.0.1:9600 is given twice"},
		{"zero qps", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--kube-api-qps", "0"}, "--kube-api-qps 0 and --kube-api-burst 100: both must be positive"},
		{"negative burst", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--kube-api-burst", "-1"}, "--kube-api-burst -1"},
		{"health address without a port", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--health-address", "9808"}, "--health-address \"9808\": address 9808: missing port in address: want host:port"},
		{"bad settings store", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--settings-store", "etcd:x"}, "--settings-store: invalid settings store \"etcd:x\": want bolt:PATH or configmap:NAMESPACE/NAME"},
		{"settings dir not a directory", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--settings-dir", token}, token},
		{"qps not a number", []string{"--csi-endpoint", filepath.Join(t.TempDir(), "s"), "--datapath-token-file", token,
			"--kube-api-qps", "fast"}, "kube-api-qps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := App().Run(append([]string{"vigil-manager", "csi", "serve"}, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}
