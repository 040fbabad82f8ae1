package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// state is everything another process needs to inspect or tear down a sandbox;
// it is written to WorkDir/state.json before each resource is created, so that Down
// finds even what a failed Up left behind.
type state struct {
	Name          string `json:"name"`
	WorkDir       string `json:"workDir"`
	BinDir        string `json:"binDir"`
	Subnet        string `json:"subnet"`
	LeaseSeconds  int    `json:"leaseSeconds"`
	Kubeconfig    string `json:"kubeconfig"`
	APIServerPort int    `json:"apiServerPort"`
	ClusterUp     bool   `json:"clusterUp"`
	// DatapathPort is the Vigil stack's datapath port (its forwarders listen on
	// it on the host end of every node link); 0 while no stack runs.
	DatapathPort int `json:"datapathPort,omitempty"`
	// DatapathRaftPort is the Raft port of the stack's datapath servers on
	// nodes (DatapathOnNodes); 0 otherwise.
	DatapathRaftPort int `json:"datapathRaftPort,omitempty"`
	// DatapathOnNodes: the datapath servers listen on nodes' IPs, not on the
	// host end of their links (a partition from the datapath cuts their
	// ports over the node's link).
	DatapathOnNodes bool `json:"datapathOnNodes,omitempty"`
	// AuditLog is the API server's audit log (Config.AuditLog); "" when off.
	AuditLog string `json:"auditLog,omitempty"`
	// Kubelet is what runs the nodes: KubeletKwok ("" in older state) or
	// KubeletReal.
	Kubelet string `json:"kubelet,omitempty"`
	// PodSubnet is Config's, for real nodes.
	PodSubnet string `json:"podSubnet,omitempty"`
	// NodeImages and PauseImage are Config's, for real nodes.
	NodeImages []string `json:"nodeImages,omitempty"`
	PauseImage string   `json:"pauseImage,omitempty"`
	// NodeStatusUpdateFrequency is Config's, for real nodes; 0 for the
	// kubelet's default.
	NodeStatusUpdateFrequency time.Duration `json:"nodeStatusUpdateFrequency,omitempty"`
	// StoppedAPIServer is the API server's command while StopAPIServer has it
	// stopped; nil while it runs.
	StoppedAPIServer *stoppedCommand `json:"stoppedAPIServer,omitempty"`
	Forwarders       []*proc         `json:"forwarders,omitempty"`
	// Host is the processes of the Vigil stack that run on the host (StartStack).
	Host  []*proc      `json:"host,omitempty"`
	Nodes []*nodeState `json:"nodes"`
}

// nodeState is one simulated node: its network namespace, its link and its processes.
type nodeState struct {
	Name       string `json:"name"`
	Index      int    `json:"index"`
	NetNS      string `json:"netns"`
	HostVeth   string `json:"hostVeth"`
	NodeVeth   string `json:"nodeVeth"`
	HostIP     string `json:"hostIP"`
	NodeIP     string `json:"nodeIP"`
	Kubeconfig string `json:"kubeconfig"`
	BootID     string `json:"bootID"`
	Powered    bool   `json:"powered"`
	// Partition is the node's current cut; "" when none.
	Partition PartitionTarget `json:"partition,omitempty"`
	Kwok      *proc           `json:"kwok,omitempty"`
	// System is a real node's own daemons, in their start order: containerd,
	// the kubelet, kube-proxy (realnode.go).
	System []*proc `json:"system,omitempty"`
	Hooks  []*proc `json:"hooks,omitempty"`
	// Once is the one-off processes of RunOnNode: killed by a power cut, never
	// started at a boot.
	Once []*proc `json:"once,omitempty"`
	// Members are the Kubernetes nodes of a rack (scale sandbox); empty for a
	// sandbox node, which is its own Kubernetes node.
	Members []string `json:"members,omitempty"`
	// Cgroup is a real node's cgroup, the same relative path in every
	// hierarchy: every process of the node, containerd's shims and the
	// containers included, runs under it. "" for a kwok node.
	Cgroup string `json:"cgroup,omitempty"`
	// PodCIDR is a real node's pod addresses.
	PodCIDR string `json:"podCIDR,omitempty"`
	// ImagesImported is set once the node's containerd holds NodeImages.
	ImagesImported bool `json:"imagesImported,omitempty"`
}

// real reports whether n runs a real kubelet and containers.
func (n *nodeState) real() bool { return n.Cgroup != "" }

// podSubnet is the pod addresses of every real node.
func (st *state) podSubnet() string { return st.PodSubnet }

// k8sNodes is the Kubernetes nodes n runs: its members for a rack, else itself.
func (n *nodeState) k8sNodes() []string {
	if len(n.Members) > 0 {
		return n.Members
	}
	return []string{n.Name}
}

// cutPorts are the ports a partition of a node names.
func (st *state) cutPorts() cutPorts {
	p := cutPorts{api: st.APIServerPort, datapath: st.DatapathPort}
	if st.DatapathOnNodes {
		p.raft = st.DatapathRaftPort
	}
	return p
}

// k8sNodes is every Kubernetes node of the sandbox.
func (st *state) k8sNodes() []string {
	var out []string
	for _, n := range st.Nodes {
		out = append(out, n.k8sNodes()...)
	}
	return out
}

func (n *nodeState) dir(workDir string) string { return filepath.Join(workDir, "nodes", n.Name) }

// kwokKubeconfig is the credential of the node's kwok: the node's own identity
// (system:node:NAME), so that the Node authorizer and NodeRestriction hold it
// to what a kubelet of that node may do; a rack's kwok uses Kubeconfig.
func (n *nodeState) kwokKubeconfig(workDir string) string {
	if len(n.Members) > 0 {
		return n.Kubeconfig
	}
	return filepath.Join(n.dir(workDir), "kwok.kubeconfig")
}

// procs is every process the node starts at a boot, its kwok first (not the
// one-off processes of Once).
func (n *nodeState) procs() []*proc {
	var out []*proc
	if n.Kwok != nil {
		out = append(out, n.Kwok)
	}
	out = append(out, n.System...)
	return append(out, n.Hooks...)
}

func statePath(workDir string) string { return filepath.Join(workDir, "state.json") }

func loadState(workDir string) (*state, error) {
	b, err := os.ReadFile(statePath(workDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s", ErrNotUp, statePath(workDir))
	}
	if err != nil {
		return nil, fmt.Errorf("read sandbox state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parse sandbox state %s: %w", statePath(workDir), err)
	}
	return &st, nil
}

// save writes the state atomically (temporary file, then rename).
func (st *state) save() error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode sandbox state: %w", err)
	}
	tmp := statePath(st.WorkDir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write sandbox state: %w", err)
	}
	if err := os.Rename(tmp, statePath(st.WorkDir)); err != nil {
		return fmt.Errorf("write sandbox state: %w", err)
	}
	return nil
}

// loadNode reads the sandbox's state and finds node name in it.
func (s *Sandbox) loadNode(name string) (*state, *nodeState, error) {
	st, err := loadState(s.workDir)
	if err != nil {
		return nil, nil, err
	}
	n, err := st.node(name)
	if err != nil {
		return nil, nil, err
	}
	return st, n, nil
}

func (st *state) node(name string) (*nodeState, error) {
	for _, n := range st.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	names := make([]string, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		names = append(names, n.Name)
	}
	return nil, fmt.Errorf("%w: %q (nodes: %v)", ErrUnknownNode, name, names)
}

// lockWorkDir takes an exclusive lock on WorkDir/lock, so that two processes (a
// test and `vigil-sandbox node stop`, say) never interleave their changes.
func lockWorkDir(workDir string) (unlock func(), err error) {
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, fmt.Errorf("create sandbox work dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(workDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock sandbox work dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock sandbox work dir: %w", err)
	}
	return func() { f.Close() }, nil
}
