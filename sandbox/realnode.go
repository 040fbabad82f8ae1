package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Processes of a real node (Config.Kubelet KubeletReal), in their start order.
const (
	NodeContainerd = "containerd"
	NodeKubelet    = "kubelet"
	NodeKubeProxy  = "kube-proxy"
)

// ServiceSubnet is the Service addresses of a real-node sandbox (the API
// server's --service-cluster-ip-range); the `kubernetes` Service gets its
// first address, ServiceIP.
const (
	ServiceSubnet = "10.96.0.0/16"
	ServiceIP     = "10.96.0.1"
)

// cniPluginDir is where Debian's containernetworking-plugins installs the CNI
// plugins.
const cniPluginDir = "/usr/lib/cni"

// RealNodePrerequisites lists what real nodes need on the machine besides
// root: a command or file each, and how to get it.
var RealNodePrerequisites = []struct{ Path, Install string }{
	{"containerd", "apt-get install containerd"},
	{"containerd-shim-runc-v2", "apt-get install containerd"},
	{"ctr", "apt-get install containerd"},
	{"runc", "apt-get install runc"},
	{"nft", "apt-get install nftables"},
	{"unshare", "apt-get install util-linux"},
	{filepath.Join(cniPluginDir, "bridge"), "apt-get install containernetworking-plugins"},
	{filepath.Join(cniPluginDir, "host-local"), "apt-get install containernetworking-plugins"},
	{filepath.Join(cniPluginDir, "loopback"), "apt-get install containernetworking-plugins"},
}

// validateKubelet checks the fields of real nodes (c has its defaults).
func (c Config) validateKubelet() error {
	switch c.Kubelet {
	case KubeletKwok:
		if len(c.NodeImages) > 0 || c.PauseImage != "" || c.NodeStatusUpdateFrequency != 0 {
			return fmt.Errorf("%w: NodeImages, PauseImage and NodeStatusUpdateFrequency are for Kubelet %q, not %q", ErrInvalidConfig, KubeletReal, c.Kubelet)
		}
		return nil
	case KubeletReal:
	default:
		return fmt.Errorf("%w: Kubelet %q: want %q (a kwok per node) or %q (a kubelet, containerd, CNI and kube-proxy per node)",
			ErrInvalidConfig, c.Kubelet, KubeletKwok, KubeletReal)
	}
	if c.Racks > 0 {
		return fmt.Errorf("%w: Kubelet %q with Racks: a rack's nodes are one kwok; real nodes are one node each (Nodes)", ErrInvalidConfig, KubeletReal)
	}
	if c.PauseImage == "" || len(c.NodeImages) == 0 {
		return fmt.Errorf("%w: Kubelet %q needs NodeImages (image tarballs to import) and PauseImage (the pod sandbox's image among them)",
			ErrInvalidConfig, KubeletReal)
	}
	if f := c.NodeStatusUpdateFrequency; f < 0 || f%time.Millisecond != 0 {
		return fmt.Errorf("%w: NodeStatusUpdateFrequency %s: want 0 (the kubelet's default, 10s) or a positive duration in milliseconds",
			ErrInvalidConfig, f)
	}
	p, err := netip.ParsePrefix(c.PodSubnet)
	if err != nil || !p.Addr().Is4() || p.Bits() > 24 || p.Masked() != p {
		return fmt.Errorf("%w: PodSubnet %q: want an IPv4 network of /24 or larger, e.g. 10.214.0.0/16", ErrInvalidConfig, c.PodSubnet)
	}
	if need := c.Nodes * 256; need > 1<<(32-p.Bits()) {
		return fmt.Errorf("%w: PodSubnet %q holds fewer than the %d /24s of %d nodes", ErrInvalidConfig, c.PodSubnet, c.Nodes, c.Nodes)
	}
	return nil
}

// realPreflight checks what real nodes need before Up changes anything.
func realPreflight(cfg Config) error {
	for _, b := range []string{BinKubelet, BinKubeProxy} {
		if fi, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%w: %s not in %s: run `make testbin` (or set VIGIL_TESTBIN)", ErrBinariesMissing, b, cfg.BinDir)
		}
	}
	for _, p := range RealNodePrerequisites {
		if _, err := exec.LookPath(p.Path); err != nil {
			return fmt.Errorf("%w: %s, which real nodes need, is not installed (Debian: %s)", ErrToolMissing, p.Path, p.Install)
		}
	}
	for _, img := range cfg.NodeImages {
		if _, err := os.Stat(img); err != nil {
			return fmt.Errorf("%w: node image %s: %v", ErrInvalidConfig, img, err)
		}
	}
	if _, err := cgroupHierarchies(); err != nil {
		return err
	}
	for i := 0; i < cfg.Nodes; i++ {
		n := &nodeState{Name: NodeName(i)}
		ctrd := ContainerdConfig{Dir: filepath.Join(n.dir(cfg.WorkDir), "containerd")}
		if err := ctrd.Validate(); err != nil {
			return fmt.Errorf("%w (WorkDir %s)", err, cfg.WorkDir)
		}
		cidr, err := podCIDR(cfg.PodSubnet, i)
		if err != nil {
			return err
		}
		out, _ := exec.Command("ip", "-o", "route", "show", "exact", cidr).Output()
		if len(strings.TrimSpace(string(out))) > 0 {
			return fmt.Errorf("%w: the host already routes pod network %s (PodSubnet %s): another sandbox, or choose another PodSubnet",
				ErrSubnetInUse, cidr, cfg.PodSubnet)
		}
	}
	return nil
}

// podCIDR is the pod network of real node i (from 0): the i-th /24 of subnet.
func podCIDR(subnet string, i int) (string, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil {
		return "", fmt.Errorf("pod subnet %q: %w", subnet, err)
	}
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(256 * i)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 24).String(), nil
}

// realDirs are a real node's directories under its node directory.
type realDirs struct {
	node string
	// varLib is the node's own /var/lib (machineVarLib), kept across boots
	// like a disk; kubelet, under it, is the kubelet's root directory
	// (/var/lib/kubelet in the node's view); pods is its pods' logs.
	varLib, kubelet, pods string
	// run is what a boot starts empty, as a tmpfs would: runc's state, the
	// CNI address leases, the directories containerd gets instead of the
	// host's (containerdWrapper).
	run string
	// ctrd is the node's containerd: its root (the image store) is kept
	// across boots, as on a disk; a boot empties its state.
	ctrd ContainerdConfig
}

func dirsOf(st *state, n *nodeState) realDirs {
	d := n.dir(st.WorkDir)
	run := filepath.Join(d, "run")
	varLib := filepath.Join(d, varLibDir)
	return realDirs{node: d, varLib: varLib, kubelet: filepath.Join(varLib, "kubelet"), pods: filepath.Join(d, "pod-logs"), run: run,
		ctrd: ContainerdConfig{Dir: filepath.Join(d, "containerd"), SandboxImage: st.PauseImage, CNIBinDir: cniPluginDir,
			RuncRoot: filepath.Join(run, "runc")}}
}

// varLibDir is a real node's own /var/lib, under its node directory.
const varLibDir = "var-lib"

// machineVarLib is the directory every real node has to itself at the same
// path, as every machine does: its kubelet and its containerd see the
// node's varLibDir there, so that the kubelet's root directory is
// /var/lib/kubelet on every node and a DaemonSet's hostPath under /var/lib
// (a CSI node plugin's state, the kubelet's plugin directories) is each
// node's own. The host's /var/lib is left alone.
const machineVarLib = "/var/lib"

// MachineKubeletRoot is the kubelet's --root-dir on a real node, in the
// node's own view: the path the kubelet gives a CSI node plugin (staging and
// target paths) and a pod's hostPath names. KubeletRoot is the same
// directory as the host sees it.
const MachineKubeletRoot = machineVarLib + "/kubelet"

// KubeletRoot is real node node's kubelet root directory as the host sees
// it (MachineKubeletRoot in the node's view): its plugins_registry (where a
// CSI driver registers) and plugins directories are under it.
func (s *Sandbox) KubeletRoot(node string) string {
	return filepath.Join(s.NodeDir(node), varLibDir, "kubelet")
}

// MachineDir is path, a directory of real node node's own /var/lib as the
// node sees it (MachineKubeletRoot, a hostPath of a pod there), as the host
// sees it; an error for a path outside /var/lib, which nodes share with the
// host.
func (s *Sandbox) MachineDir(node, path string) (string, error) {
	rel, err := filepath.Rel(machineVarLib, filepath.Clean(path))
	if err != nil || !filepath.IsAbs(path) || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: %s is not under %s, the only directory a real node has to itself", ErrInvalidConfig, path, machineVarLib)
	}
	return filepath.Join(s.NodeDir(node), varLibDir, rel), nil
}

func (d realDirs) socket() string { return d.ctrd.Socket() }

// setupRealNodeNet gives node n the routes of a machine on a real network: a
// default route through the host end of its link (the API server's Service
// endpoint is another node's host end), on the host a route to n's pods
// through n, and forwarding of what arrives over n's link, so that pods of
// different nodes reach each other through the host.
func setupRealNodeNet(n *nodeState) error {
	steps := [][]string{
		{"-n", n.NetNS, "route", "add", "default", "via", n.HostIP},
		{"route", "add", n.PodCIDR, "via", n.NodeIP, "dev", n.HostVeth},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return fmt.Errorf("network of %s: %w", n.Name, err)
		}
	}
	f := filepath.Join("/proc/sys/net/ipv4/conf", n.HostVeth, "forwarding")
	if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("network of %s: %w", n.Name, err)
	}
	return nil
}

// bootRealNode starts real node n: an empty run directory (a boot), its
// cgroup, containerd (the node images imported at the first boot), the
// kubelet and kube-proxy, then its registered processes, all in its network
// namespace and its cgroup.
func bootRealNode(st *state, n *nodeState, env []string) error {
	d := dirsOf(st, n)
	for _, dir := range []string{d.run, d.ctrd.StateDir()} {
		if err := cleanupMounts(dir); err != nil {
			return err
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("boot %s: %w", n.Name, err)
		}
	}
	for _, dir := range []string{d.run, d.varLib, d.kubelet, d.pods} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("boot %s: %w", n.Name, err)
		}
	}
	if err := writeRealNodeConfigs(st, n, d); err != nil {
		return err
	}
	if err := createCgroup(n.Cgroup); err != nil {
		return err
	}
	for _, dir := range []string{d.varLib, d.kubelet} {
		if err := shareMount(dir); err != nil {
			return fmt.Errorf("boot %s: %w", n.Name, err)
		}
	}
	n.System = []*proc{{ProcessSpec: ProcessSpec{Name: NodeContainerd, Args: containerdArgs(d)}, Log: filepath.Join(d.node, "containerd.log")}}
	if err := startProc(n, n.System[0], env); err != nil {
		return err
	}
	if err := waitContainerd(d.socket(), 30*time.Second); err != nil {
		return fmt.Errorf("boot %s: %w (see %s)", n.Name, err, n.System[0].Log)
	}
	if !n.ImagesImported {
		if err := importImages(d.socket(), st.NodeImages); err != nil {
			return fmt.Errorf("boot %s: %w", n.Name, err)
		}
		n.ImagesImported = true
	}
	n.System = append(n.System,
		&proc{ProcessSpec: ProcessSpec{Name: NodeKubelet, Args: kubeletArgs(st, n, d)}, Log: filepath.Join(d.node, "kubelet.log")},
		&proc{ProcessSpec: ProcessSpec{Name: NodeKubeProxy, Args: []string{filepath.Join(st.BinDir, BinKubeProxy),
			"--config", filepath.Join(d.node, "kube-proxy.yaml")}}, Log: filepath.Join(d.node, "kube-proxy.log")})
	for _, p := range append(n.System[1:], n.Hooks...) {
		if err := startProc(n, p, env); err != nil {
			return err
		}
	}
	return nil
}

// waitContainerd waits until containerd answers on socket.
func waitContainerd(socket string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return Poll(ctx, timeout, "containerd answering on "+socket, func(ctx context.Context) (bool, string, error) {
		out, err := exec.CommandContext(ctx, "ctr", "-a", socket, "version").CombinedOutput()
		return err == nil, lastLines(string(out), 2), nil
	}, nil)
}

// importImages imports image tarballs into containerd's k8s.io namespace,
// the kubelet's.
func importImages(socket string, images []string) error {
	for _, img := range images {
		out, err := exec.Command("ctr", "-a", socket, "-n", ContainerdNamespace, "images", "import", img).CombinedOutput()
		if err != nil {
			return fmt.Errorf("import image %s: %v: %s", img, err, lastLines(string(out), 5))
		}
	}
	return nil
}

// shareMount makes dir (the node's /var/lib, then the kubelet's root
// directory in it) a shared mount in the host's mount namespace, as the
// kubelet itself does with its root directory: the kubelet and containerd
// run in mount namespaces of their own (kubeletArgs, containerdArgs) whose
// copies of it are peers, so that what is mounted there by any of them is
// seen by all and by the host: the pods' secrets and tokens the kubelet
// mounts, the staging and publishing of a CSI node plugin, whether it runs
// on the host or in a container with Bidirectional propagation (which
// containerd allows only on a shared mount). The kubelet, finding its root
// directory a shared mount already, mounts nothing on it.
func shareMount(dir string) error {
	mps, err := mountsUnder(filepath.Dir(dir))
	if err != nil {
		return err
	}
	mounted := false
	for _, m := range mps {
		mounted = mounted || m.path == dir
	}
	if !mounted {
		if out, err := exec.Command("mount", "--bind", dir, dir).CombinedOutput(); err != nil {
			return fmt.Errorf("bind %s: %v: %s", dir, err, out)
		}
	}
	if out, err := exec.Command("mount", "--make-rshared", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("make %s shared: %v: %s", dir, err, out)
	}
	return nil
}

// containerdArgs is containerd's command line: containerdWrapper in a mount
// namespace of its own (propagation unchanged: the wrapper makes it the
// node's, nodeMountNamespace), so that it sees what the kubelet and a CSI
// node plugin mount, while what it mounts (the containers' root file
// systems, the pods' network namespaces) stays in it and goes when its last
// process dies, at a power cut.
func containerdArgs(d realDirs) []string {
	return append([]string{"unshare", "--mount", "--propagation", "unchanged", "--", "sh", filepath.Join(d.node, "containerd-wrapper.sh")},
		d.ctrd.Args()...)
}

// nodeMountsScript is the script, in a real node's directory, that
// InNodeMounts runs a process through.
const nodeMountsScript = "node-mounts.sh"

// InNodeMounts is the command prefix that runs a process of a real node
// (AddProcess, RunOnNode; nodeDir may be "$VIGIL_NODE_DIR") with the node's
// own view of the file system, as its kubelet and containerd have it
// (nodeMountNamespace): the node's /var/lib at /var/lib, the rest the
// host's. A CSI node plugin run as a host process needs it to find the
// paths the kubelet gives it (under MachineKubeletRoot); what it mounts
// under /var/lib reaches the kubelet and the host, what it mounts elsewhere
// stays in its namespace.
func InNodeMounts(nodeDir string) []string {
	return []string{"unshare", "--mount", "--propagation", "unchanged", "--", "sh", filepath.Join(nodeDir, nodeMountsScript)}
}

// nodeMountsWrapper is the script of InNodeMounts: the node's mount
// namespace, then the process (its arguments).
func nodeMountsWrapper(d realDirs) string {
	return "set -e\n" + nodeMountNamespace(d) + "exec \"$@\"\n"
}

// nodeMountNamespace is the start of both wrappers' scripts: it makes the
// mount namespace the script runs in the node's own. Every mount becomes a
// slave of the host's (what the host mounts is seen, what is mounted here
// stays here), except the node's /var/lib and what is under it, which stay
// peers of the host's (shareMount); then that directory is the namespace's
// /var/lib, with its mounts (the kubelet's root directory). A mount that
// went between the listing and its turn (another node's kubelet unmounting a
// pod's volume meanwhile) is passed over; one that is still there and
// cannot be made a slave fails the script.
func nodeMountNamespace(d realDirs) string {
	return fmt.Sprintf(`awk '{print $5}' /proc/self/mountinfo | while read -r m; do
	case "$m" in %[1]q|%[1]q/*) ;; *) if ! mount --make-slave "$m" && mountpoint -q "$m"; then exit 1; fi ;; esac
done
mount --rbind %[1]s %[2]s
`, d.varLib, machineVarLib)
}

// hostDirsOfContainerd are directories that containerd 1.6 and the CNI
// plugins use whatever their configuration says: the shims' sockets
// (/run/containerd/s) and libcni's cache of results (in the node's own
// /var/lib). containerdWrapper gives the node its own in its run directory,
// which a boot empties; nothing of it is left in the host's /run.
var hostDirsOfContainerd = []string{"/run/containerd", "/var/lib/cni"}

// containerdWrapper is the script containerd starts through: the node's
// mount namespace (nodeMountNamespace), each of hostDirsOfContainerd
// replaced by a directory of the node's run directory (in containerd's mount
// namespace only), then containerd.
func containerdWrapper(d realDirs) string {
	var b strings.Builder
	b.WriteString("set -e\n" + nodeMountNamespace(d))
	for _, h := range hostDirsOfContainerd {
		own := filepath.Join(d.run, "host"+strings.ReplaceAll(h, "/", "-"))
		fmt.Fprintf(&b, "mkdir -p %s %s\nmount --bind %s %s\n", own, h, own, h)
	}
	b.WriteString("exec \"$@\"\n")
	return b.String()
}

// kernelTunables are the sysctls the kubelet sets at its start when they
// differ from what it wants (vm.overcommit_memory=1, kernel.panic=10,
// kernel.panic_on_oops=1, ...): machine-wide settings a sandbox must not
// change. The kubelet's mount namespace shows it files holding the values it
// wants instead, so it finds nothing to change.
var kernelTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// kubeletWrapper is the script the kubelet starts through, in a mount
// namespace of its own: /proc private in it, the node's mount namespace
// (nodeMountNamespace), kernelTunables shown as files, then the kubelet (its
// arguments). It is a file, not an argument: a node process's arguments
// have $VARIABLES expanded.
func kubeletWrapper(d realDirs) string {
	var b strings.Builder
	b.WriteString("set -e\nmount --make-rprivate /proc\n" + nodeMountNamespace(d))
	keys := make([]string, 0, len(kernelTunables))
	for k := range kernelTunables {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		f := filepath.Join(d.run, "sysctl-"+strings.ReplaceAll(k, "/", "."))
		fmt.Fprintf(&b, "echo %s > %s\nmount --bind %s /proc/sys/%s\n", kernelTunables[k], f, f, k)
	}
	b.WriteString("exec \"$@\"\n")
	return b.String()
}

// kubeletArgs is the kubelet's command line: kubeletWrapper in a mount
// namespace of its own (propagation unchanged, so that its root directory
// stays a peer of the host's), its root directory MachineKubeletRoot.
func kubeletArgs(st *state, n *nodeState, d realDirs) []string {
	return []string{"unshare", "--mount", "--propagation", "unchanged", "--", "sh", filepath.Join(d.node, "kubelet-wrapper.sh"),
		filepath.Join(st.BinDir, BinKubelet), "--config", filepath.Join(d.node, "kubelet.yaml"),
		"--kubeconfig", n.kwokKubeconfig(st.WorkDir), "--root-dir", MachineKubeletRoot,
		"--hostname-override", n.Name, "--node-ip", n.NodeIP}
}

// stopRealNode is the rest of real node n's power cut, once its registered
// processes got SIGKILL: everything in its cgroup (containerd's shims and the
// containers) is killed, and what the machine's power would take with it
// goes too: its mounts (those under its /var/lib: the kubelet's, a CSI node
// plugin's; the containers' root file systems and the pods' network
// namespaces go with containerd's mount namespace) and its cgroups. Its
// /var/lib is a disk: its files stay for the next boot.
func stopRealNode(st *state, n *nodeState) error {
	if err := killCgroup(n.Cgroup, 10*time.Second); err != nil {
		return fmt.Errorf("power cut of %s: %w", n.Name, err)
	}
	d := dirsOf(st, n)
	var errs []error
	for _, dir := range []string{d.run, d.varLib, d.ctrd.Dir} {
		errs = append(errs, cleanupMounts(dir), unmount(dir))
	}
	errs = append(errs, removeCgroup(n.Cgroup))
	n.System = nil
	return errors.Join(errs...)
}

// NodePIDs lists every live process of real node node: its cgroup's, which
// holds containerd, its shims, the containers, the kubelet, kube-proxy and
// the registered processes. A kwok node has no cgroup: ErrInvalidConfig.
func (s *Sandbox) NodePIDs(node string) ([]int, error) {
	_, n, err := s.loadNode(node)
	if err != nil {
		return nil, err
	}
	if !n.real() {
		return nil, fmt.Errorf("%w: node %s runs kwok, not a real kubelet: it has no cgroup of its own", ErrInvalidConfig, node)
	}
	return cgroupPIDs(n.Cgroup)
}

// ProcessIDs lists every live process of the sandbox: the control plane,
// the forwarders, the host processes, and each node's processes (a real
// node's whole cgroup), e.g. to add up the sandbox's memory.
func (s *Sandbox) ProcessIDs() ([]int, error) {
	st, err := loadState(s.workDir)
	if err != nil {
		return nil, err
	}
	var out []int
	ps := append(append([]*proc{}, st.Forwarders...), st.Host...)
	for _, n := range st.Nodes {
		ps = append(append(ps, n.procs()...), n.Once...)
		if n.real() {
			pids, err := cgroupPIDs(n.Cgroup)
			if err != nil {
				return nil, err
			}
			out = append(out, pids...)
		}
	}
	for _, p := range ps {
		if p.alive() {
			out = append(out, p.PID)
		}
	}
	files, _ := filepath.Glob(filepath.Join(st.WorkDir, "kwok", "clusters", st.Name, "pids", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &pid); err == nil {
			if _, err := procStartTime(pid); err == nil {
				out = append(out, pid)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// readyTimeout is how long Up waits for the nodes to be Ready: a real
// kubelet starts in seconds on an idle machine, but in tens of seconds on a
// loaded one.
func readyTimeout(st *state) time.Duration {
	if st.Kubelet == KubeletReal {
		return 3 * time.Minute
	}
	return 60 * time.Second
}
