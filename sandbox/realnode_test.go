package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func realConfig() Config {
	return Config{Nodes: 2, Kubelet: KubeletReal, NodeImages: []string{"pause.tar"}, PauseImage: "localhost/pause:1"}
}

func TestConfig_Validate_Kubelet(t *testing.T) {
	if err := realConfig().Validate(); err != nil {
		t.Fatalf("Validate(real) = %v, want nil", err)
	}
	with := func(f func(c *Config)) Config {
		c := realConfig()
		f(&c)
		return c
	}
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"unknown kubelet":    {with(func(c *Config) { c.Kubelet = "docker" }), `Kubelet "docker": want "kwok"`},
		"real with racks":    {with(func(c *Config) { c.Nodes, c.Racks = 0, 2 }), "with Racks"},
		"no images":          {with(func(c *Config) { c.NodeImages = nil }), "needs NodeImages"},
		"no pause image":     {with(func(c *Config) { c.PauseImage = "" }), "needs NodeImages"},
		"pod subnet not net": {with(func(c *Config) { c.PodSubnet = "10.214.0.1/16" }), "PodSubnet"},
		"pod subnet /25":     {with(func(c *Config) { c.PodSubnet = "10.214.0.0/25" }), "PodSubnet"},
		"pod subnet ipv6":    {with(func(c *Config) { c.PodSubnet = "fd00::/48" }), "PodSubnet"},
		"pod subnet small":   {with(func(c *Config) { c.Nodes, c.PodSubnet = 3, "10.214.0.0/23" }), "fewer than the 3 /24s"},
		"kwok with images":   {Config{Nodes: 1, NodeImages: []string{"x.tar"}}, "are for Kubelet"},
		"kwok with status":   {Config{Nodes: 1, NodeStatusUpdateFrequency: time.Second}, "are for Kubelet"},
		"negative status":    {with(func(c *Config) { c.NodeStatusUpdateFrequency = -time.Second }), "NodeStatusUpdateFrequency -1s"},
		"status in ns":       {with(func(c *Config) { c.NodeStatusUpdateFrequency = 1500 * time.Microsecond }), "in milliseconds"},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig saying %q", err, c.want)
			}
		})
	}
}

func TestPodCIDR_Layout(t *testing.T) {
	for i, want := range []string{"10.214.0.0/24", "10.214.1.0/24", "10.214.63.0/24"} {
		got, err := podCIDR("10.214.0.0/16", []int{0, 1, 63}[i])
		if err != nil || got != want {
			t.Errorf("podCIDR = %s, %v; want %s", got, err, want)
		}
	}
}

func TestNewState_RealNodes(t *testing.T) {
	cfg := realConfig()
	cfg.Name, cfg.WorkDir = "rn", t.TempDir()
	st, err := newState(cfg.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if st.Kubelet != KubeletReal || st.PauseImage != cfg.PauseImage || st.PodSubnet != "10.214.0.0/16" {
		t.Errorf("state %+v", st)
	}
	for i, n := range st.Nodes {
		if !n.real() || n.Cgroup != n.NetNS || n.PodCIDR != []string{"10.214.0.0/24", "10.214.1.0/24"}[i] {
			t.Errorf("node %s: cgroup %q (netns %q), pod CIDR %q", n.Name, n.Cgroup, n.NetNS, n.PodCIDR)
		}
	}
	kwok, err := newState(Config{Nodes: 1, Name: "k", WorkDir: t.TempDir()}.withDefaults())
	if err != nil || kwok.Nodes[0].real() || kwok.Kubelet != "" {
		t.Errorf("a kwok node is real (%v): %+v", err, kwok.Nodes[0])
	}
}

// The kubelet must not change the machine's kernel settings: it runs in a
// mount namespace of its own where each sysctl it would set shows the value
// it wants, and its root directory stays a peer of the host's.
func TestKubeletArgs_KernelTunablesHidden(t *testing.T) {
	st := &state{WorkDir: "/w", BinDir: "/b", Name: "s"}
	n := &nodeState{Name: "node-1", NodeIP: "10.213.0.2"}
	line := strings.Join(kubeletArgs(st, n, dirsOf(st, n)), " ")
	if !strings.HasPrefix(line, "unshare --mount --propagation unchanged -- sh /w/nodes/node-1/kubelet-wrapper.sh /b/kubelet ") {
		t.Errorf("kubelet not in a mount namespace of its own that keeps propagation: %s", line)
	}
	if strings.Contains(line, "$") {
		t.Errorf("a node process's arguments get $VARIABLES expanded; the kubelet's hold one: %s", line)
	}
	script := kubeletWrapper(dirsOf(st, n))
	for k, v := range kernelTunables {
		f := "/w/nodes/node-1/run/sysctl-" + strings.ReplaceAll(k, "/", ".")
		if !strings.Contains(script, "echo "+v+" > "+f+"\nmount --bind "+f+" /proc/sys/"+k+"\n") {
			t.Errorf("sysctl %s not shown as %s:\n%s", k, v, script)
		}
	}
	if !strings.HasPrefix(script, "set -e\nmount --make-rprivate /proc\n") || !strings.HasSuffix(script, "exec \"$@\"\n") {
		t.Errorf("wrapper:\n%s", script)
	}
	for _, w := range []string{"/b/kubelet --config /w/nodes/node-1/kubelet.yaml",
		"--root-dir /var/lib/kubelet", "--hostname-override node-1 --node-ip 10.213.0.2"} {
		if !strings.Contains(line, w) {
			t.Errorf("kubelet command lacks %q: %s", w, line)
		}
	}
}

func TestRealNodeConfigs_OwnDirectories(t *testing.T) {
	st := &state{WorkDir: "/w", Name: "s", PauseImage: "localhost/pause:1", PodSubnet: "10.214.0.0/16", LeaseSeconds: 10}
	n := &nodeState{Name: "node-1", NetNS: "vigil-s-node-1", Cgroup: "vigil-s-node-1", PodCIDR: "10.214.0.0/24"}
	d := dirsOf(st, n)
	// Both the kubelet and containerd see the node's own /var/lib, a peer of
	// the host's; every other mount is a slave of the host's.
	nodeNS := `case "$m" in "/w/nodes/node-1/var-lib"|"/w/nodes/node-1/var-lib"/*) ;; *) if ! mount --make-slave "$m" && mountpoint -q "$m"; then exit 1; fi ;; esac
done
mount --rbind /w/nodes/node-1/var-lib /var/lib
`
	if !strings.Contains(kubeletWrapper(d), nodeNS) {
		t.Errorf("kubelet wrapper lacks the node's mount namespace:\n%s", kubeletWrapper(d))
	}
	if got := strings.Join(InNodeMounts("$VIGIL_NODE_DIR"), " "); got != "unshare --mount --propagation unchanged -- sh $VIGIL_NODE_DIR/node-mounts.sh" {
		t.Errorf("InNodeMounts = %s", got)
	}
	if d.kubelet != "/w/nodes/node-1/var-lib/kubelet" {
		t.Errorf("kubelet root on the host %s, want it under the node's /var/lib", d.kubelet)
	}
	for name, c := range map[string]struct {
		body string
		want []string
	}{
		"containerd": {d.ctrd.TOML(), []string{`root = "/w/nodes/node-1/containerd/root"`,
			`state = "/w/nodes/node-1/containerd/state"`, `address = "/w/nodes/node-1/containerd/containerd.sock"`,
			`sandbox_image = "localhost/pause:1"`, "restrict_oom_score_adj = true", "netns_mounts_under_state_dir = true",
			`Root = "/w/nodes/node-1/run/runc"`, `conf_dir = "/w/nodes/node-1/containerd/cni/net.d"`, `bin_dir = "/usr/lib/cni"`}},
		"cni": {cniConfig(n, d), []string{`"name": "vigil-s-node-1"`, `"subnet": "10.214.0.0/24"`,
			`"dataDir": "/w/nodes/node-1/run/cni-ipam"`, `"ipMasq": false`}},
		"kubelet": {kubeletConfig(st, n, d, "/ca.crt"), []string{"cgroupRoot: /vigil-s-node-1\ncgroupsPerQOS: true\n", "failCgroupV1: false",
			"containerRuntimeEndpoint: unix:///w/nodes/node-1/containerd/containerd.sock", "nodeLeaseDurationSeconds: 10",
			"imageGCHighThresholdPercent: 100", `clientCAFile: "/ca.crt"`, "nodefs.available: 1%\n"}},
		"node-mounts": {nodeMountsWrapper(d), []string{"set -e\n", nodeNS, `exec "$@"`}},
		"containerd-wrapper": {containerdWrapper(d), []string{"set -e\n", nodeNS,
			"mount --bind /w/nodes/node-1/run/host-run-containerd /run/containerd\n",
			"mount --bind /w/nodes/node-1/run/host-var-lib-cni /var/lib/cni\n", `exec "$@"`}},
		"kube-proxy": {kubeProxyConfig(st, n, d), []string{"mode: nftables", `hostnameOverride: "node-1"`,
			`clusterCIDR: "10.214.0.0/16"`, "maxPerCore: 0"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.body, w) {
				t.Errorf("%s configuration lacks %q:\n%s", name, w, c.body)
			}
		}
	}
	if body := kubeletConfig(st, n, d, "/ca.crt"); strings.Contains(body, "nodeStatusUpdateFrequency") {
		t.Errorf("kubelet configuration sets nodeStatusUpdateFrequency without Config.NodeStatusUpdateFrequency:\n%s", body)
	}
	st.NodeStatusUpdateFrequency = 2 * time.Second
	if body := kubeletConfig(st, n, d, "/ca.crt"); !strings.Contains(body, "\nnodeStatusUpdateFrequency: 2s\n") {
		t.Errorf("kubelet configuration with NodeStatusUpdateFrequency 2s:\n%s", body)
	}
}

// A power cut finds a real node's processes by its cgroup: what a process
// of the node starts, in a session of its own, daemonized (as containerd's
// shims are), is in the node's cgroup and dies with it; then the cgroup
// goes.
func TestCgroup_KillsDaemonizedDescendants(t *testing.T) {
	RequireRoot(t)
	hs, err := cgroupHierarchies()
	RequirePrerequisite(t, err == nil, "cgroups mounted under /sys/fs/cgroup")
	rel := "vigil-unit-" + filepath.Base(t.TempDir())
	t.Cleanup(func() {
		_ = killCgroup(rel, 5*time.Second)
		_ = removeCgroup(rel)
	})
	if err := createCgroup(rel); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "log")
	// The child daemonizes a grandchild (setsid, its parent exits) that
	// marks itself with an argument.
	args := inCgroup(rel, []string{"sh", "-c", "setsid sh -c 'exec sleep 1234567' & sleep 7654321"})
	pid, _, err := startDetached("", args, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for deadline := time.Now().Add(10 * time.Second); len(pids) < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if pids, err = cgroupPIDs(rel); err != nil {
			t.Fatal(err)
		}
	}
	if len(pids) != 3 {
		b, _ := os.ReadFile(log)
		t.Fatalf("cgroup %s holds %v, want the shell and its 2 sleeps (log: %s)", rel, pids, b)
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, rel, "cgroup.procs")); err != nil {
			t.Errorf("cgroup %s not in hierarchy %s: %v", rel, h, err)
		}
	}
	if err := killCgroup(rel, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		if _, err := procStartTime(p); err == nil {
			t.Errorf("process %d of the cgroup (started as %d) survived", p, pid)
		}
	}
	if err := removeCgroup(rel); err != nil {
		t.Fatal(err)
	}
	if cgroupExists(rel) {
		t.Errorf("cgroup %s still exists after removeCgroup", rel)
	}
}

// A real node has only /var/lib to itself: MachineDir maps a path there to
// the host's and refuses any other.
func TestMachineDir(t *testing.T) {
	s := &Sandbox{workDir: "/w"}
	for in, want := range map[string]string{
		"/var/lib/kubelet":             "/w/nodes/node-2/var-lib/kubelet",
		"/var/lib/vigil/datapath/../x": "/w/nodes/node-2/var-lib/vigil/x",
		"/var/lib":                     "/w/nodes/node-2/var-lib",
	} {
		if got, err := s.MachineDir("node-2", in); err != nil || got != want {
			t.Errorf("MachineDir(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/var/libx", "/etc", "var/lib/kubelet", "/var/lib/../run"} {
		if got, err := s.MachineDir("node-2", in); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(fmt.Sprint(err), "/var/lib") {
			t.Errorf("MachineDir(%s) = %q, %v; want ErrInvalidConfig naming /var/lib", in, got, err)
		}
	}
}

// The node's mount namespace passes over a mount that went while the script
// ran (mount --make-slave fails, mountpoint says it is gone) and fails on
// one that is still there: mount and mountpoint are stubs here, the list of
// mounts this process's.
func TestNodeMountNamespace_MountGoneMeanwhile(t *testing.T) {
	stubs := t.TempDir()
	for name, body := range map[string]string{
		"mount":      "case \"$1\" in --make-slave) echo \"mount: $2: mount point does not exist.\" >&2; exit 32;; esac\n",
		"mountpoint": "exit \"$MOUNTPOINT_RC\"\n",
	} {
		if err := os.WriteFile(filepath.Join(stubs, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := dirsOf(&state{WorkDir: "/w"}, &nodeState{Name: "node-1"})
	script := "set -e\n" + nodeMountNamespace(d) + "echo reached\n"
	for rc, want := range map[string]bool{"1": true, "0": false} {
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+stubs+":"+os.Getenv("PATH"), "MOUNTPOINT_RC="+rc)
		out, err := cmd.CombinedOutput()
		if got := err == nil && strings.Contains(string(out), "reached"); got != want {
			t.Errorf("mountpoint exits %s (the mount %s): the script went on %t, want %t (err %v):\n%s", rc,
				map[string]string{"1": "gone", "0": "still there"}[rc], got, want, err, out)
		}
	}
}
