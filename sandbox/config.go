package sandbox

import (
	"crypto/sha256"
	_ "embed" // pins.env is embedded to find the binary cache testbin.sh fills.
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

//go:embed tools/pins.env
var pinsEnv []byte

// Binaries the sandbox runs, all built by `make testbin`.
const (
	BinEtcd                  = "etcd"
	BinKubeAPIServer         = "kube-apiserver"
	BinKubeControllerManager = "kube-controller-manager"
	BinKubeScheduler         = "kube-scheduler"
	BinKwok                  = "kwok"
	BinKwokctl               = "kwokctl"
	BinCSIAttacher           = "csi-attacher"
	BinCSIProvisioner        = "csi-provisioner"
)

var requiredBinaries = []string{BinEtcd, BinKubeAPIServer, BinKubeControllerManager,
	BinKubeScheduler, BinKwok, BinKwokctl}

// Config describes a sandbox. The zero value of every field but Nodes means "the
// default"; Validate reports a bad value without changing anything.
type Config struct {
	// Name names the kwokctl cluster, the network namespaces and the veths;
	// lower-case letters, digits and '-', at most 20 characters. Default "vigil".
	Name string
	// WorkDir holds the sandbox's state (state.json, kubeconfigs, logs, etcd data).
	// Default: $TMPDIR/vigil-sandbox-NAME.
	WorkDir string
	// BinDir holds the binaries; default BinDir().
	BinDir string
	// Nodes is the number of simulated nodes, 1 to 64; they are named node-1 ...
	Nodes int
	// NodeMonitorGracePeriod: how long a silent node stays Ready (kcm flag). Default 10s.
	NodeMonitorGracePeriod time.Duration
	// NodeMonitorPeriod: how often kcm checks node health. Default 1s.
	NodeMonitorPeriod time.Duration
	// DefaultTolerationSeconds is injected into pods as their unreachable and
	// not-ready NoExecute toleration (apiserver flags). Default 20; Kubernetes' is 300.
	DefaultTolerationSeconds int
	// NodeLeaseDurationSeconds is each kwok's node lease duration. Default 10.
	NodeLeaseDurationSeconds int
	// Subnet holds the node links: node i (from 0) gets 4 addresses from
	// Subnet + 4i, the host end .1 and the node end .2. Default 10.213.0.0/16.
	Subnet string
	// APIServerPort is the API server's port; 0 picks a free one.
	APIServerPort int
	// AuditLog makes the API server record every request made by a
	// ServiceAccount of namespace vigil-system (Vigil's components running
	// under their own identities) in WorkDir/audit.log; AuditEvents reads it.
	AuditLog bool
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// MaxNodes is the largest Nodes value Validate accepts.
const MaxNodes = 64

// withDefaults returns c with every unset field given its default.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "vigil"
	}
	if c.WorkDir == "" {
		c.WorkDir = DefaultWorkDir(c.Name)
	}
	if c.BinDir == "" {
		c.BinDir = BinDir()
	}
	if c.NodeMonitorGracePeriod == 0 {
		c.NodeMonitorGracePeriod = 10 * time.Second
	}
	if c.NodeMonitorPeriod == 0 {
		c.NodeMonitorPeriod = time.Second
	}
	if c.DefaultTolerationSeconds == 0 {
		c.DefaultTolerationSeconds = 20
	}
	if c.NodeLeaseDurationSeconds == 0 {
		c.NodeLeaseDurationSeconds = 10
	}
	if c.Subnet == "" {
		c.Subnet = "10.213.0.0/16"
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}

// Validate checks c (after defaults) and returns an error naming the first bad field.
func (c Config) Validate() error {
	c = c.withDefaults()
	if len(c.Name) > 20 || !nameRE.MatchString(c.Name) {
		return fmt.Errorf("%w: Name %q: want lower-case letters, digits and '-', at most 20 characters", ErrInvalidConfig, c.Name)
	}
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		return fmt.Errorf("%w: Nodes %d: want 1 to %d", ErrInvalidConfig, c.Nodes, MaxNodes)
	}
	if c.NodeMonitorPeriod < 0 || c.NodeMonitorGracePeriod < 0 || c.NodeMonitorPeriod > c.NodeMonitorGracePeriod {
		return fmt.Errorf("%w: NodeMonitorPeriod %s, NodeMonitorGracePeriod %s: want 0 < period <= grace period",
			ErrInvalidConfig, c.NodeMonitorPeriod, c.NodeMonitorGracePeriod)
	}
	if c.DefaultTolerationSeconds < 0 {
		return fmt.Errorf("%w: DefaultTolerationSeconds %d: want >= 0", ErrInvalidConfig, c.DefaultTolerationSeconds)
	}
	if c.NodeLeaseDurationSeconds < 0 {
		return fmt.Errorf("%w: NodeLeaseDurationSeconds %d: want >= 0", ErrInvalidConfig, c.NodeLeaseDurationSeconds)
	}
	if c.APIServerPort < 0 || c.APIServerPort > 65535 {
		return fmt.Errorf("%w: APIServerPort %d: want 0 (any free port) to 65535", ErrInvalidConfig, c.APIServerPort)
	}
	p, err := netip.ParsePrefix(c.Subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
		return fmt.Errorf("%w: Subnet %q: want an IPv4 prefix of /30 or larger, e.g. 10.213.0.0/16", ErrInvalidConfig, c.Subnet)
	}
	if need := c.Nodes * 4; need > 1<<(32-p.Bits()) {
		return fmt.Errorf("%w: Subnet %q holds fewer than the %d addresses %d nodes need", ErrInvalidConfig, c.Subnet, need, c.Nodes)
	}
	return nil
}

// nodeAddrs returns the host-end and node-end addresses of node i's link.
func nodeAddrs(subnet string, i int) (host, node netip.Addr, err error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return host, node, fmt.Errorf("subnet %q: %w", subnet, err)
	}
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(4 * i)
	a := func(x uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	return a(v + 1), a(v + 2), nil
}

// NodeName is the name of node i (from 0): node-1, node-2, ...
func NodeName(i int) string { return fmt.Sprintf("node-%d", i+1) }

// DefaultWorkDir is where a sandbox named name keeps its state by default.
func DefaultWorkDir(name string) string {
	return filepath.Join(os.TempDir(), "vigil-sandbox-"+name)
}

// Pins returns the pinned versions of the sandbox's binaries (sandbox/tools/pins.env).
func Pins() map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(pinsEnv), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out
}

// BinDir is where `make testbin` puts the binaries for the current pins:
// $VIGIL_TESTBIN if set, else $HOME/.cache/vigil/testbin/<kube version>-<pins hash>
// (the same rule as sandbox/tools/testbin.sh).
func BinDir() string {
	if d := os.Getenv("VIGIL_TESTBIN"); d != "" {
		return d
	}
	sum := sha256.Sum256(pinsEnv)
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "vigil", "testbin",
		Pins()["KUBERNETES_VERSION"]+"-"+hex.EncodeToString(sum[:])[:12])
}

// CheckBinaries reports, as ErrBinariesMissing, which binaries dir lacks.
func CheckBinaries(dir string) error {
	var missing []string
	for _, b := range requiredBinaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not in %s: run `make testbin` (or set VIGIL_TESTBIN)",
			ErrBinariesMissing, strings.Join(missing, ", "), dir)
	}
	return nil
}
