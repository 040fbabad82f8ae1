package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	vigil "github.com/vigil-storage/vigil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AttachDetachAnnotation makes the attach-detach controller, not the (absent)
// kubelet, attach volumes for the node; without it no VolumeAttachment is created.
const AttachDetachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// createNodes creates the Node objects n's kwok manages: n itself, or every
// member of a rack (labelled with the rack).
func (s *Sandbox) createNodes(ctx context.Context, n *nodeState) error {
	return forEach(n.k8sNodes(), func(name string) error {
		labels := map[string]string{vigil.NodeLabel: name, corev1.LabelHostname: name}
		if len(n.Members) > 0 {
			labels[vigil.RackLabel] = n.Name
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
			Annotations: map[string]string{AttachDetachAnnotation: "true"}}}
		if n.PodCIDR != "" {
			node.Spec.PodCIDR, node.Spec.PodCIDRs = n.PodCIDR, []string{n.PodCIDR}
		}
		_, err := s.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", name, err)
		}
		return nil
	})
}

// forEach calls f for every name, ten at a time, and joins the errors.
func forEach(names []string, f func(name string) error) error {
	errs := make(chan error, len(names))
	sem := make(chan struct{}, 10)
	for _, name := range names {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- f(name)
		}()
	}
	var all []error
	for range names {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// nodeEnv is the environment of node n's processes at its current boot.
func nodeEnv(st *state, n *nodeState) []string {
	return []string{
		"VIGIL_NODE=" + n.Name,
		"VIGIL_BOOT_ID=" + n.BootID,
		"VIGIL_NODE_DIR=" + n.dir(st.WorkDir),
		"VIGIL_KUBECONFIG=" + n.Kubeconfig,
		"VIGIL_NODE_IP=" + n.NodeIP,
		"VIGIL_HOST_IP=" + n.HostIP,
		"VIGIL_NODES=" + strings.Join(n.k8sNodes(), ","),
	}
}

func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// bootNode powers node n on: a new boot id (also in VIGIL_NODE_DIR/boot_id), then
// its kwok and its registered processes, all inside its network namespace.
func bootNode(st *state, n *nodeState) error {
	n.BootID = newBootID()
	dir := n.dir(st.WorkDir)
	if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte(n.BootID+"\n"), 0o644); err != nil {
		return fmt.Errorf("write boot id of %s: %w", n.Name, err)
	}
	n.Powered = true
	env := nodeEnv(st, n)
	if n.real() {
		return bootRealNode(st, n, env)
	}
	// A node's kwok runs as the node (kwokKubeconfig), and the Node authorizer
	// lets a node list and watch only the pods whose spec.nodeName is its own:
	// --manage-single-node watches exactly those. A rack's kwok (admin) picks
	// its nodes by label.
	manage := []string{"--manage-single-node", n.Name}
	if len(n.Members) > 0 {
		manage = []string{"--manage-all-nodes=false", "--manage-nodes-with-label-selector", vigil.RackLabel + "=" + n.Name}
	}
	args := append([]string{filepath.Join(st.BinDir, BinKwok), "--kubeconfig", n.kwokKubeconfig(st.WorkDir)}, manage...)
	args = append(args,
		"--node-lease-duration-seconds", strconv.Itoa(st.LeaseSeconds),
		"--node-ip", n.NodeIP, "--server-address", "127.0.0.1:0")
	if len(n.Members) > 0 {
		conf := filepath.Join(dir, "kwok.yaml")
		if err := os.WriteFile(conf, []byte(rackKwokConfig), 0o644); err != nil {
			return fmt.Errorf("write kwok configuration of %s: %w", n.Name, err)
		}
		args = append(args, "--config", conf)
	}
	n.Kwok = &proc{ProcessSpec: ProcessSpec{Name: NodeKwok, Args: args}, Log: filepath.Join(dir, "kwok.log")}
	for _, p := range n.procs() {
		if err := startProc(n, p, env); err != nil {
			return err
		}
	}
	return nil
}

// rackKwokConfig is the configuration of a rack's kwok.
//
// kwok moves 4 pods at a time through their stages (Pending to Running,
// deletion) by default, which for a rack of 50 nodes and 2,000 pods is a queue
// of minutes whenever a workload is created or replaced; its client has no
// rate limit, so the parallelism is what paces it.
//
// The two node stages replace kwok's defaults. kwok 0.7.0 picks its 20-25 s
// status heartbeat when node Leases are on (and the 10-minute one when they
// are off: the test is inverted), so 500 nodes patched their status 22 times
// a second, each patch a Node update for the controller-manager, the
// scheduler and every rack's kwok to process, on top of the Lease renewals
// that already keep the nodes Ready. A kubelet with Leases reports an
// unchanged status every 5 minutes (nodeStatusReportFrequency), and so do
// these nodes. rack-node-ready makes a node Ready when it is not (at its first
// boot and after a power cut); rack-node-status is the 5-minute report.
const rackKwokConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 32
  nodeLeaseParallelism: 8
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: rack-node-ready
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        reason: {{ .reason | Quote }}
        message: {{ .message | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      {{ end }}
      addresses:
      - {type: InternalIP, address: {{ NodeIP | Quote }}}
      - {type: Hostname, address: {{ .metadata.name | Quote }}}
      allocatable: {cpu: 1k, memory: 1Ti, pods: 1M}
      capacity: {cpu: 1k, memory: 1Ti, pods: 1M}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
        kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
        containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: rack-node-status
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ['True']
  delay:
    durationMilliseconds: 300000
    jitterDurationMilliseconds: 330000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - type: {{ .type | Quote }}
        status: {{ .status | Quote }}
        lastHeartbeatTime: {{ $now | Quote }}
      {{ end }}
`

func startProc(n *nodeState, p *proc, env []string) error {
	penv := append(append([]string{}, env...), expandArgs(p.Env, env)...)
	args := expandArgs(p.Args, env)
	if n.real() {
		args = inCgroup(n.Cgroup, args)
	}
	pid, start, err := startDetached(n.NetNS, args, penv, p.Log)
	p.PID, p.StartTime = pid, start
	if err != nil {
		return fmt.Errorf("node %s: process %s: %w", n.Name, p.Name, err)
	}
	return nil
}

// withState runs f on the sandbox's state under the work directory's lock and
// saves the state afterwards, whatever f returned.
func (s *Sandbox) withState(f func(st *state) error) error {
	unlock, err := lockWorkDir(s.workDir)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := loadState(s.workDir)
	if err != nil {
		return err
	}
	ferr := f(st)
	if err := st.save(); err != nil {
		return err
	}
	return ferr
}

// Stop cuts node's power: its kwok, every registered process and every one-off
// process (RunOnNode) get SIGKILL at once. Stopping a stopped node does nothing.
func (s *Sandbox) Stop(node string) error {
	return s.withState(func(st *state) error {
		n, err := st.node(node)
		if err != nil {
			return err
		}
		n.Powered = false
		err = killAll(append(n.procs(), n.Once...), 5*time.Second)
		if err != nil {
			return fmt.Errorf("stop %s: %w", node, err)
		}
		n.Once = nil
		if n.real() {
			return stopRealNode(st, n)
		}
		return nil
	})
}

// Start powers node on again with a new boot id; starting a running node does nothing.
func (s *Sandbox) Start(node string) error {
	return s.withState(func(st *state) error {
		n, err := st.node(node)
		if err != nil {
			return err
		}
		if n.Powered {
			return nil
		}
		if err := bootNode(st, n); err != nil {
			_ = killAll(n.procs(), 5*time.Second)
			n.Powered = false
			return err
		}
		return nil
	})
}

// Partition cuts node off from target (PartitionAll, PartitionAPIServer,
// PartitionDatapath or PartitionDatapathGroup), replacing any cut the node already has: its processes keep
// running, and packets between them and what target names are dropped silently in
// both directions, like a real cut. PartitionDatapath needs the Vigil stack
// (StartStack), PartitionDatapathGroup its datapath servers on nodes. A bad target or node changes nothing. Idempotent.
func (s *Sandbox) Partition(node string, target PartitionTarget) error {
	if err := target.Validate(); err != nil {
		return fmt.Errorf("partition %s: %w", node, err)
	}
	return s.withState(func(st *state) error {
		n, err := st.node(node)
		if err != nil {
			return err
		}
		if target == PartitionDatapath && st.DatapathPort == 0 {
			return fmt.Errorf("%w: partition of %s from the datapath: no Vigil stack runs in this sandbox (StartStack, or `vigil-sandbox up --stack`)",
				ErrNotUp, node)
		}
		if target == PartitionDatapathGroup && !st.DatapathOnNodes {
			return fmt.Errorf("%w: partition of %s from its datapath group: the datapath servers do not run on nodes (StackConfig.DatapathServers, or `vigil-sandbox up --stack --datapath-servers 3`)",
				ErrNotUp, node)
		}
		if err := applyPartition(n, target, st.cutPorts()); err != nil {
			return fmt.Errorf("partition %s from %s: %w", node, target, err)
		}
		n.Partition = target
		return nil
	})
}

// Heal removes every cut of node. Idempotent.
func (s *Sandbox) Heal(node string) error {
	return s.withState(func(st *state) error {
		n, err := st.node(node)
		if err != nil {
			return err
		}
		if err := applyPartition(n, "", cutPorts{}); err != nil {
			return fmt.Errorf("heal %s: %w", node, err)
		}
		n.Partition = ""
		return nil
	})
}

// AddProcess registers spec on node (every node if node is ""): it starts now on
// a powered node, and at every later boot; Stop kills it with the node.
func (s *Sandbox) AddProcess(node string, spec ProcessSpec) error {
	if spec.Name == "" || len(spec.Args) == 0 {
		return fmt.Errorf("process spec %+v: want a Name and Args", spec)
	}
	return s.withState(func(st *state) error {
		nodes := st.Nodes
		if node != "" {
			n, err := st.node(node)
			if err != nil {
				return err
			}
			nodes = []*nodeState{n}
		}
		for _, n := range nodes {
			for _, p := range n.procs() {
				if p.Name == spec.Name {
					return fmt.Errorf("node %s already runs a process named %q", n.Name, spec.Name)
				}
			}
		}
		for _, n := range nodes {
			p := &proc{ProcessSpec: spec, Log: filepath.Join(n.dir(st.WorkDir), spec.Name+".log")}
			n.Hooks = append(n.Hooks, p)
			if n.Powered {
				if err := startProc(n, p, nodeEnv(st, n)); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
