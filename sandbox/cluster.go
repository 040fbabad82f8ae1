package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Sandbox is a running sandbox. Its state lives in its work directory, so every
// method can also be used by another process that opened the same directory.
type Sandbox struct {
	workDir string
	logf    func(format string, args ...any)
	rest    *rest.Config
	client  kubernetes.Interface
}

// Up creates the sandbox cfg describes: one network namespace and veth pair per
// node, the control plane (kwokctl, binary runtime, its kwok-controller disabled),
// a forwarder per node link to the API server, the Node objects and one kwok per
// node inside its namespace; it returns once every node is Ready. If Up fails, it
// removes what it created before returning.
func Up(ctx context.Context, cfg Config) (*Sandbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	_, statErr := os.Stat(cfg.WorkDir)
	unlock, err := lockWorkDir(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := loadState(cfg.WorkDir); err == nil {
		return nil, fmt.Errorf("%w: sandbox %q (work dir %s): run `vigil-sandbox down` first", ErrAlreadyUp, cfg.Name, cfg.WorkDir)
	}
	if err := preflight(cfg); err != nil {
		if os.IsNotExist(statErr) {
			os.RemoveAll(cfg.WorkDir) // created only for the lock
		}
		return nil, err
	}
	st, err := newState(cfg)
	if err != nil {
		return nil, err
	}
	if err := st.save(); err != nil {
		return nil, err
	}
	s := &Sandbox{workDir: cfg.WorkDir, logf: cfg.Logf}
	if err := s.up(ctx, cfg, st); err != nil {
		if derr := teardown(st, s.logf); derr != nil {
			// Keep the state, so that `vigil-sandbox down` can try again.
			return nil, errors.Join(err, fmt.Errorf("cleanup after failed up: %w", derr))
		}
		os.RemoveAll(st.WorkDir)
		return nil, err
	}
	return s, nil
}

// preflight checks what Up needs before it changes anything.
func preflight(cfg Config) error {
	if err := CheckBinaries(cfg.BinDir); err != nil {
		return err
	}
	if cfg.Kubelet == KubeletReal {
		if err := realPreflight(cfg); err != nil {
			return err
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: network namespaces and veths need root (euid %d)", ErrNotRoot, os.Geteuid())
	}
	for _, tool := range []string{"ip", "socat"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s not found in PATH: install it (Debian: apt-get install iproute2 socat)", ErrToolMissing, tool)
		}
	}
	if cfg.APIServerPort != 0 {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.APIServerPort)))
		if err != nil {
			return fmt.Errorf("%w: API server port %d: %v", ErrPortInUse, cfg.APIServerPort, err)
		}
		l.Close()
	}
	for i := 0; i < cfg.links(); i++ {
		host, node, err := nodeAddrs(cfg.Subnet, i)
		if err != nil {
			return err
		}
		for _, a := range []string{host.String(), node.String()} {
			if hostHasAddr(a) {
				return fmt.Errorf("%w: %s (subnet %s) is already on this host: another sandbox, or choose another Subnet",
					ErrSubnetInUse, a, cfg.Subnet)
			}
		}
	}
	return nil
}

func newState(cfg Config) (*state, error) {
	st := &state{Name: cfg.Name, WorkDir: cfg.WorkDir, BinDir: cfg.BinDir, Subnet: cfg.Subnet,
		LeaseSeconds: cfg.NodeLeaseDurationSeconds, Kubeconfig: filepath.Join(cfg.WorkDir, "kubeconfig")}
	if cfg.AuditLog {
		st.AuditLog = filepath.Join(cfg.WorkDir, "audit.log")
	}
	if cfg.Kubelet == KubeletReal {
		st.Kubelet, st.PodSubnet, st.NodeImages, st.PauseImage = KubeletReal, cfg.PodSubnet, cfg.NodeImages, cfg.PauseImage
		st.NodeStatusUpdateFrequency = cfg.NodeStatusUpdateFrequency
	}
	for i := 0; i < cfg.links(); i++ {
		host, node, err := nodeAddrs(cfg.Subnet, i)
		if err != nil {
			return nil, err
		}
		n := &nodeState{Name: NodeName(i), Index: i, HostIP: host.String(), NodeIP: node.String()}
		if cfg.Racks > 0 {
			n.Name = RackName(i)
			for j := range cfg.RackSize {
				n.Members = append(n.Members, RackNodeName(i, j))
			}
		}
		n.NetNS, n.HostVeth, n.NodeVeth = linkNames(cfg.Name, n.Name, i)
		n.Kubeconfig = filepath.Join(n.dir(cfg.WorkDir), "kubeconfig")
		if cfg.Kubelet == KubeletReal {
			n.Cgroup = n.NetNS
			if n.PodCIDR, err = podCIDR(cfg.PodSubnet, i); err != nil {
				return nil, err
			}
		}
		st.Nodes = append(st.Nodes, n)
	}
	return st, nil
}

func (s *Sandbox) up(ctx context.Context, cfg Config, st *state) error {
	t0 := time.Now()
	for _, n := range st.Nodes {
		if err := os.MkdirAll(n.dir(st.WorkDir), 0o755); err != nil {
			return fmt.Errorf("create node dir: %w", err)
		}
		if err := createLink(n); err != nil {
			return err
		}
		if n.real() {
			if err := setupRealNodeNet(n); err != nil {
				return err
			}
		}
	}
	s.logf("sandbox: %d node links up (%.1fs)", len(st.Nodes), time.Since(t0).Seconds())
	st.ClusterUp = true // from here on, Down must delete the kwokctl cluster
	if err := st.save(); err != nil {
		return err
	}
	if err := createCluster(ctx, cfg, st); err != nil {
		return err
	}
	s.logf("sandbox: control plane created (%.1fs)", time.Since(t0).Seconds())
	if err := st.save(); err != nil {
		return err
	}
	if err := startForwarders(st); err != nil {
		return err
	}
	if err := writeNodeKubeconfigs(st); err != nil {
		return err
	}
	if err := st.save(); err != nil {
		return err
	}
	if err := s.connect(st); err != nil {
		return err
	}
	if err := s.waitAPIReady(ctx, 60*time.Second); err != nil {
		return err
	}
	s.logf("sandbox: API server ready (%.1fs)", time.Since(t0).Seconds())
	if err := s.applyKwokRBAC(ctx); err != nil {
		return err
	}
	for _, n := range st.Nodes {
		if err := s.createNodes(ctx, n); err != nil {
			return err
		}
		if err := bootNode(st, n); err != nil {
			return err
		}
		if err := st.save(); err != nil {
			return err
		}
	}
	if err := s.WaitNodesReady(ctx, readyTimeout(st)); err != nil {
		return err
	}
	s.logf("sandbox: %d nodes Ready (%.1fs)", len(st.k8sNodes()), time.Since(t0).Seconds())
	return nil
}

// kwokctl runs kwokctl with the sandbox's KWOK_WORKDIR.
func kwokctl(ctx context.Context, st *state, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(st.BinDir, BinKwokctl), args...)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+filepath.Join(st.WorkDir, "kwok"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kwokctl %s: %v: %s", strings.Join(args, " "), err, lastLines(string(out), 15))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kwokctlConfig is the KwokctlConfiguration: everything binds to 127.0.0.1, the
// API server's certificate also names each host end of the node links, and the
// node-monitor timings and default tolerations are the configured ones. The API
// server adds NodeRestriction to its default admission plugins, as every real
// cluster does: a node's own identity (NodeKubeconfig) may change only its own
// Node. The
// controller-manager and the scheduler run without leader election: each is
// alone, and with it they exit when the API server is away longer than their
// renew deadline (10 s), where a kubelet would restart them; nothing restarts
// them here.
func kwokctlConfig(cfg Config, st *state) string {
	var b strings.Builder
	b.WriteString("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokctlConfiguration\noptions:\n")
	b.WriteString("  bindAddress: 127.0.0.1\n  kubeApiserverCertSANs:\n")
	for _, n := range st.Nodes {
		fmt.Fprintf(&b, "  - %q\n", n.HostIP)
	}
	if st.Kubelet == KubeletReal {
		fmt.Fprintf(&b, "  - %q\n", ServiceIP) // the `kubernetes` Service, as pods reach it
	}
	b.WriteString("componentsPatches:\n- name: kube-controller-manager\n  extraArgs:\n")
	fmt.Fprintf(&b, "  - {key: node-monitor-grace-period, value: %q}\n", cfg.NodeMonitorGracePeriod.String())
	fmt.Fprintf(&b, "  - {key: node-monitor-period, value: %q}\n", cfg.NodeMonitorPeriod.String())
	b.WriteString("  - {key: leader-elect, value: \"false\"}\n")
	if cfg.Racks > 0 {
		b.WriteString(scaleQPS)
	}
	b.WriteString("- name: kube-scheduler\n  extraArgs:\n  - {key: leader-elect, value: \"false\"}\n")
	if cfg.Racks > 0 {
		b.WriteString(scaleQPS)
	}
	b.WriteString("- name: kube-apiserver\n  extraArgs:\n")
	fmt.Fprintf(&b, "  - {key: default-unreachable-toleration-seconds, value: \"%d\"}\n", cfg.DefaultTolerationSeconds)
	fmt.Fprintf(&b, "  - {key: default-not-ready-toleration-seconds, value: \"%d\"}\n", cfg.DefaultTolerationSeconds)
	fmt.Fprintf(&b, "  - {key: advertise-address, value: %q}\n", st.Nodes[0].HostIP)
	b.WriteString("  - {key: enable-admission-plugins, value: NodeRestriction}\n")
	if st.Kubelet == KubeletReal {
		// Pods reach the API server through the `kubernetes` Service, and
		// the API server reaches real kubelets (logs, exec) as the admin.
		pki := filepath.Join(st.WorkDir, "kwok", "clusters", st.Name, "pki")
		fmt.Fprintf(&b, "  - {key: service-cluster-ip-range, value: %q}\n", ServiceSubnet)
		fmt.Fprintf(&b, "  - {key: kubelet-client-certificate, value: %q}\n", filepath.Join(pki, "admin.crt"))
		fmt.Fprintf(&b, "  - {key: kubelet-client-key, value: %q}\n", filepath.Join(pki, "admin.key"))
		b.WriteString("  - {key: kubelet-preferred-address-types, value: InternalIP}\n")
	}
	if st.AuditLog != "" {
		fmt.Fprintf(&b, "  - {key: audit-policy-file, value: %q}\n", auditPolicyPath(st))
		fmt.Fprintf(&b, "  - {key: audit-log-path, value: %q}\n", st.AuditLog)
		b.WriteString("  - {key: audit-log-format, value: json}\n  - {key: audit-log-mode, value: blocking}\n")
	}
	return b.String()
}

// scaleQPS lifts the client rate limits of the controller-manager (20/s by
// default) and the scheduler (50/s) for a scale sandbox, whose StatefulSet and
// ReplicaSet controllers and scheduler handle tens of thousands of pods.
const scaleQPS = "  - {key: kube-api-qps, value: \"500\"}\n  - {key: kube-api-burst, value: \"1000\"}\n"

func createCluster(ctx context.Context, cfg Config, st *state) error {
	confPath := filepath.Join(st.WorkDir, "kwokctl.yaml")
	if err := writeAuditPolicy(st); err != nil {
		return err
	}
	if err := os.WriteFile(confPath, []byte(kwokctlConfig(cfg, st)), 0o644); err != nil {
		return fmt.Errorf("write kwokctl config: %w", err)
	}
	bin := func(b string) string { return filepath.Join(st.BinDir, b) }
	args := []string{"create", "cluster", "--name", st.Name, "--runtime", "binary",
		"--disable", "kwok-controller", "--config", confPath, "--kubeconfig", st.Kubeconfig,
		"--etcd-binary", bin(BinEtcd), "--kube-apiserver-binary", bin(BinKubeAPIServer),
		"--kube-controller-manager-binary", bin(BinKubeControllerManager),
		"--kube-scheduler-binary", bin(BinKubeScheduler), "--kwok-controller-binary", bin(BinKwok)}
	if cfg.APIServerPort != 0 {
		args = append(args, "--kube-apiserver-port", strconv.Itoa(cfg.APIServerPort))
	}
	if err := kwokctl(ctx, st, args...); err != nil {
		return err
	}
	kc, err := clientcmd.LoadFromFile(st.Kubeconfig)
	if err != nil {
		return fmt.Errorf("read kubeconfig %s: %w", st.Kubeconfig, err)
	}
	ctxt, ok := kc.Contexts[kc.CurrentContext]
	if !ok || kc.Clusters[ctxt.Cluster] == nil {
		return fmt.Errorf("kubeconfig %s: no current cluster", st.Kubeconfig)
	}
	_, port, err := net.SplitHostPort(strings.TrimPrefix(kc.Clusters[ctxt.Cluster].Server, "https://"))
	if err != nil {
		return fmt.Errorf("kubeconfig %s: server %q: %w", st.Kubeconfig, kc.Clusters[ctxt.Cluster].Server, err)
	}
	st.APIServerPort, err = strconv.Atoi(port)
	return err
}

// startForwarders starts, on the host, one TCP forwarder per node link from the
// host end of the link to the API server on 127.0.0.1.
func startForwarders(st *state) error {
	for _, n := range st.Nodes {
		p := &proc{ProcessSpec: ProcessSpec{Name: "forward-" + n.Name, Args: []string{"socat",
			fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr", st.APIServerPort, n.HostIP),
			fmt.Sprintf("TCP:127.0.0.1:%d", st.APIServerPort)}},
			Log: filepath.Join(st.WorkDir, "forward-"+n.Name+".log")}
		var err error
		p.PID, p.StartTime, err = startDetached("", p.Args, nil, p.Log)
		if p.PID != 0 {
			st.Forwarders = append(st.Forwarders, p)
		}
		if err != nil {
			return fmt.Errorf("forwarder for %s: %w", n.Name, err)
		}
	}
	return nil
}

// writeNodeKubeconfigs writes, per node, the admin kubeconfig with the server
// replaced by the host end of the node's link.
func writeNodeKubeconfigs(st *state) error {
	for _, n := range st.Nodes {
		kc, err := clientcmd.LoadFromFile(st.Kubeconfig)
		if err != nil {
			return fmt.Errorf("read kubeconfig: %w", err)
		}
		for _, c := range kc.Clusters {
			c.Server = fmt.Sprintf("https://%s:%d", n.HostIP, st.APIServerPort)
		}
		if err := clientcmd.WriteToFile(*kc, n.Kubeconfig); err != nil {
			return fmt.Errorf("write kubeconfig of %s: %w", n.Name, err)
		}
		if len(n.Members) > 0 {
			continue // a rack's kwok is fifty nodes at once: no one node's identity fits it
		}
		user := "system:node:" + n.Name
		certPEM, keyPEM, err := signClientCert(filepath.Join(st.WorkDir, "kwok", "clusters", st.Name, "pki"), user, "system:nodes")
		if err != nil {
			return fmt.Errorf("identity of %s's kwok: %w", n.Name, err)
		}
		if err := writeKubeconfig(st, n.kwokKubeconfig(st.WorkDir), user, fmt.Sprintf("https://%s:%d", n.HostIP, st.APIServerPort),
			&clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}); err != nil {
			return err
		}
	}
	return nil
}

// Open attaches to the sandbox whose state is in workDir.
func Open(workDir string) (*Sandbox, error) {
	st, err := loadState(workDir)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{workDir: workDir, logf: func(string, ...any) {}}
	if err := s.connect(st); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Sandbox) connect(st *state) error {
	rc, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return fmt.Errorf("sandbox kubeconfig %s: %w", st.Kubeconfig, err)
	}
	rc.QPS, rc.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("sandbox client: %w", err)
	}
	s.rest, s.client = rc, cs
	return nil
}

// Client is a clientset with the cluster's admin credentials.
func (s *Sandbox) Client() kubernetes.Interface { return s.client }

// RESTConfig is the admin rest.Config; callers may copy and modify it.
func (s *Sandbox) RESTConfig() *rest.Config { return rest.CopyConfig(s.rest) }

// Kubeconfig is the path of the admin kubeconfig (reaches the API on 127.0.0.1).
func (s *Sandbox) Kubeconfig() string { return filepath.Join(s.workDir, "kubeconfig") }

// WorkDir is the sandbox's work directory.
func (s *Sandbox) WorkDir() string { return s.workDir }

func (s *Sandbox) waitAPIReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		_, err := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			log, _ := filepath.Glob(filepath.Join(s.workDir, "kwok", "clusters", "*", "logs", "kube-apiserver.log"))
			tail := ""
			if len(log) > 0 {
				b, _ := os.ReadFile(log[0])
				tail = "\nkube-apiserver.log:\n" + lastLines(string(b), 10)
			}
			return fmt.Errorf("API server not ready after %s: %v%s", timeout, last, tail)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
