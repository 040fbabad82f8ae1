package enginenode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	vigil "github.com/vigil-storage/vigil"
)

// DefaultKubeletRegistrationDir is the kubelet's plugin registration
// directory (--kubelet-registration-dir): the kubelet watches it for plugin
// sockets.
const DefaultKubeletRegistrationDir = "/var/lib/kubelet/plugins_registry"

// RegistrationSocketName is the engine's socket in the registration directory.
const RegistrationSocketName = vigil.DriverName + "-reg.sock"

// CSISpecVersions are the CSI versions the engine tells the kubelet it serves.
var CSISpecVersions = []string{"1.0.0"}

// Registration outcomes, the values of
// vigil_engine_kubelet_registrations_total{outcome}.
const (
	RegistrationRegistered = "registered" // the kubelet took the driver
	RegistrationFailed     = "failed"     // the kubelet refused it (logged as a Warning)
)

// Registration is the kubelet's plugin registration service, served by the
// engine itself on RegistrationSocketName: the kubelet finds the socket,
// asks GetInfo, dials Endpoint for the CSI node service (NodeGetInfo), and
// says with NotifyRegistrationStatus whether it took the driver.
type Registration struct {
	registerapi.UnimplementedRegistrationServer
	// Endpoint is the CSI socket's path as the kubelet sees it.
	Endpoint string
	Metrics  *Metrics
	Log      *slog.Logger
}

// GetInfo names the driver, its type, its CSI socket and the CSI versions.
func (r *Registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: vigil.DriverName,
		Endpoint: r.Endpoint, SupportedVersions: CSISpecVersions}, nil
}

// NotifyRegistrationStatus logs what the kubelet made of the registration; a
// refusal is a Warning and counts as failed.
func (r *Registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.GetPluginRegistered() {
		r.Log.Info("the kubelet registered the CSI driver", "driver", vigil.DriverName, "endpoint", r.Endpoint)
		r.Metrics.registrations.WithLabelValues(RegistrationRegistered).Inc()
	} else {
		r.Log.Warn("the kubelet refused to register the CSI driver; it retries while the registration socket is there",
			"driver", vigil.DriverName, "endpoint", r.Endpoint, "err", s.GetError())
		r.Metrics.registrations.WithLabelValues(RegistrationFailed).Inc()
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// CheckRegistrationDir refuses a --kubelet-registration-dir that is not an
// existing directory; empty (registration off) passes.
func CheckRegistrationDir(dir string) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("a %s, not a directory", typeName(fi.Mode()))
	}
	if err != nil {
		return fmt.Errorf("--kubelet-registration-dir %q: %w: want the kubelet's existing plugin registration directory (default %s), or empty to not register with the kubelet",
			dir, err, DefaultKubeletRegistrationDir)
	}
	return nil
}

func typeName(m fs.FileMode) string {
	if m.Type() == 0 {
		return "regular file"
	}
	return m.Type().String()
}

// ServeRegistration serves r on dir/RegistrationSocketName until ctx ends,
// then removes the socket. A stale socket of an earlier run is replaced; any
// other file at that path is an error.
func ServeRegistration(ctx context.Context, dir string, r *Registration) error {
	if err := CheckRegistrationDir(dir); err != nil {
		return err
	}
	path := filepath.Join(dir, RegistrationSocketName)
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return fmt.Errorf("registration socket %s: a %s is in the way; only a stale socket is replaced", path, typeName(fi.Mode()))
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove stale registration socket %s: %w", path, err)
		}
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on registration socket %s: %w", path, err)
	}
	defer os.Remove(path)
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, r)
	stop := context.AfterFunc(ctx, srv.Stop)
	defer stop()
	r.Log.Info("serving the kubelet's plugin registration", "socket", path, "driver", vigil.DriverName, "csi", r.Endpoint)
	if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve registration on %s: %w", path, err)
	}
	return nil
}
