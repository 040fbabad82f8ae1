package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/settings"
)

// Vigil's binaries the stack runs, from `make build` (StackConfig.VigilBinDir).
const (
	BinVigilManager    = "vigil-manager"
	BinVigilDatapath   = "vigil-datapath"
	BinVigilEngineNode = "vigil-engine-node"
	BinVigilSandbox    = "vigil-sandbox"
)

// Names of the stack's processes: on the host (StackStatus, logs under
// WorkDir/stack) and on every node (AddProcess, logs in the node's directory).
const (
	StackDatapath    = "datapath"
	StackController  = "csi-controller"
	StackProvisioner = "csi-provisioner"
	StackAttacher    = "csi-attacher"
	StackEngine      = "engine"
	StackKubelet     = "kubelet"
	StackFDKeeper    = "fd-keeper"
)

// The CSI sidecars' API client and workers (deploy/base/csi-controller.yaml
// has the same).
const (
	sidecarQPS      = "50"
	sidecarBurst    = "100"
	attacherWorkers = "50"
)

// DefaultStorageClass is the StorageClass StartStack creates for driver.vigil.io.
const DefaultStorageClass = "vigil"

// StackConfig describes the Vigil volume stack StartStack runs on a sandbox.
type StackConfig struct {
	// VigilBinDir holds vigil-manager, vigil-datapath, vigil-engine-node and vigil-sandbox
	// (`make build` puts them in bin/); required.
	VigilBinDir string
	// TestbinDir holds csi-provisioner and csi-attacher; default the sandbox's
	// BinDir (`make testbin`).
	TestbinDir string
	// DatapathPort is the datapath's port on 127.0.0.1 and on the host end of
	// every node link, or with DatapathServers each server's port on its
	// node's IP; 0 picks a free one.
	DatapathPort int
	// DatapathServers is how many datapath servers run, one a process of
	// each of the first N nodes (stack_servers.go): 0 (the zero value) runs
	// one server on the host instead; else an odd number up to the node
	// count. The zero value stays the host server although `vigil-sandbox up
	// --stack` defaults to 3 on 3 or more nodes: a volume's data has one
	// copy, so a server's node takes the volumes whose data it holds down
	// with it, and the callers that cut a writer's node and need its volume
	// (the demo, the e2e loop, the recovery benchmark) say 0 explicitly.
	DatapathServers int
	// DatapathRaftPort is, with DatapathServers, each server's Raft port on
	// its node's IP; 0 picks a free one.
	DatapathRaftPort int
	// StorageClass names the StorageClass created for dynamic provisioning;
	// default DefaultStorageClass.
	StorageClass string
	// HeartbeatInterval is each engine's heartbeat period; default 1s.
	HeartbeatInterval time.Duration
	// KubeletPollInterval bounds the time between two syncs of each node's
	// kubelet stand-in; default 1s.
	KubeletPollInterval time.Duration
	// Auth is how callers prove who they are to the datapath; default
	// StackAuthTokenReview. The datapath serves TLS either way.
	Auth StackAuth
	// TokenReviewOutageGrace is the datapath's --token-review-outage-grace
	// with StackAuthTokenReview: how long a token the API server accepted is
	// still accepted to a new connection while TokenReviews fail; 0 leaves the
	// datapath's default. Tests of an API server outage shorten it.
	TokenReviewOutageGrace time.Duration
	// DatapathPowerLoss puts the datapath's data directory on the power-loss
	// layer (StackPowerFS), so that CutDatapathPower loses what the datapath
	// had not fsynced, as a power cut of its machine would. Test tooling.
	DatapathPowerLoss bool
}

// Stack is a running Vigil volume stack: where its parts listen. It is also
// written to WorkDir/stack/stack.json (see Sandbox.Stack).
type Stack struct {
	// DatapathAddr is what a client's --datapath takes: the datapath on the
	// host (127.0.0.1:PORT; node processes reach it on VIGIL_HOST_IP:PORT,
	// through the node's link, so that a partition cuts it off too), or with
	// servers on nodes every server's address, comma-separated
	// (DatapathAddrs splits it).
	DatapathAddr string `json:"datapathAddr"`
	// DatapathPort is the port of DatapathAddr (of every server's).
	DatapathPort int `json:"datapathPort"`
	// DatapathServers lists the servers on nodes (StackConfig.DatapathServers);
	// empty with the host server.
	DatapathServers []StackServer `json:"datapathServers,omitempty"`
	// RaftPort is every server's Raft port with servers on nodes.
	RaftPort int `json:"raftPort,omitempty"`
	// TokenFile holds the manager's datapath token (the controller role):
	// for `vigil-manager run` and `vigil-datapath status`. Each engine has only its
	// node's (NodeTokenFile), the CSI controller its own (CSITokenFile).
	TokenFile string `json:"tokenFile"`
	// CSITokenFile holds the CSI controller's datapath token.
	CSITokenFile string `json:"csiTokenFile"`
	// CAFile verifies the datapath's TLS certificate (--datapath-ca-file).
	CAFile string `json:"caFile"`
	// Auth is how callers prove who they are (StackConfig.Auth).
	Auth StackAuth `json:"auth"`
	// ControllerEndpoint is Vigil's CSI controller socket (unix://...).
	ControllerEndpoint string `json:"controllerEndpoint"`
	// ControllerKubeconfig is the identity of the CSI controller and its
	// sidecars: the ServiceAccount vigil-csi-controller of deploy/.
	ControllerKubeconfig string `json:"controllerKubeconfig"`
	// StorageClass is the StorageClass of driver.vigil.io.
	StorageClass string `json:"storageClass"`
	// Dir holds the stack's files and the logs of its host processes.
	Dir string `json:"dir"`
	// DatapathSynced, when the datapath runs on the power-loss layer
	// (StackConfig.DatapathPowerLoss), is the layer's backing directory: what
	// the datapath has fsynced. Empty otherwise.
	DatapathSynced string `json:"datapathSynced,omitempty"`
}

// NodeCSIEndpoint is the CSI socket of the engine of a node whose directory
// (VIGIL_NODE_DIR) is nodeDir.
func NodeCSIEndpoint(nodeDir string) string {
	return "unix://" + filepath.Join(nodeDir, "engine", "csi.sock")
}

func (c StackConfig) withDefaults(binDir string) (StackConfig, error) {
	if c.VigilBinDir == "" {
		return c, fmt.Errorf("%w: StackConfig.VigilBinDir is empty: give the directory of `make build`'s binaries (bin/)", ErrInvalidConfig)
	}
	if c.TestbinDir == "" {
		c.TestbinDir = binDir
	}
	if c.StorageClass == "" {
		c.StorageClass = DefaultStorageClass
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.KubeletPollInterval == 0 {
		c.KubeletPollInterval = time.Second
	}
	if c.Auth == "" {
		c.Auth = StackAuthTokenReview
	}
	if c.Auth != StackAuthTokenReview && c.Auth != StackAuthStatic {
		return c, fmt.Errorf("%w: Auth %q: want %q (ServiceAccount tokens, TokenReview) or %q (a tokens file)",
			ErrInvalidConfig, c.Auth, StackAuthTokenReview, StackAuthStatic)
	}
	if c.DatapathPort < 0 || c.DatapathPort > 65535 {
		return c, fmt.Errorf("%w: DatapathPort %d: want 0 (any free port) to 65535", ErrInvalidConfig, c.DatapathPort)
	}
	if c.DatapathRaftPort < 0 || c.DatapathRaftPort > 65535 || (c.DatapathRaftPort != 0 && c.DatapathRaftPort == c.DatapathPort) {
		return c, fmt.Errorf("%w: DatapathRaftPort %d: want 0 (any free port) to 65535, not DatapathPort", ErrInvalidConfig, c.DatapathRaftPort)
	}
	if c.DatapathServers != 0 && c.DatapathPowerLoss {
		return c, fmt.Errorf("%w: DatapathPowerLoss with DatapathServers %d: the power-loss layer is the host server's; with servers on nodes, cut a node's power (Stop)",
			ErrInvalidConfig, c.DatapathServers)
	}
	if c.DatapathServers == 0 && c.DatapathRaftPort != 0 {
		return c, fmt.Errorf("%w: DatapathRaftPort %d without DatapathServers: the host server's Raft runs in process", ErrInvalidConfig, c.DatapathRaftPort)
	}
	if c.TokenReviewOutageGrace < 0 || (c.TokenReviewOutageGrace > 0 && c.Auth != StackAuthTokenReview) {
		return c, fmt.Errorf("%w: TokenReviewOutageGrace %s with Auth %q: want 0 (the datapath's default), or more with Auth %q",
			ErrInvalidConfig, c.TokenReviewOutageGrace, c.Auth, StackAuthTokenReview)
	}
	if c.HeartbeatInterval < 0 || c.KubeletPollInterval < 0 {
		return c, fmt.Errorf("%w: HeartbeatInterval %s, KubeletPollInterval %s: want 0 (default) or more",
			ErrInvalidConfig, c.HeartbeatInterval, c.KubeletPollInterval)
	}
	for _, b := range []string{filepath.Join(c.VigilBinDir, BinVigilManager), filepath.Join(c.VigilBinDir, BinVigilDatapath), filepath.Join(c.VigilBinDir, BinVigilEngineNode),
		filepath.Join(c.VigilBinDir, BinVigilSandbox), filepath.Join(c.TestbinDir, BinCSIProvisioner), filepath.Join(c.TestbinDir, BinCSIAttacher)} {
		if fi, err := os.Stat(b); err != nil || fi.Mode()&0o111 == 0 {
			return c, fmt.Errorf("%w: %s: run `make build` and `make testbin`", ErrBinariesMissing, b)
		}
	}
	return c, nil
}

// StartStack runs Vigil's volume stack on the sandbox: on the host, the datapath
// (127.0.0.1, plus a forwarder on the host end of every node link), Vigil's CSI
// controller (`vigil-manager csi serve`) and the upstream csi-provisioner and
// csi-attacher on its socket; on every node, vigil-engine-node (its CSI node
// service on NodeCSIEndpoint, its boot id from VIGIL_NODE_DIR/boot_id, so that a
// Start is a reboot) and the kubelet stand-in (`vigil-sandbox kubelet`); in the
// API, the CSIDriver driver.vigil.io (attachRequired, podInfoOnMount), a CSINode
// per node and a StorageClass. It returns once every socket answers. Down kills
// all of it and unmounts whatever the engines left. On a scale sandbox (Racks),
// each rack runs one StackHeartbeat process instead of engines and kubelet
// stand-ins: its nodes heartbeat to the datapath but mount nothing. On real
// nodes (Config.Kubelet KubeletReal) each engine runs inside its node (its
// network namespace and cgroup: a power cut kills it with the node) as the
// kubelet's CSI node plugin: its socket under the kubelet's plugins directory
// (EngineEndpoint), registered through the kubelet's plugins_registry, so the
// real kubelet writes the CSINode and stages and publishes Vigil volumes for
// real pods; no kubelet stand-in runs, and StartStack returns once every
// kubelet registered the driver.
//
// Each component runs under its identity of deploy/ (ApplyDeployRBAC, then
// ComponentKubeconfig), never the admin's: the CSI controller and its sidecars
// as vigil-csi-controller, each engine as vigil-engine-node with a token bound
// to its Node. Each kubelet stand-in writes its Node's status as a kubelet
// does, as system:node:NAME (NodeKubeconfig).
//
// The datapath serves TLS with a certificate from a CA made here (Stack.CAFile;
// it names 127.0.0.1 and every node link's host end), and every caller has its
// own identity (cfg.Auth): the manager's token (Stack.TokenFile) and the CSI
// controller's (Stack.CSITokenFile) have the controller role, and each engine
// gets only its node's token (NodeTokenFile), by default a ServiceAccount
// token that TokenRequest bound to its Node, checked by the datapath with
// TokenReview against the sandbox's API server.
func (s *Sandbox) StartStack(ctx context.Context, cfg StackConfig) (*Stack, error) {
	st0, err := loadState(s.workDir)
	if err != nil {
		return nil, err
	}
	cfg, err = cfg.withDefaults(st0.BinDir)
	if err != nil {
		return nil, err
	}
	if err := CheckDatapathServers(cfg.DatapathServers, len(st0.Nodes), len(st0.Nodes[0].Members) > 0); err != nil {
		return nil, err
	}
	if cfg.DatapathPort == 0 {
		if cfg.DatapathPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	for cfg.DatapathServers > 0 && (cfg.DatapathRaftPort == 0 || cfg.DatapathRaftPort == cfg.DatapathPort) {
		if cfg.DatapathRaftPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	dir := filepath.Join(s.workDir, "stack")
	stk := &Stack{DatapathAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.DatapathPort)),
		DatapathPort: cfg.DatapathPort, TokenFile: filepath.Join(dir, "manager.token"), CSITokenFile: filepath.Join(dir, "csi-controller.token"),
		ControllerEndpoint: "unix://" + filepath.Join(dir, "csi.sock"), StorageClass: cfg.StorageClass, Dir: dir, Auth: cfg.Auth}
	if cfg.DatapathServers > 0 {
		stk.DatapathServers, stk.RaftPort = stackServers(cfg, st0), cfg.DatapathRaftPort
		stk.DatapathAddr = strings.Join(stk.DatapathAddrs(), ",")
	}
	if cfg.DatapathPowerLoss {
		stk.DatapathSynced = filepath.Join(dir, datapathSyncedDir)
	}
	if err := os.MkdirAll(filepath.Join(stk.Dir, "datapath"), 0o700); err != nil {
		return nil, fmt.Errorf("create stack dir: %w", err)
	}
	if err := s.stackIdentities(ctx, stk, st0); err != nil {
		return nil, err
	}
	security, err := s.stackSecurity(ctx, cfg, stk, st0)
	if err != nil {
		return nil, err
	}
	if err := writeStackFiles(stk); err != nil {
		return nil, err
	}
	if len(stk.DatapathServers) > 0 {
		err = s.startStackServers(ctx, cfg, stk, security)
	} else {
		err = s.startStackDatapath(ctx, cfg, stk, security)
	}
	if err != nil {
		return nil, err
	}
	if err := s.startStackHost(ctx, cfg, stk); err != nil {
		return nil, err
	}
	if err := s.createStackObjects(ctx, stk, st0); err != nil {
		return nil, err
	}
	if len(st0.Nodes[0].Members) > 0 {
		// A scale sandbox: one heartbeat process per rack stands in for its engines.
		if err := s.AddProcess("", rackHeartbeat(cfg, stk)); err != nil {
			return nil, fmt.Errorf("stack: %w", err)
		}
		return stk, nil
	}
	onReal := st0.Kubelet == KubeletReal
	if err := s.addStackNodeProcesses(cfg, stk, onReal); err != nil {
		return nil, err
	}
	for _, n := range st0.Nodes {
		endpoint := NodeCSIEndpoint(n.dir(s.workDir))
		if onReal {
			endpoint = realEngineEndpoint(n.dir(s.workDir))
		}
		if err := waitSocket(ctx, endpoint, 30*time.Second, n.Name+"'s engine"); err != nil {
			return nil, err
		}
	}
	if onReal {
		if err := s.waitRegistered(ctx, st0.k8sNodes(), 60*time.Second); err != nil {
			return nil, fmt.Errorf("stack: %w", err)
		}
	}
	return stk, nil
}

// Stack reads back what StartStack wrote; ErrNotUp if no stack runs.
func (s *Sandbox) Stack() (*Stack, error) {
	b, err := os.ReadFile(filepath.Join(s.workDir, "stack", "stack.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no Vigil stack in %s (StartStack, or `vigil-sandbox up --stack`)", ErrNotUp, s.workDir)
	}
	if err != nil {
		return nil, fmt.Errorf("read stack: %w", err)
	}
	var stk Stack
	if err := json.Unmarshal(b, &stk); err != nil {
		return nil, fmt.Errorf("parse stack.json: %w", err)
	}
	return &stk, nil
}

// writeStackFiles writes stack.json.
func writeStackFiles(stk *Stack) error {
	b, _ := json.MarshalIndent(stk, "", "  ")
	if err := os.WriteFile(filepath.Join(stk.Dir, "stack.json"), b, 0o644); err != nil {
		return fmt.Errorf("write stack.json: %w", err)
	}
	return nil
}

// stackIdentities applies deploy/'s RBAC and writes the kubeconfigs of the
// stack's components: the CSI controller's, and per node the engine's and
// the kubelet stand-in's.
func (s *Sandbox) stackIdentities(ctx context.Context, stk *Stack, st *state) error {
	if err := s.ApplyDeployRBAC(ctx); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	var err error
	if stk.ControllerKubeconfig, err = s.ComponentKubeconfig(ctx, vigil.CSIControllerServiceAccount, ""); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	for _, n := range st.Nodes {
		if len(n.Members) > 0 {
			continue // a rack: its heartbeat process talks to the datapath only
		}
		if _, err := s.ComponentKubeconfig(ctx, vigil.EngineServiceAccount, n.Name); err != nil {
			return fmt.Errorf("stack: %w", err)
		}
		if _, err := s.NodeKubeconfig(n.Name); err != nil {
			return fmt.Errorf("stack: %w", err)
		}
	}
	return nil
}

// startStackDatapath starts the host's datapath server and its forwarders
// on the host end of every node link, and returns once it answers.
func (s *Sandbox) startStackDatapath(ctx context.Context, cfg StackConfig, stk *Stack, security []string) error {
	if err := s.startPowerFS(ctx, cfg, stk); err != nil {
		return err
	}
	err := s.startHost(stk, ProcessSpec{Name: StackDatapath, Args: append(append([]string{filepath.Join(cfg.VigilBinDir, BinVigilDatapath), "serve",
		"--listen", stk.DatapathAddr, "--data-dir", filepath.Join(stk.Dir, "datapath")}, datapathBootArgs(cfg, stk)...), security...)})
	if err != nil {
		return err
	}
	err = s.withState(func(st *state) error {
		st.DatapathPort = stk.DatapathPort
		for _, n := range st.Nodes {
			spec := ProcessSpec{Name: "forward-datapath-" + n.Name, Args: []string{"socat",
				fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr", stk.DatapathPort, n.HostIP),
				"TCP:" + stk.DatapathAddr}}
			if err := startHostLocked(st, stk, spec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return waitTCP(ctx, stk.DatapathAddr, 30*time.Second, "datapath")
}

// startStackHost starts the host processes in order, each once the one it
// needs answers: CSI controller, sidecars.
func (s *Sandbox) startStackHost(ctx context.Context, cfg StackConfig, stk *Stack) error {
	mgr := filepath.Join(cfg.VigilBinDir, BinVigilManager)
	sock := filepath.Join(stk.Dir, "csi.sock")
	kubeconfig := stk.ControllerKubeconfig
	settingsDir, err := writeStackSettings(stk)
	if err != nil {
		return err
	}
	err = s.startHost(stk, ProcessSpec{Name: StackController, Args: []string{mgr, "csi", "serve",
		"--csi-endpoint", stk.ControllerEndpoint, "--datapath", stk.DatapathAddr,
		"--datapath-token-file", stk.CSITokenFile, "--datapath-ca-file", stk.CAFile, "--kubeconfig", kubeconfig,
		"--settings-dir", settingsDir}})
	if err != nil {
		return err
	}
	if err := waitSocket(ctx, stk.ControllerEndpoint, 30*time.Second, "CSI controller"); err != nil {
		return err
	}
	// The sidecars' API client defaults (5 requests/s, 10 workers) attach about
	// two volumes a second: a rack's hundreds of replacements would wait minutes
	// for their attachments. deploy/ raises them the same way.
	sidecar := func(name, bin string, extra ...string) ProcessSpec {
		return ProcessSpec{Name: name, Args: append([]string{filepath.Join(cfg.TestbinDir, bin),
			"--csi-address", sock, "--kubeconfig", kubeconfig, "--leader-election=false",
			"--timeout=30s", "--retry-interval-start=500ms", "--retry-interval-max=5s",
			"--kube-api-qps=" + sidecarQPS, "--kube-api-burst=" + sidecarBurst}, extra...)}
	}
	if err := s.startHost(stk, sidecar(StackProvisioner, BinCSIProvisioner)); err != nil {
		return err
	}
	return s.startHost(stk, sidecar(StackAttacher, BinCSIAttacher, "--worker-threads="+attacherWorkers))
}

// StackReplicaCount is the replica count a stack's volumes get when their
// StorageClass does not say: one per datapath server, at most 3 (the
// setting's default), so that three servers on nodes provision volumes of
// three copies as deploy/'s three servers do, and the datapath on the host,
// one server, volumes of one. A test that provisions while a server is down
// asks for fewer copies with a StorageClass parameter replicas, since a
// volume of R copies needs R servers that answer.
func StackReplicaCount(stk *Stack) int {
	return min(3, max(len(stk.DatapathServers), 1))
}

// writeStackSettings writes the CSI controller's managed settings overlay,
// stack-dir/csi-settings: default-replica-count is StackReplicaCount (the
// setting's default, 3, would be refused on the host's one server).
func writeStackSettings(stk *Stack) (string, error) {
	dir := filepath.Join(stk.Dir, "csi-settings")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("stack: %w", err)
	}
	v := strconv.Itoa(StackReplicaCount(stk)) + "\n"
	if err := os.WriteFile(filepath.Join(dir, settings.NameDefaultReplicaCount), []byte(v), 0o644); err != nil {
		return "", fmt.Errorf("stack: %w", err)
	}
	return dir, nil
}

// startHost starts spec on the host and records it, so that Down kills it.
func (s *Sandbox) startHost(stk *Stack, spec ProcessSpec) error {
	return s.withState(func(st *state) error { return startHostLocked(st, stk, spec) })
}

func startHostLocked(st *state, stk *Stack, spec ProcessSpec) error {
	return startHostIn(st, stk.Dir, spec)
}

// startHostIn starts spec on the host with its log in dir and records it.
func startHostIn(st *state, dir string, spec ProcessSpec) error {
	for _, p := range st.Host {
		if p.Name == spec.Name && p.alive() {
			return fmt.Errorf("%w: host process %s already runs (pid %d)", ErrAlreadyUp, spec.Name, p.PID)
		}
	}
	p := &proc{ProcessSpec: spec, Log: filepath.Join(dir, spec.Name+".log")}
	var err error
	p.PID, p.StartTime, err = startDetached("", spec.Args, spec.Env, p.Log)
	if p.PID != 0 {
		st.Host = append(st.Host, p)
	}
	if err != nil {
		return fmt.Errorf("stack: %s: %w", spec.Name, err)
	}
	return nil
}

// NodeKeeperSocket is the socket of the fd keeper of the node whose directory
// is nodeDir.
func NodeKeeperSocket(nodeDir string) string {
	return filepath.Join(nodeDir, "engine", "fd-keeper.sock")
}

// addStackNodeProcesses registers the fd keeper, the engine and the kubelet
// stand-in on every node, in that order: a node's processes start in the
// order registered, and the keeper is there before the engine deposits a
// connection. The keeper runs on across `node kill|restart --process engine`
// (so the engine's volumes survive it) and dies with the node's power. On
// real nodes the engine serves and registers with the real kubelet
// (realEngine), and no stand-in runs.
func (s *Sandbox) addStackNodeProcesses(cfg StackConfig, stk *Stack, onReal bool) error {
	endpoint := NodeCSIEndpoint("$VIGIL_NODE_DIR")
	keeper := ProcessSpec{Name: StackFDKeeper, Args: []string{filepath.Join(cfg.VigilBinDir, BinVigilEngineNode), "fd-keeper",
		"--socket", NodeKeeperSocket("$VIGIL_NODE_DIR")}}
	engine := ProcessSpec{Name: StackEngine, Args: []string{filepath.Join(cfg.VigilBinDir, BinVigilEngineNode), "run",
		"--node-name", "$VIGIL_NODE", "--kubeconfig", identityKubeconfig(s.workDir, vigil.EngineServiceAccount, "$VIGIL_NODE"),
		"--datapath", nodeDatapath(stk),
		"--datapath-token-file", NodeTokenFile("$VIGIL_NODE_DIR"), "--datapath-ca-file", stk.CAFile, "--state-dir", "$VIGIL_NODE_DIR/engine",
		"--csi-endpoint", endpoint, "--boot-id-file", "$VIGIL_NODE_DIR/boot_id", "--kubelet-registration-dir=",
		"--heartbeat-interval", cfg.HeartbeatInterval.String(), "--fd-keeper-socket", NodeKeeperSocket("$VIGIL_NODE_DIR")}}
	kubelet := ProcessSpec{Name: StackKubelet, Args: []string{filepath.Join(cfg.VigilBinDir, BinVigilSandbox), "kubelet",
		"--kubeconfig", identityKubeconfig(s.workDir, "kubelet", "$VIGIL_NODE"), "--csi-endpoint", endpoint, "--poll-interval", cfg.KubeletPollInterval.String()}}
	if err := s.AddProcess("", keeper); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	if onReal {
		engine = realEngine(engine)
	}
	if err := s.AddProcess("", engine); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	if onReal {
		return nil
	}
	if err := s.AddProcess("", kubelet); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	return nil
}

// StackHeartbeat is the process of each rack of a scale sandbox that heartbeats
// the rack's nodes to the datapath (`vigil-sandbox heartbeat`), instead of an
// engine and a kubelet stand-in per node. It acts as each node with that
// node's own token (RackTokensFile), as the node's engine would, over TLS.
const StackHeartbeat = "heartbeat"

func rackHeartbeat(cfg StackConfig, stk *Stack) ProcessSpec {
	return ProcessSpec{Name: StackHeartbeat, Args: []string{filepath.Join(cfg.VigilBinDir, BinVigilSandbox), "heartbeat",
		"--datapath", nodeDatapath(stk),
		"--node-tokens-file", RackTokensFile("$VIGIL_NODE_DIR"), "--ca-file", stk.CAFile,
		"--interval", cfg.HeartbeatInterval.String()}}
}

// nodeDatapath is a node process's --datapath: the host server through the
// host end of the node's link, or every server on the nodes.
func nodeDatapath(stk *Stack) string {
	if len(stk.DatapathServers) > 0 {
		return stk.DatapathAddr
	}
	return net.JoinHostPort("$VIGIL_HOST_IP", strconv.Itoa(stk.DatapathPort))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitTCP(ctx context.Context, addr string, timeout time.Duration, what string) error {
	return waitDial(ctx, "tcp", addr, timeout, what)
}

func waitSocket(ctx context.Context, endpoint string, timeout time.Duration, what string) error {
	path := endpoint
	if len(path) > len("unix://") && path[:len("unix://")] == "unix://" {
		path = path[len("unix://"):]
	}
	return waitDial(ctx, "unix", path, timeout, what)
}

func waitDial(ctx context.Context, network, addr string, timeout time.Duration, what string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stack: %s not answering on %s after %s: %v (see its log)", what, addr, timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
