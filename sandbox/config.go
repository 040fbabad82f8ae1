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
	BinKubelet               = "kubelet"
	BinKubeProxy             = "kube-proxy"
)

// What runs each node of a sandbox (Config.Kubelet).
const (
	// KubeletKwok: one kwok process per node plays its kubelet (the default;
	// nothing runs in a pod).
	KubeletKwok = "kwok"
	// KubeletReal: a real kubelet, containerd, CNI and kube-proxy per node;
	// pods run in containers (realnode.go).
	KubeletReal = "real"
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
	// Zero when Racks is set.
	Nodes int
	// Racks, when set (1 to MaxRacks), makes a scale sandbox: racks named
	// rack-1 ..., each one network namespace and one kwok that runs RackSize
	// nodes (rack-R-node-1 ..., label vigil.io/rack=rack-R). The sandbox's node
	// operations (Stop, Start, Partition, AddProcess, ...) then take rack names.
	Racks int
	// RackSize is the nodes per rack, 1 to MaxRackSize; default 50.
	RackSize int
	// Kubelet is what runs each node: KubeletKwok (default) or KubeletReal,
	// which needs the node images (NodeImages, PauseImage), containerd, runc
	// and the CNI plugins (RealNodePrerequisites); not with Racks.
	Kubelet string
	// PodSubnet holds the pod addresses of real nodes: node i (from 0) gets
	// the /24 at PodSubnet + 256i. Its routes live in the host's namespace,
	// so two sandboxes up at once need different ones. Default 10.214.0.0/16.
	PodSubnet string
	// NodeImages are image tarballs (docker-archive or OCI) imported into
	// every real node's containerd at its first boot; no registry is used.
	NodeImages []string
	// PauseImage is the reference of the image of NodeImages that runs as
	// each pod's sandbox on real nodes (containerd's sandbox_image).
	PauseImage string
	// NodeStatusUpdateFrequency is each real kubelet's nodeStatusUpdateFrequency:
	// how often it computes its Node's status, and so how soon a volume it is
	// about to mount is reported in status.volumesInUse, which it waits for
	// before staging it. 0: the kubelet's default, 10 s. Real nodes only.
	NodeStatusUpdateFrequency time.Duration
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

// MaxRacks and MaxRackSize bound a scale sandbox (20 racks of 100: 2,000 nodes).
const (
	MaxRacks    = 20
	MaxRackSize = 100
)

// DefaultPodSubnet is the pod addresses of real nodes when none is given: a
// /24 per node.
const DefaultPodSubnet = "10.214.0.0/16"

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
	if c.Racks > 0 && c.RackSize == 0 {
		c.RackSize = 50
	}
	if c.Kubelet == "" {
		c.Kubelet = KubeletKwok
	}
	if c.PodSubnet == "" {
		c.PodSubnet = DefaultPodSubnet
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
	switch {
	case c.Racks != 0 && c.Nodes != 0:
		return fmt.Errorf("%w: Nodes %d and Racks %d: give one of them (a scale sandbox's nodes are Racks × RackSize)",
			ErrInvalidConfig, c.Nodes, c.Racks)
	case c.Racks < 0 || c.Racks > MaxRacks:
		return fmt.Errorf("%w: Racks %d: want 0 (no racks) or 1 to %d", ErrInvalidConfig, c.Racks, MaxRacks)
	case c.Racks > 0 && (c.RackSize < 1 || c.RackSize > MaxRackSize):
		return fmt.Errorf("%w: RackSize %d: want 1 to %d", ErrInvalidConfig, c.RackSize, MaxRackSize)
	case c.Racks == 0 && (c.Nodes < 1 || c.Nodes > MaxNodes):
		return fmt.Errorf("%w: Nodes %d: want 1 to %d (or Racks for a scale sandbox)", ErrInvalidConfig, c.Nodes, MaxNodes)
	}
	if err := c.validateKubelet(); err != nil {
		return err
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
	if need := c.links() * 4; need > 1<<(32-p.Bits()) {
		return fmt.Errorf("%w: Subnet %q holds fewer than the %d addresses %d node links need", ErrInvalidConfig, c.Subnet, need, c.links())
	}
	return nil
}

// links is the number of network namespaces and links: one per node, or one
// per rack.
func (c Config) links() int {
	if c.Racks > 0 {
		return c.Racks
	}
	return c.Nodes
}

// RackName is the name of rack r (from 0): rack-1, rack-2, ...
func RackName(r int) string { return fmt.Sprintf("rack-%d", r+1) }

// RackNodeName is the name of node i (from 0) of rack r: rack-1-node-1, ...
func RackNodeName(r, i int) string { return fmt.Sprintf("rack-%d-node-%d", r+1, i+1) }

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
