package kubelet

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	vigil "github.com/vigil-storage/vigil"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// Defaults of Config.
const (
	// DefaultResync is the informers' resync period: every object is seen again
	// at least this often, so a lost patch or a missed event heals.
	DefaultResync = 30 * time.Second
	// DefaultPollInterval bounds the time between two syncs without any event.
	DefaultPollInterval = 2 * time.Second
	// DefaultBackoffInitial is the wait after a first failure of an operation;
	// it doubles at each failure (the kubelet's 500 ms).
	DefaultBackoffInitial = 500 * time.Millisecond
	// DefaultBackoffMax caps the wait between retries (the kubelet's ~2 min).
	DefaultBackoffMax = 2 * time.Minute
	// DefaultCallTimeout bounds one CSI call (the kubelet's csiTimeout).
	DefaultCallTimeout = 2 * time.Minute
	// Component is the event source component.
	Component = "vigil-kubelet"
)

// ErrBadConfig is returned by Run for a Config it cannot run with.
var ErrBadConfig = errors.New("bad kubelet stand-in config")

// Config is what Run needs. NodeName, Client, CSIEndpoint and RootDir are
// required; zero durations take the defaults above.
type Config struct {
	// NodeName is the node whose pods this stand-in mounts volumes for.
	NodeName string
	// Client talks to the API server (pods, PVCs, PVs, VolumeAttachments,
	// CSIDrivers read; node status patched; events created).
	Client kubernetes.Interface
	// CSIEndpoint is the node's CSI node service: unix:///path, unix:/path or a
	// bare path.
	CSIEndpoint string
	// Driver is the CSI driver whose volumes are handled; default vigil.DriverName.
	Driver string
	// RootDir is the node's kubelet directory (like /var/lib/kubelet): staging
	// and target paths live under it, and so does the state file that lets a
	// restarted stand-in clean up what its previous run mounted.
	RootDir string
	// Resync is the informers' resync period.
	Resync time.Duration
	// PollInterval is the longest time between two syncs.
	PollInterval time.Duration
	// BackoffInitial and BackoffMax shape the retry of failed operations.
	BackoffInitial, BackoffMax time.Duration
	// CallTimeout bounds one CSI call.
	CallTimeout time.Duration
	// Recorder emits the pod events; nil records to the API server as Component.
	Recorder record.EventRecorder
	// Clock times the backoff; nil is the real clock.
	Clock clock.PassiveClock
	// Logger; nil is slog.Default().
	Logger *slog.Logger
}

// withDefaults checks c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	var missing []string
	if c.NodeName == "" {
		missing = append(missing, "NodeName")
	}
	if c.Client == nil {
		missing = append(missing, "Client")
	}
	if c.CSIEndpoint == "" {
		missing = append(missing, "CSIEndpoint")
	}
	if c.RootDir == "" {
		missing = append(missing, "RootDir")
	}
	if len(missing) > 0 {
		return c, fmt.Errorf("%w: %s required", ErrBadConfig, strings.Join(missing, ", "))
	}
	if !filepath.IsAbs(c.RootDir) {
		return c, fmt.Errorf("%w: RootDir %q is not an absolute path", ErrBadConfig, c.RootDir)
	}
	if _, err := socketPath(c.CSIEndpoint); err != nil {
		return c, err
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"Resync", &c.Resync, DefaultResync},
		{"PollInterval", &c.PollInterval, DefaultPollInterval},
		{"BackoffInitial", &c.BackoffInitial, DefaultBackoffInitial},
		{"BackoffMax", &c.BackoffMax, DefaultBackoffMax},
		{"CallTimeout", &c.CallTimeout, DefaultCallTimeout},
	} {
		if *d.v < 0 {
			return c, fmt.Errorf("%w: %s = %s is negative; allowed: 0 (default %s) or more", ErrBadConfig, d.name, *d.v, d.def)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.BackoffMax < c.BackoffInitial {
		return c, fmt.Errorf("%w: BackoffMax %s is below BackoffInitial %s", ErrBadConfig, c.BackoffMax, c.BackoffInitial)
	}
	if c.Driver == "" {
		c.Driver = vigil.DriverName
	}
	c.RootDir = filepath.Clean(c.RootDir)
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// socketPath returns the socket path of a CSI endpoint.
func socketPath(endpoint string) (string, error) {
	p := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		p = rest
	} else if rest, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		p = rest
	} else if strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("%w: CSIEndpoint %q is not a unix socket; allowed: unix:///path, unix:/path or /path", ErrBadConfig, endpoint)
	}
	if p == "" || !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: CSIEndpoint %q has no absolute socket path; allowed: unix:///path, unix:/path or /path", ErrBadConfig, endpoint)
	}
	return filepath.Clean(p), nil
}
