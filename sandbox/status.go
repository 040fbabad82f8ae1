package sandbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Status is a snapshot of a sandbox.
type Status struct {
	Name       string
	WorkDir    string
	Kubeconfig string
	APIServer  string
	// APIError is set when the API server could not be asked about the nodes.
	APIError string
	Nodes    []NodeStatus
	// Host is the stack's processes on the host (StartStack), if any.
	Host []ProcessStatus
}

// NodeStatus is one node as the sandbox and the API server see it.
type NodeStatus struct {
	Name    string
	NetNS   string
	NodeIP  string
	Powered bool
	// Partitioned is true while the node has any cut; Partition says which.
	Partitioned bool
	Partition   PartitionTarget
	BootID      string
	// Ready is the Node's Ready condition status (True, False, Unknown) or "" if
	// the API server did not answer; for a rack, "READY/MEMBERS", e.g. "50/50".
	Ready string
	// Members are a rack's Kubernetes nodes (scale sandbox).
	Members []string
	Taints  []string
	// Kubeconfig is the admin's credential over the node's link (VIGIL_KUBECONFIG
	// of the node's processes); KwokKubeconfig is its kwok's, the node's own
	// identity system:node:NAME (a rack's kwok: Kubeconfig).
	Kubeconfig, KwokKubeconfig string
	Processes                  []ProcessStatus
	// Cgroup is a real node's cgroup (relative to each hierarchy), which
	// holds every process of the node, containers included; "" for kwok.
	Cgroup string
}

// ProcessStatus is one process of a node.
type ProcessStatus struct {
	Name    string
	PID     int
	Running bool
	Log     string
	Command string
}

// State is the sandbox's power and network state of the node: "running" or
// "stopped", followed by ",partitioned(TARGET)" while it has a cut, e.g.
// "running,partitioned(apiserver)".
func (n NodeStatus) State() string {
	s := "stopped"
	if n.Powered {
		s = "running"
	}
	if n.Partitioned {
		s += ",partitioned(" + string(n.Partition) + ")"
	}
	return s
}

// Status reports the sandbox's nodes and processes, and asks the API server (at
// most 3 s) for each node's Ready condition and taints.
func (s *Sandbox) Status(ctx context.Context) (Status, error) {
	st, err := loadState(s.workDir)
	if err != nil {
		return Status{}, err
	}
	out := Status{Name: st.Name, WorkDir: st.WorkDir, Kubeconfig: st.Kubeconfig,
		APIServer: fmt.Sprintf("https://127.0.0.1:%d", st.APIServerPort)}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	api := map[string]corev1.Node{}
	if list, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		out.APIError = err.Error()
	} else {
		for _, n := range list.Items {
			api[n.Name] = n
		}
	}
	for _, n := range st.Nodes {
		ns := NodeStatus{Name: n.Name, NetNS: n.NetNS, NodeIP: n.NodeIP, Powered: n.Powered,
			Partitioned: n.Partition != "", Partition: n.Partition, BootID: n.BootID, Kubeconfig: n.Kubeconfig,
			KwokKubeconfig: n.kwokKubeconfig(st.WorkDir), Cgroup: n.Cgroup}
		if len(n.Members) == 0 {
			if node, ok := api[n.Name]; ok {
				ns.Ready = string(NodeReadyStatus(&node))
				for _, t := range node.Spec.Taints {
					ns.Taints = append(ns.Taints, t.Key+":"+string(t.Effect))
				}
			}
		} else {
			ns.Members = n.Members
			ns.Ready = rackReady(n.Members, api)
		}
		for _, p := range append(n.procs(), n.Once...) {
			ns.Processes = append(ns.Processes, ProcessStatus{Name: p.Name, PID: p.PID,
				Running: p.alive(), Log: p.Log, Command: strings.Join(p.Args, " ")})
		}
		out.Nodes = append(out.Nodes, ns)
	}
	for _, p := range st.Host {
		out.Host = append(out.Host, ProcessStatus{Name: p.Name, PID: p.PID, Running: p.alive(), Log: p.Log,
			Command: strings.Join(p.Args, " ")})
	}
	return out, nil
}

// rackReady is "READY/ALL" over a rack's members, "" if the API server gave no
// node at all.
func rackReady(members []string, api map[string]corev1.Node) string {
	if len(api) == 0 {
		return ""
	}
	ready := 0
	for _, m := range members {
		if node, ok := api[m]; ok && NodeReadyStatus(&node) == corev1.ConditionTrue {
			ready++
		}
	}
	return fmt.Sprintf("%d/%d", ready, len(members))
}

// NodeReadyStatus is node's Ready condition status, Unknown if it has none.
func NodeReadyStatus(node *corev1.Node) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}
