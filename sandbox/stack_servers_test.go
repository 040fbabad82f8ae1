package sandbox

import (
	"errors"
	"slices"
	"strings"
	"testing"

	vigil "github.com/vigil-storage/vigil"
)

func TestCheckDatapathServers_Table(t *testing.T) {
	for _, c := range []struct {
		servers, nodes int
		racks          bool
		want           string // "" for accepted
	}{
		{0, 1, false, ""},
		{0, 3, true, ""},
		{1, 1, false, ""},
		{3, 3, false, ""},
		{3, 4, false, ""},
		{5, 64, false, ""},
		{-1, 3, false, "DatapathServers -1: want 0 (one server on the host) or an odd number from 1 to the 3 nodes"},
		{2, 4, false, "a group of 2 needs 2 for a majority, so it survives no more losses than 1 servers"},
		{4, 4, false, "a group of 4 needs 3 for a majority"},
		{5, 4, false, "more servers than nodes"},
		{3, 2, false, "more servers than nodes"},
		{1, 3, true, "on a scale sandbox"},
	} {
		err := CheckDatapathServers(c.servers, c.nodes, c.racks)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%d servers on %d nodes (racks %v): %v, want accepted", c.servers, c.nodes, c.racks, err)
		case c.want != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%d servers on %d nodes (racks %v): %v, want ErrInvalidConfig mentioning %q", c.servers, c.nodes, c.racks, err, c.want)
		}
	}
}

func TestStackConfig_WithDefaults_DatapathServers(t *testing.T) {
	bin := t.TempDir()
	for _, c := range []struct {
		cfg  StackConfig
		want string
	}{
		{StackConfig{VigilBinDir: bin, DatapathServers: 3, DatapathPowerLoss: true}, "the power-loss layer is the host server's"},
		{StackConfig{VigilBinDir: bin, DatapathRaftPort: 9601}, "without DatapathServers"},
		{StackConfig{VigilBinDir: bin, DatapathServers: 3, DatapathRaftPort: 70000}, "DatapathRaftPort 70000"},
		{StackConfig{VigilBinDir: bin, DatapathServers: 3, DatapathPort: 9600, DatapathRaftPort: 9600}, "not DatapathPort"},
	} {
		_, err := c.cfg.withDefaults(t.TempDir())
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrInvalidConfig mentioning %q", c.cfg, err, c.want)
		}
	}
}

// The servers go on the first N nodes, on each node's IP, each server's id
// its node's name; every client's list names them all in that order.
func TestStackServers_FirstNodes(t *testing.T) {
	st := &state{Nodes: []*nodeState{{Name: "node-1", NodeIP: "10.213.0.2"}, {Name: "node-2", NodeIP: "10.213.0.6"},
		{Name: "node-3", NodeIP: "10.213.0.10"}, {Name: "node-4", NodeIP: "10.213.0.14"}}}
	got := stackServers(StackConfig{DatapathServers: 3, DatapathPort: 9600, DatapathRaftPort: 9601}, st)
	want := []StackServer{{"node-1", "10.213.0.2:9600", "10.213.0.2:9601"}, {"node-2", "10.213.0.6:9600", "10.213.0.6:9601"},
		{"node-3", "10.213.0.10:9600", "10.213.0.10:9601"}}
	if !slices.Equal(got, want) {
		t.Fatalf("stackServers = %+v, want %+v", got, want)
	}
	stk := &Stack{DatapathServers: got, DatapathAddr: "ignored"}
	if addrs := stk.DatapathAddrs(); !slices.Equal(addrs, []string{"10.213.0.2:9600", "10.213.0.6:9600", "10.213.0.10:9600"}) {
		t.Errorf("DatapathAddrs = %v", addrs)
	}
	if got := nodeDatapath(&Stack{DatapathServers: got, DatapathAddr: "a:1,b:1,c:1", DatapathPort: 1}); got != "a:1,b:1,c:1" {
		t.Errorf("a node's --datapath with servers on nodes = %q, want every server", got)
	}
	if got := nodeDatapath(&Stack{DatapathAddr: "127.0.0.1:9600", DatapathPort: 9600}); got != "$VIGIL_HOST_IP:9600" {
		t.Errorf("a node's --datapath with the host server = %q, want the host end of its link", got)
	}
	host := &Stack{DatapathAddr: "127.0.0.1:9600"}
	if addrs := host.DatapathAddrs(); !slices.Equal(addrs, []string{"127.0.0.1:9600"}) {
		t.Errorf("DatapathAddrs of the host server = %v", addrs)
	}
}

// A node's server command line, expanded with the node's environment:
// in its node (IP, directory, boot id), one group of every server, its
// TokenReview kubeconfig over its node's link.
func TestDatapathServerSpec_PerNode(t *testing.T) {
	work := "/w"
	stk := &Stack{DatapathPort: 9600, RaftPort: 9601, CAFile: "/w/stack/tls/ca.crt", DatapathServers: []StackServer{
		{"node-1", "10.213.0.2:9600", "10.213.0.2:9601"}, {"node-2", "10.213.0.6:9600", "10.213.0.6:9601"}, {"node-3", "10.213.0.10:9600", "10.213.0.10:9601"}}}
	security := []string{"--tls-cert-file", "/w/stack/tls/server.crt", "--tls-private-key-file", "/w/stack/tls/server.key",
		"--kubeconfig", "/w/identities/vigil-datapath.kubeconfig", "--engine-service-account", "vigil-system:vigil-engine-node"}
	spec := datapathServerSpec(StackConfig{VigilBinDir: "/bin"}, stk, work, security)
	if spec.Name != StackDatapath {
		t.Errorf("name %q, want %q (node kill|restart --process datapath)", spec.Name, StackDatapath)
	}
	n := &nodeState{Name: "node-2", NodeIP: "10.213.0.6", HostIP: "10.213.0.5", BootID: "b"}
	args := strings.Join(expandArgs(spec.Args, nodeEnv(&state{WorkDir: work}, n)), " ")
	for _, w := range []string{
		"/bin/vigil-datapath serve --listen 10.213.0.6:9600 --data-dir /w/nodes/node-2/datapath --boot-id-file /w/nodes/node-2/boot_id",
		"--server-id node-2 --node-name node-2 --raft-listen 10.213.0.6:9601",
		"--raft-peers node-1=10.213.0.2:9601@10.213.0.2:9600,node-2=10.213.0.6:9601@10.213.0.6:9600,node-3=10.213.0.10:9601@10.213.0.10:9600 --raft-ca-file /w/stack/tls/ca.crt",
		"--tls-cert-file /w/stack/tls/server.crt",
		"--kubeconfig " + identityKubeconfig(work, vigil.DatapathServiceAccount, "node-2"),
		"--engine-service-account vigil-system:vigil-engine-node",
	} {
		if !strings.Contains(args, w) {
			t.Errorf("node-2's server command lacks %q:\n%s", w, args)
		}
	}
	if security[5] != "/w/identities/vigil-datapath.kubeconfig" {
		t.Errorf("the host server's flags were changed: %v", security)
	}
}

// With the servers on nodes, a cut from the datapath drops the servers'
// client and Raft ports over the node's link, both ways; not the API
// server, and not by the host end's address (the servers are elsewhere).
func TestPartitionRuleset_DatapathOnNodes(t *testing.T) {
	n := &nodeState{Name: "node-1", HostIP: "10.213.0.1", NodeVeth: "vgabcden0"}
	script, err := partitionRuleset(n, PartitionDatapath, cutPorts{api: 6443, datapath: 9600, raft: 9601})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`oifname "vgabcden0" tcp dport { 9600, 9601 } drop`, `oifname "vgabcden0" tcp sport { 9600, 9601 } drop`,
		`iifname "vgabcden0" tcp sport { 9600, 9601 } drop`, `iifname "vgabcden0" tcp dport { 9600, 9601 } drop`} {
		if !strings.Contains(script, w) {
			t.Errorf("script lacks %q:\n%s", w, script)
		}
	}
	if strings.Contains(script, "6443") || strings.Contains(script, "10.213.0.1") {
		t.Errorf("a cut from the datapath names the API server or the host end:\n%s", script)
	}
	if api, _ := partitionRuleset(n, PartitionAPIServer, cutPorts{api: 6443, datapath: 9600, raft: 9601}); strings.Contains(api, "9601") {
		t.Errorf("a cut from the API server names the Raft port:\n%s", api)
	}
}
