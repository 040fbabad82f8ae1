package sandbox

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// PartitionTarget is what a partition cuts a node off from.
type PartitionTarget string

// The partition targets. Every cut drops packets silently, in both directions, as
// a real network cut does: nothing is refused or reset, so clients on either side
// see timeouts and established connections stall.
const (
	// PartitionAll cuts every IP packet over the node's link: the API server,
	// the datapath and anything else outside the node.
	PartitionAll PartitionTarget = "all"
	// PartitionAPIServer cuts the node off from the API server only: its kwok can
	// no longer renew the node's lease (Kubernetes marks the node NotReady) and
	// its engine loses the API server, but the engine still reaches the datapath
	// and keeps heartbeating: a zombie.
	PartitionAPIServer PartitionTarget = "apiserver"
	// PartitionDatapath cuts the node off from the datapath only: the engine's
	// heartbeats and I/O time out while kwok still renews the lease, so
	// Kubernetes keeps calling the node Ready. Needs the Vigil stack (StartStack).
	PartitionDatapath PartitionTarget = "datapath"
	// PartitionDatapathGroup cuts the node's datapath server off from the
	// other servers of its control group only (their Raft port, both ways):
	// the server loses its group while its clients, the node's engine and
	// everything else still reach it, and the node stays Ready. Needs the
	// datapath servers on nodes (StackConfig.DatapathServers).
	PartitionDatapathGroup PartitionTarget = "datapath-group"
)

// PartitionTargets lists every target, in the order help texts show them.
var PartitionTargets = []PartitionTarget{PartitionAPIServer, PartitionDatapath, PartitionAll, PartitionDatapathGroup}

// ParsePartitionTarget turns a name ("apiserver", "datapath", "all") into a
// target; any other value is ErrInvalidPartitionTarget naming the allowed ones.
func ParsePartitionTarget(s string) (PartitionTarget, error) {
	t := PartitionTarget(s)
	if err := t.Validate(); err != nil {
		return "", err
	}
	return t, nil
}

// Validate reports a target that is not one of PartitionTargets.
func (t PartitionTarget) Validate() error {
	for _, ok := range PartitionTargets {
		if t == ok {
			return nil
		}
	}
	names := make([]string, len(PartitionTargets))
	for i, ok := range PartitionTargets {
		names[i] = string(ok)
	}
	return fmt.Errorf("%w: %q: want one of %s", ErrInvalidPartitionTarget, string(t), strings.Join(names, ", "))
}

// cutsAPIServer reports whether a node under this cut loses the API server (and
// so, after the node-monitor grace period, its Ready condition).
func (t PartitionTarget) cutsAPIServer() bool { return t == PartitionAll || t == PartitionAPIServer }

// partitionTable is the nftables table, in the node's own network namespace,
// that holds the node's cut. Being in that namespace, it goes away with it.
const partitionTable = "vigil_partition"

// cutPorts are the ports a partition's rules name: the API server's and the
// datapath's (of the forwarders on the host end of each node link), and,
// when the datapath servers run on nodes, their Raft port (0 otherwise).
type cutPorts struct {
	api, datapath, raft int
}

// partitionRuleset is the nft script that replaces node n's cut by target t in
// one transaction (the table is declared, deleted and created again, so an earlier
// cut never lingers and there is no moment without a cut). The rules live
// in the node's namespace and match the host end's address: the output hook drops
// what the node sends, the input hook what it would receive (replies of
// connections established before the cut included). ARP is not IP, so the link
// itself stays up: a cut, not an unplugged cable. With the datapath servers on
// nodes (ports.raft set), a cut from the datapath drops the servers' ports
// over the node's link in both directions: the node's engine loses the other
// nodes' servers and the node's own server loses its clients and its group,
// while the engine still reaches the server of its own node. A cut from the
// datapath group drops only the Raft port over the node's link, both ways.
func partitionRuleset(n *nodeState, t PartitionTarget, ports cutPorts) (string, error) {
	if err := t.Validate(); err != nil {
		return "", err
	}
	var out, in string
	switch {
	case t == PartitionAll:
		out = fmt.Sprintf("oifname %q drop", n.NodeVeth)
		in = fmt.Sprintf("iifname %q drop", n.NodeVeth)
	case t == PartitionDatapathGroup:
		if ports.raft <= 0 || ports.raft > 65535 {
			return "", fmt.Errorf("%w: partition of %s from its datapath group: no datapath servers run on nodes", ErrInvalidPartitionTarget, n.Name)
		}
		out = fmt.Sprintf("oifname %[1]q tcp dport %[2]d drop\n\t\toifname %[1]q tcp sport %[2]d drop", n.NodeVeth, ports.raft)
		in = fmt.Sprintf("iifname %[1]q tcp sport %[2]d drop\n\t\tiifname %[1]q tcp dport %[2]d drop", n.NodeVeth, ports.raft)
	case t == PartitionDatapath && ports.raft > 0:
		set := fmt.Sprintf("{ %d, %d }", ports.datapath, ports.raft)
		out = fmt.Sprintf("oifname %[1]q tcp dport %[2]s drop\n\t\toifname %[1]q tcp sport %[2]s drop", n.NodeVeth, set)
		in = fmt.Sprintf("iifname %[1]q tcp sport %[2]s drop\n\t\tiifname %[1]q tcp dport %[2]s drop", n.NodeVeth, set)
	default:
		port := ports.api
		if t == PartitionDatapath {
			port = ports.datapath
		}
		if port <= 0 || port > 65535 {
			return "", fmt.Errorf("%w: partition of %s from %s: no port known for it", ErrInvalidPartitionTarget, n.Name, t)
		}
		out = fmt.Sprintf("ip daddr %s tcp dport %d drop", n.HostIP, port)
		in = fmt.Sprintf("ip saddr %s tcp sport %d drop", n.HostIP, port)
		if n.real() {
			// Pods reach the API server at the address the `kubernetes`
			// Service names, another node's host end: match the port
			// over the node's link instead.
			out = fmt.Sprintf("oifname %q tcp dport %d drop", n.NodeVeth, port)
			in = fmt.Sprintf("iifname %q tcp sport %d drop", n.NodeVeth, port)
		}
	}
	// A real node's pods send and receive through the forward hook.
	forward := ""
	if n.real() {
		forward = fmt.Sprintf(`
	chain forward {
		type filter hook forward priority filter; policy accept;
		%s
		%s
	}`, out, in)
	}
	return fmt.Sprintf(`table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	chain output {
		type filter hook output priority filter; policy accept;
		%[2]s
	}
	chain input {
		type filter hook input priority filter; policy accept;
		%[3]s
	}%[4]s
}
`, partitionTable, out, in, forward), nil
}

// healRuleset removes node's cut, whatever it was; healing a healed node is fine.
func healRuleset() string {
	return fmt.Sprintf("table inet %[1]s\ndelete table inet %[1]s\n", partitionTable)
}

// nft runs an nft script inside network namespace netns.
func nft(netns, script string) error {
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("%w: nft not found in PATH: install it (Debian: apt-get install nftables)", ErrToolMissing)
	}
	var out bytes.Buffer
	cmd := exec.Command("ip", "netns", "exec", netns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", netns, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// applyPartition puts target t's cut on node n (replacing any other), or removes
// every cut if t is "".
func applyPartition(n *nodeState, t PartitionTarget, ports cutPorts) error {
	if t == "" {
		return nft(n.NetNS, healRuleset())
	}
	script, err := partitionRuleset(n, t, ports)
	if err != nil {
		return err
	}
	return nft(n.NetNS, script)
}
