package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
)

// With StackConfig.DatapathServers N >= 1 the datapath is not a host process
// but N servers, one a process of each of the first N nodes, as on a
// hyperconverged cluster: each in its node's network namespace (listening
// on the node's IP, so that a partition of the node cuts it off), in its
// node's process group and cgroup (a power cut of the node kills it), its
// data and Raft directories under the node's directory and its boot id the
// node's. The servers form one control group (--raft-peers), each server's
// id its node's name. Every client gets the whole list of servers.
//
// `vigil-sandbox up --stack` asks for 3 on 3 or more nodes; the Go API's
// zero value stays 0 (one server on the host): a volume's data is on one
// server, so a server on a node makes that node's power cut take the volumes
// it holds with it, and the callers that cut the node of a writer and need
// its volume ask for 0 explicitly.

// StackServer is one datapath server of a stack whose servers run on nodes.
type StackServer struct {
	// Node is the node it runs on; its server id in the group too.
	Node string `json:"node"`
	// Address is where it serves clients (the node's IP).
	Address string `json:"address"`
	// RaftAddress is its Raft transport.
	RaftAddress string `json:"raftAddress"`
}

// DatapathAddrs is every datapath server's client address: the servers on
// nodes, or the one host server.
func (stk *Stack) DatapathAddrs() []string {
	if len(stk.DatapathServers) == 0 {
		return []string{stk.DatapathAddr}
	}
	out := make([]string, len(stk.DatapathServers))
	for i, srv := range stk.DatapathServers {
		out[i] = srv.Address
	}
	return out
}

// CheckDatapathServers refuses a count of datapath servers on nodes
// (StackConfig.DatapathServers) a sandbox of nodes nodes (racks: a scale
// sandbox) cannot run: more servers than nodes, any on a scale sandbox (its
// racks run no engines), and an even count, whose group survives no more
// losses than the odd count below it.
func CheckDatapathServers(servers, nodes int, racks bool) error {
	allowed := fmt.Sprintf("want 0 (one server on the host) or an odd number from 1 to the %d nodes", nodes)
	switch {
	case servers == 0:
		return nil
	case servers < 0:
		return fmt.Errorf("%w: DatapathServers %d: %s", ErrInvalidConfig, servers, allowed)
	case racks:
		return fmt.Errorf("%w: DatapathServers %d on a scale sandbox: its racks run no engines or servers; want 0", ErrInvalidConfig, servers)
	case servers > nodes:
		return fmt.Errorf("%w: DatapathServers %d: more servers than nodes (one server per node); %s", ErrInvalidConfig, servers, allowed)
	case servers%2 == 0:
		return fmt.Errorf("%w: DatapathServers %d: a group of %d needs %d for a majority, so it survives no more losses than %d servers; %s",
			ErrInvalidConfig, servers, servers, servers/2+1, servers-1, allowed)
	}
	return nil
}

// stackServers places the servers on the first cfg.DatapathServers nodes.
func stackServers(cfg StackConfig, st *state) []StackServer {
	out := make([]StackServer, 0, cfg.DatapathServers)
	for _, n := range st.Nodes[:cfg.DatapathServers] {
		out = append(out, StackServer{Node: n.Name,
			Address:     net.JoinHostPort(n.NodeIP, strconv.Itoa(cfg.DatapathPort)),
			RaftAddress: net.JoinHostPort(n.NodeIP, strconv.Itoa(cfg.DatapathRaftPort))})
	}
	return out
}

// datapathServerSpec is the command line of a node's datapath server, with
// the node's variables ($VIGIL_NODE ...) expanded when it starts there.
// security is the host server's flags (stackSecurity); the TokenReview
// kubeconfig is replaced by the server's own, over its node's link.
func datapathServerSpec(cfg StackConfig, stk *Stack, workDir string, security []string) ProcessSpec {
	peers := make([]string, len(stk.DatapathServers))
	for i, srv := range stk.DatapathServers {
		peers[i] = srv.Node + "=" + srv.RaftAddress + "@" + srv.Address
	}
	args := []string{filepath.Join(cfg.VigilBinDir, BinVigilDatapath), "serve",
		"--listen", net.JoinHostPort("$VIGIL_NODE_IP", strconv.Itoa(stk.DatapathPort)),
		"--data-dir", "$VIGIL_NODE_DIR/datapath", "--boot-id-file", "$VIGIL_NODE_DIR/boot_id",
		"--server-id", "$VIGIL_NODE", "--node-name", "$VIGIL_NODE", "--raft-listen", net.JoinHostPort("$VIGIL_NODE_IP", strconv.Itoa(stk.RaftPort)),
		"--raft-peers", strings.Join(peers, ","), "--raft-ca-file", stk.CAFile}
	sec := append([]string{}, security...)
	for i, a := range sec {
		if a == "--kubeconfig" && i+1 < len(sec) {
			sec[i+1] = identityKubeconfig(workDir, vigil.DatapathServiceAccount, "$VIGIL_NODE")
		}
	}
	return ProcessSpec{Name: StackDatapath, Args: append(args, sec...)}
}

// startStackServers starts the datapath server of each server node and
// returns once every one answers (each waits for the group's leader before
// it listens). Kwok nodes get a route to the other nodes through the host
// first, as real nodes have (their default route).
func (s *Sandbox) startStackServers(ctx context.Context, cfg StackConfig, stk *Stack, security []string) error {
	err := s.withState(func(st *state) error {
		st.DatapathPort, st.DatapathRaftPort, st.DatapathOnNodes = stk.DatapathPort, stk.RaftPort, true
		for _, n := range st.Nodes {
			if !n.real() {
				if err := routeNodeLinks(st, n); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	spec := datapathServerSpec(cfg, stk, s.workDir, security)
	for _, srv := range stk.DatapathServers {
		if err := s.AddProcess(srv.Node, spec); err != nil {
			return fmt.Errorf("stack: datapath server on %s: %w", srv.Node, err)
		}
	}
	for _, srv := range stk.DatapathServers {
		if err := waitTCP(ctx, srv.Address, 60*time.Second, "datapath server on "+srv.Node); err != nil {
			return err
		}
	}
	return nil
}

// routeNodeLinks lets kwok node n reach the other nodes' addresses through
// the host end of its link (the host forwards what arrives over it).
func routeNodeLinks(st *state, n *nodeState) error {
	if err := ip("-n", n.NetNS, "route", "replace", st.Subnet, "via", n.HostIP); err != nil {
		return fmt.Errorf("stack: route of %s to the other nodes: %w", n.Name, err)
	}
	f := filepath.Join("/proc/sys/net/ipv4/conf", n.HostVeth, "forwarding")
	if err := os.WriteFile(f, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("stack: forwarding over %s's link: %w", n.Name, err)
	}
	return nil
}

// DatapathServerStatus is one datapath server as it reports itself.
type DatapathServerStatus struct {
	StackServer
	// Role is leader, follower or candidate as the server says, or
	// unreachable when it did not answer.
	Role string
	// AppliedIndex is the last entry of the group's log it applied.
	AppliedIndex uint64
	// Error is why it is unreachable.
	Error string
}

// DatapathServers asks every datapath server of the stack, at once and for
// at most timeout, for its role (as the manager, with its token): the
// servers on nodes, or the host server (Node "").
func (s *Sandbox) DatapathServers(ctx context.Context, timeout time.Duration) ([]DatapathServerStatus, error) {
	stk, err := s.Stack()
	if err != nil {
		return nil, err
	}
	servers := stk.DatapathServers
	if len(servers) == 0 {
		servers = []StackServer{{Address: stk.DatapathAddr}}
	}
	out := make([]DatapathServerStatus, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = askDatapathServer(ctx, stk, srv, timeout)
		}()
	}
	wg.Wait()
	return out, nil
}

func askDatapathServer(ctx context.Context, stk *Stack, srv StackServer, timeout time.Duration) DatapathServerStatus {
	out := DatapathServerStatus{StackServer: srv, Role: datapath.RoleUnreachable}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := dpclient.Dial(ctx, srv.Address, "", dpclient.WithTokenFile(stk.TokenFile), dpclient.WithCAFile(stk.CAFile),
		dpclient.WithTimeout(timeout), dpclient.WithRetries(0))
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer c.Close()
	rep, err := c.Servers(ctx)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	for _, m := range rep.Servers {
		if m.Self {
			out.Role, out.AppliedIndex = m.Role, m.AppliedIndex
		}
	}
	return out
}

// DatapathLeader is the datapath server that says it leads; an error when
// none does (an election under way, or no majority).
func (s *Sandbox) DatapathLeader(ctx context.Context) (DatapathServerStatus, error) {
	all, err := s.DatapathServers(ctx, 2*time.Second)
	if err != nil {
		return DatapathServerStatus{}, err
	}
	var roles []string
	for _, srv := range all {
		if srv.Role == datapath.RoleLeader {
			return srv, nil
		}
		roles = append(roles, fmt.Sprintf("%s %s", srv.Address, srv.Role))
	}
	return DatapathServerStatus{}, fmt.Errorf("no datapath server leads: %s", strings.Join(roles, ", "))
}
