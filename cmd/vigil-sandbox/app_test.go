package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/internal/cliflags"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/heartbeat"
	"github.com/vigil-storage/vigil/sandbox/images"
)

func run(args ...string) error {
	return cliflags.Run(app(), append([]string{"vigil-sandbox"}, args...))
}

func TestApp_Status_NotUp(t *testing.T) {
	err := run("--workdir", t.TempDir(), "status")
	if !errors.Is(err, sandbox.ErrNotUp) || !strings.Contains(err.Error(), "vigil-sandbox up") {
		t.Errorf("status without a sandbox = %v, want ErrNotUp telling to run up", err)
	}
}

func TestApp_Down_NotUp(t *testing.T) {
	if err := run("--workdir", t.TempDir(), "down"); err != nil {
		t.Errorf("down without a sandbox = %v, want nil (idempotent)", err)
	}
}

func TestApp_Up_BinariesMissing(t *testing.T) {
	err := run("--workdir", t.TempDir(), "up", "--bin-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make testbin") {
		t.Errorf("up without binaries = %v, want an error telling to run make testbin", err)
	}
}

func TestApp_Up_BadNodes(t *testing.T) {
	err := run("--workdir", t.TempDir(), "up", "--nodes", "0")
	if !errors.Is(err, sandbox.ErrInvalidConfig) {
		t.Errorf("up --nodes 0 = %v, want ErrInvalidConfig", err)
	}
}

func TestApp_Node_ArgCount(t *testing.T) {
	err := run("--workdir", t.TempDir(), "node", "stop")
	if err == nil || !strings.Contains(err.Error(), "one node name") {
		t.Errorf("node stop without a name = %v, want an error asking for one node name", err)
	}
}

func TestApp_Up_BadDatapathAuth(t *testing.T) {
	dir := t.TempDir()
	for args, mention := range map[string]string{
		"--stack --datapath-auth shared":   `--datapath-auth "shared": want tokenreview or static`,
		"--datapath-auth static":           "give --stack too",
		"--stack --datapath-auth=":         `--datapath-auth ""`,
		"--stack --datapath-auth STATIC":   `"STATIC"`,
		"--stack --datapath-auth=tokenrev": `"tokenrev"`,
	} {
		err := run(append([]string{"--workdir", dir, "up"}, strings.Fields(args)...)...)
		if err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("up %s = %v, want an error mentioning %q", args, err, mention)
		}
	}
	if _, err := sandbox.Open(dir); !errors.Is(err, sandbox.ErrNotUp) {
		t.Errorf("a refused up left a sandbox behind: %v", err)
	}
}

func TestApp_Up_BadDatapathServers(t *testing.T) {
	dir := t.TempDir()
	for args, mention := range map[string]string{
		"--datapath-servers 3":                        "--datapath-servers is for --stack's datapath; give --stack too",
		"--stack --datapath-servers 2":                "a group of 2 needs 2 for a majority",
		"--stack --nodes 4 --datapath-servers 4":      "want 0 (one server on the host) or an odd number from 1 to the 4 nodes",
		"--stack --nodes 3 --datapath-servers 5":      "more servers than nodes",
		"--stack --datapath-servers -1":               "DatapathServers -1",
		"--stack --racks 2 --datapath-servers 1":      "on a scale sandbox",
		"--stack --nodes 3 --datapath-servers=x":      "invalid value",
		"--stack --kubelet real --datapath-servers 2": "needs 2 for a majority",
		"--stack --nodes 1 --datapath-servers 3":      "from 1 to the 1 nodes",
		"--stack --nodes 2 --datapath-servers 2":      "survives no more losses than 1 servers",
		"--stack --nodes 4 --datapath-servers -3":     "want 0 (one server on the host) or an odd number from 1 to the 4 nodes",
		"--stack --nodes 5 --datapath-servers 7":      "more servers than nodes",
		"--stack --racks 2 --datapath-servers 3":      "on a scale sandbox",
	} {
		err := run(append([]string{"--workdir", dir, "up"}, strings.Fields(args)...)...)
		if err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("up %s = %v, want an error mentioning %q", args, err, mention)
		}
	}
	if _, err := sandbox.Open(dir); !errors.Is(err, sandbox.ErrNotUp) {
		t.Errorf("a refused up left a sandbox behind: %v", err)
	}
}

// upServers runs `vigil-sandbox up ARGS` with an Action that only resolves
// --datapath-servers, so that the flags parse as the real command's do.
func upServers(t *testing.T, args ...string) (int, error) {
	t.Helper()
	a := app()
	up := a.Command("up")
	if up == nil {
		t.Fatal("no up command")
	}
	got := -1
	up.Action = func(c *cli.Context) (err error) {
		got, err = datapathServers(c)
		return err
	}
	err := cliflags.Run(a, append([]string{"vigil-sandbox", "--workdir", t.TempDir(), "up"}, args...))
	return got, err
}

// TestApp_Up_DatapathServersDefault is the spec of --datapath-servers'
// default: 3 servers on nodes with 3 or more nodes, the host server (0)
// below, and the flag, 0 included, always wins.
func TestApp_Up_DatapathServersDefault(t *testing.T) {
	for _, tc := range []struct {
		args string
		want int
	}{
		{"--stack --nodes 1", 0},
		{"--stack --nodes 2", 0},
		{"--stack --nodes 3", 3},
		{"--stack --nodes 4", 3},
		{"--stack --nodes 5", 3},
		{"--stack", 3}, // --nodes defaults to 3
		{"--stack --nodes 1 --datapath-servers 1", 1},
		{"--stack --nodes 2 --datapath-servers 1", 1},
		{"--stack --nodes 3 --datapath-servers 1", 1},
		{"--stack --nodes 4 --datapath-servers 1", 1},
		{"--stack --nodes 5 --datapath-servers 5", 5},
		{"--stack --nodes 1 --datapath-servers 0", 0},
		{"--stack --nodes 2 --datapath-servers 0", 0},
		{"--stack --nodes 3 --datapath-servers 0", 0},
		{"--stack --nodes 4 --datapath-servers 0", 0},
		{"--stack --nodes 5 --datapath-servers=0", 0},
		{"--stack --nodes 3 --datapath-servers 3", 3},
		{"--stack --nodes 5 --datapath-servers 3", 3},
		{"--stack --racks 2 --rack-size 10", 0},
		{"--stack --racks 2 --nodes 3", 0},
		{"--nodes 3", 0}, // no stack: no datapath at all
	} {
		got, err := upServers(t, strings.Fields(tc.args)...)
		if err != nil || got != tc.want {
			t.Errorf("up %s: --datapath-servers = %d, %v; want %d", tc.args, got, err, tc.want)
		}
	}
}

func TestApp_Up_BadKubelet(t *testing.T) {
	dir := t.TempDir()
	for args, mention := range map[string]string{
		"--kubelet docker":                            `--kubelet "docker": want kwok or real`,
		"--node-image x.tar":                          "--node-image is for real nodes: give --kubelet real too",
		"--kubelet kwok --pause-image p":              "--pause-image is for real nodes",
		"--pod-subnet 10.9.0.0/16":                    "--pod-subnet is for real nodes",
		"--kubelet real --bin-dir /nonexistent":       "run `make image`, or give --node-image",
		"--kubelet real --node-image x.tar --racks 2": "with Racks",
		"--kubelet real --stack --node-image x.tar --pause-image p --pod-subnet 10.9.0.0/25": "PodSubnet", // --stack is taken on real nodes
		"--kubelet real --node-image x.tar --pause-image=":                                   "needs NodeImages",
		"--kubelet real --node-image x.tar --pause-image p --pod-subnet 10.9.0.0/25":         "PodSubnet",
	} {
		err := run(append([]string{"--workdir", dir, "up"}, strings.Fields(args)...)...)
		if err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("up %s = %v, want an error mentioning %q", args, err, mention)
		}
	}
	if _, err := sandbox.Open(dir); !errors.Is(err, sandbox.ErrNotUp) {
		t.Errorf("a refused up left a sandbox behind: %v", err)
	}
}

func TestApp_NodePartition_BadTarget(t *testing.T) {
	for _, args := range [][]string{{"--from", "both", "node-1"}, {"node-1", "--from", "both"}, {"node-1", "--from=kubelet"}} {
		err := run(append([]string{"--workdir", t.TempDir(), "node", "partition"}, args...)...)
		if !errors.Is(err, sandbox.ErrInvalidPartitionTarget) || !strings.Contains(err.Error(), "apiserver, datapath, all") {
			t.Errorf("node partition %q = %v, want ErrInvalidPartitionTarget naming the targets", args, err)
		}
	}
}

func TestApp_NodePartition_BadArgs(t *testing.T) {
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{nil, "node name"},
		{[]string{"node-1", "node-2"}, "node name"},
		{[]string{"node-1", "--from"}, "from"}, // the flag's value is missing
		{[]string{"node-1", "--to", "all"}, "to"},
	} {
		err := run(append([]string{"--workdir", t.TempDir(), "node", "partition"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("node partition %q = %v, want an error naming %q", c.args, err, c.mention)
		}
	}
}

// TestApp_FlagsAnywhere: every flag of every command is read after an
// argument too.
func TestApp_FlagsAnywhere(t *testing.T) {
	if err := cliflags.Check(app()); err != nil {
		t.Fatal(err)
	}
}

func TestApp_NodePartition_NotUp(t *testing.T) {
	err := run("--workdir", t.TempDir(), "node", "partition", "node-1", "--from", "apiserver")
	if !errors.Is(err, sandbox.ErrNotUp) {
		t.Errorf("node partition without a sandbox = %v, want ErrNotUp", err)
	}
}

func TestApp_Up_BadRacks(t *testing.T) {
	for _, args := range [][]string{{"--racks", "21"}, {"--racks", "2", "--rack-size", "0"}, {"--racks", "2", "--nodes", "3"}, {"--racks", "-1"}} {
		err := run(append([]string{"--workdir", t.TempDir(), "up"}, args...)...)
		if !errors.Is(err, sandbox.ErrInvalidConfig) {
			t.Errorf("up %q = %v, want ErrInvalidConfig", args, err)
		}
	}
}

func TestApp_Heartbeat_BadFlags(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("node a 0123456789abcdef0123\nnode b fedcba98765432100123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	controller := filepath.Join(dir, "controller")
	if err := os.WriteFile(controller, []byte("controller 0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dp, ca := []string{"--datapath", "127.0.0.1:1"}, []string{"--ca-file", filepath.Join(dir, "ca.crt")}
	with := func(parts ...[]string) []string { return slices.Concat(parts...) }
	for _, args := range [][]string{{}, dp, with(dp, []string{"--node-tokens-file", tokens}), // no CA
		with(dp, ca), // no tokens
		with(dp, ca, []string{"--node-tokens-file", filepath.Join(dir, "missing")}),
		with(dp, ca, []string{"--node-tokens-file", controller}),                  // the controller's token
		with(dp, ca, []string{"--node-tokens-file", tokens, "--nodes", "a,c"}),    // c has no token
		with(dp, ca, []string{"--node-tokens-file", tokens, "--nodes", "a,,b"}),   // an empty name
		with(dp, ca, []string{"--node-tokens-file", tokens, "--interval", "-1s"}), // negative interval
		with(dp, ca, []string{"--node-tokens-file", tokens}, []string{"extra"})} {
		err := run(append([]string{"heartbeat"}, args...)...)
		if !errors.Is(err, heartbeat.ErrBadConfig) {
			t.Errorf("heartbeat %q = %v, want heartbeat.ErrBadConfig", args, err)
		}
	}
}

func TestApp_NodeProcess_BadArgs(t *testing.T) {
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"kill", "node-1"}, "needs --process NAME: one of kwok, fd-keeper, engine, kubelet, containerd, kube-proxy, heartbeat"},
		{[]string{"restart", "node-1"}, "needs --process NAME: one of kwok, fd-keeper, engine, kubelet, containerd, kube-proxy, heartbeat"},
		{[]string{"kill", "--process", "engine"}, "one node name and --process NAME"},
		{[]string{"restart", "node-1", "node-2", "--process", "engine"}, "one node name and --process NAME"},
		{[]string{"kill", "node-1", "--process"}, "process"}, // the flag's value is missing
		{[]string{"restart", "node-1", "--process", "engine", "--timeout", "0s"}, "--timeout 0s: want a duration above 0"},
		{[]string{"restart", "node-1", "--process", "engine", "--timeout", "-1s"}, "want a duration above 0"},
		{[]string{"restart", "node-1", "--process", "engine", "--timeout", "soon"}, "timeout"},
		{[]string{"kill", "node-1", "--process", "engine", "--timeout", "1s"}, "timeout"}, // kill has no timeout
	} {
		dir := filepath.Join(t.TempDir(), "sandbox")
		err := run(append([]string{"--workdir", dir, "node"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("node %q = %v, want an error naming %q", c.args, err, c.mention)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("node %q touched the work directory: %v", c.args, err)
		}
	}
}

func TestApp_NodeProcess_NotUp(t *testing.T) {
	for _, cmd := range []string{"kill", "restart"} {
		err := run("--workdir", t.TempDir(), "node", cmd, "node-1", "--process", "engine")
		if !errors.Is(err, sandbox.ErrNotUp) {
			t.Errorf("node %s without a sandbox = %v, want ErrNotUp", cmd, err)
		}
	}
}

// TestApp_NodeProcess_Help: the help of kill and restart names every process
// the sandbox registers on a node and says what it does.
func TestApp_NodeProcess_Help(t *testing.T) {
	for _, cmd := range []*cli.Command{killCommand(), restartCommand()} {
		for _, p := range sandbox.NodeProcesses {
			if !strings.Contains(cmd.Description, p.Name+" ") || !strings.Contains(cmd.Description, p.Usage) {
				t.Errorf("help of node %s lacks %s: %s", cmd.Name, p.Name, p.Usage)
			}
		}
	}
	want := []string{sandbox.NodeKwok, sandbox.StackFDKeeper, sandbox.StackEngine, sandbox.StackKubelet,
		sandbox.NodeContainerd, sandbox.NodeKubeProxy, sandbox.StackHeartbeat}
	if len(sandbox.NodeProcesses) != len(want) {
		t.Errorf("NodeProcesses = %+v, want one entry for each of %q", sandbox.NodeProcesses, want)
	}
	for i, name := range want {
		if i < len(sandbox.NodeProcesses) && (sandbox.NodeProcesses[i].Name != name || sandbox.NodeProcesses[i].Usage == "") {
			t.Errorf("NodeProcesses[%d] = %+v, want %s with what it does", i, sandbox.NodeProcesses[i], name)
		}
	}
}

func TestApp_Powerfs_BadArgs(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"powerfs", dir},
		{"powerfs", "--backing", dir},
		{"powerfs", "--backing", dir, dir, dir},
	} {
		if err := run(args...); !errors.Is(err, errPowerfsUsage) {
			t.Errorf("%v = %v, want errPowerfsUsage", args, err)
		}
	}
	err := run("powerfs", "--backing", filepath.Join(dir, "missing"), dir)
	if err == nil || !strings.Contains(err.Error(), "backing directory") {
		t.Errorf("powerfs over a missing backing directory = %v, want an error naming it", err)
	}
}

func TestApp_ImagesBuild_BadInput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args    []string
		is      error
		mention string
	}{
		{[]string{"--only", "tools,nginx"}, images.ErrUnknownImage, `"nginx"; the images are vigil, pause`},
		{[]string{"--only", "tools", "--out", filepath.Join(file, "out")}, images.ErrBadOptions, "output directory"},
		{[]string{"--only", "vigil", "--bin-dir", t.TempDir()}, images.ErrBadOptions, "run make build"},
		{[]string{"--tag", "a b"}, images.ErrBadOptions, `tag "a b"`},
		{[]string{"tools"}, nil, "takes no arguments"},
	} {
		err := run(append([]string{"images", "build", "--out", filepath.Join(t.TempDir(), "out")}, c.args...)...)
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("images build %q = %v, want %v mentioning %q", c.args, err, c.is, c.mention)
		}
	}
}

// --install is refused, before anything is created, without real nodes,
// with --stack, with a bad timeout or a directory that is no
// kustomization; its own flags without it.
func TestApp_Up_BadInstall(t *testing.T) {
	dir := t.TempDir()
	for args, mention := range map[string]string{
		"--install":                                             "--install runs deploy/'s pods in containers, and kwok nodes run none: give --kubelet real",
		"--install --kubelet kwok":                              "give --kubelet real",
		"--install-dir deploy":                                  "--install-dir is for --install: give --install too",
		"--install-timeout 1m":                                  "--install-timeout is for --install: give --install too",
		"--install --kubelet real --stack":                      "--install and --stack both run Vigil",
		"--install --kubelet real --install-timeout 0s":         "--install-timeout 0s: want a positive duration",
		"--install --kubelet real --install-dir " + t.TempDir(): "want a kustomization directory (one holding kustomization.yaml)",
	} {
		err := run(append([]string{"--workdir", dir, "up"}, strings.Fields(args)...)...)
		if err == nil || !strings.Contains(err.Error(), mention) {
			t.Errorf("up %s = %v, want an error mentioning %q", args, err, mention)
		}
	}
	if _, err := sandbox.Open(dir); !errors.Is(err, sandbox.ErrNotUp) {
		t.Errorf("a refused up left a sandbox behind: %v", err)
	}
}
