package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/internal/testenv"
)

func TestConfig_Validate_Defaults(t *testing.T) {
	if err := (Config{Nodes: 3}).Validate(); err != nil {
		t.Fatalf("Validate(defaults) = %v, want nil", err)
	}
}

func TestConfig_Validate_Bad(t *testing.T) {
	for name, c := range map[string]Config{
		"no nodes":         {},
		"too many nodes":   {Nodes: MaxNodes + 1},
		"bad name":         {Nodes: 1, Name: "Vigil_1"},
		"long name":        {Nodes: 1, Name: strings.Repeat("a", 21)},
		"period > grace":   {Nodes: 1, NodeMonitorPeriod: 20 * time.Second, NodeMonitorGracePeriod: 10 * time.Second},
		"negative tol":     {Nodes: 1, DefaultTolerationSeconds: -1},
		"port":             {Nodes: 1, APIServerPort: 70000},
		"subnet not cidr":  {Nodes: 1, Subnet: "10.0.0.1"},
		"subnet ipv6":      {Nodes: 1, Subnet: "fd00::/64"},
		"subnet too small": {Nodes: 3, Subnet: "10.0.0.0/29"},
		"nodes and racks":  {Nodes: 3, Racks: 2},
		"too many racks":   {Racks: MaxRacks + 1},
		"rack too big":     {Racks: 1, RackSize: MaxRackSize + 1},
		"negative racks":   {Racks: -1},
		"racks subnet":     {Racks: 3, Subnet: "10.0.0.0/29"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate(%+v) = %v, want ErrInvalidConfig", c, err)
			}
		})
	}
}

func TestNodeAddrs_Layout(t *testing.T) {
	for i, want := range [][2]string{{"10.213.0.1", "10.213.0.2"}, {"10.213.0.5", "10.213.0.6"}, {"10.213.0.65", "10.213.0.66"}} {
		idx := []int{0, 1, 16}[i]
		h, n, err := nodeAddrs("10.213.0.0/16", idx)
		if err != nil || h.String() != want[0] || n.String() != want[1] {
			t.Errorf("nodeAddrs(%d) = %s, %s, %v; want %s, %s", idx, h, n, err, want[0], want[1])
		}
	}
}

func TestLinkNames_FitInterfaceNames(t *testing.T) {
	ns, h, n := linkNames(strings.Repeat("x", 20), NodeName(MaxNodes-1), MaxNodes-1)
	if len(h) > 15 || len(n) > 15 || h == n {
		t.Errorf("veth names %q %q: want distinct, at most 15 bytes", h, n)
	}
	if !strings.HasPrefix(ns, "vigil-") {
		t.Errorf("netns %q: want prefix vigil-", ns)
	}
	_, h2, _ := linkNames("other", NodeName(MaxNodes-1), MaxNodes-1)
	if h2 == h {
		t.Errorf("two sandboxes share veth name %q", h)
	}
}

func TestExpandArgs_NodeEnv(t *testing.T) {
	got := expandArgs([]string{"--node=$VIGIL_NODE", "${VIGIL_BOOT_ID}x", "plain"}, []string{"VIGIL_NODE=node-2", "VIGIL_BOOT_ID=b1"})
	want := []string{"--node=node-2", "b1x", "plain"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("expandArgs = %q, want %q", got, want)
	}
}

func TestKwokctlConfig_Flags(t *testing.T) {
	cfg := Config{Nodes: 2, NodeMonitorGracePeriod: 7 * time.Second, DefaultTolerationSeconds: 15}.withDefaults()
	st, err := newState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	y := kwokctlConfig(cfg, st)
	for _, want := range []string{`value: "7s"`, `value: "1s"`, `default-unreachable-toleration-seconds, value: "15"`,
		`"10.213.0.1"`, `"10.213.0.5"`, "bindAddress: 127.0.0.1", "- name: kube-scheduler\n  extraArgs:\n  - {key: leader-elect, value: \"false\"}",
		"node-monitor-period, value: \"1s\"}\n  - {key: leader-elect, value: \"false\"}",
		"enable-admission-plugins, value: NodeRestriction"} {
		if !strings.Contains(y, want) {
			t.Errorf("kwokctl config lacks %q:\n%s", want, y)
		}
	}
}

func TestState_SaveLoad_RoundTrip(t *testing.T) {
	cfg := Config{Nodes: 2, WorkDir: t.TempDir()}.withDefaults()
	st, err := newState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st.Nodes[1].Hooks = []*proc{{ProcessSpec: ProcessSpec{Name: "p", Args: []string{"a"}}, PID: 42}}
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(cfg.WorkDir)
	if err != nil {
		t.Fatal(err)
	}
	n, err := got.node("node-2")
	if err != nil || n.Hooks[0].PID != 42 || n.HostIP != "10.213.0.5" {
		t.Fatalf("loaded node-2 = %+v, %v", n, err)
	}
	if _, err := got.node("node-9"); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("node(node-9) = %v, want ErrUnknownNode", err)
	}
}

func TestLoadState_Missing(t *testing.T) {
	if _, err := loadState(t.TempDir()); !errors.Is(err, ErrNotUp) {
		t.Errorf("loadState(empty) = %v, want ErrNotUp", err)
	}
}

func TestDownWorkDir_NotUp(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sb")
	if err := DownWorkDir(dir); err != nil {
		t.Fatalf("DownWorkDir(never up) = %v, want nil", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("work dir still there: %v", err)
	}
}

func TestKillAll_ProcessGroup(t *testing.T) {
	testenv.RequireTool(t, "sh", "dash or bash")
	log := filepath.Join(t.TempDir(), "p.log")
	// A shell with a child: the child dies with the group.
	pid, start, err := startDetached("", []string{"sh", "-c", "sleep 60 & echo $! > " + log + ".child; wait"}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{ProcessSpec: ProcessSpec{Name: "sh"}, PID: pid, StartTime: start}
	var child int
	for i := 0; i < 100 && child == 0; i++ {
		b, _ := os.ReadFile(log + ".child")
		child = atoiOrZero(strings.TrimSpace(string(b)))
		time.Sleep(10 * time.Millisecond)
	}
	if !p.alive() || child == 0 {
		t.Fatalf("process not running (alive %v, child %d)", p.alive(), child)
	}
	if err := killAll([]*proc{p}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if p.PID != 0 {
		t.Errorf("PID not cleared: %d", p.PID)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := procStartTime(child); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d survived the group kill", child)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProc_Alive_PIDReuseGuard(t *testing.T) {
	p := &proc{PID: os.Getpid(), StartTime: 1}
	if p.alive() {
		t.Error("alive() with a wrong start time = true, want false")
	}
}

func TestNodeStatus_State(t *testing.T) {
	for _, c := range []struct {
		n    NodeStatus
		want string
	}{{NodeStatus{Powered: true}, "running"}, {NodeStatus{}, "stopped"},
		{NodeStatus{Powered: true, Partitioned: true, Partition: PartitionAPIServer}, "running,partitioned(apiserver)"}} {
		if got := c.n.State(); got != c.want {
			t.Errorf("%+v.State() = %q, want %q", c.n, got, c.want)
		}
	}
}

func TestCheckBinaries_Missing(t *testing.T) {
	err := CheckBinaries(t.TempDir())
	if !errors.Is(err, ErrBinariesMissing) || !strings.Contains(err.Error(), "make testbin") {
		t.Errorf("CheckBinaries(empty) = %v, want ErrBinariesMissing mentioning make testbin", err)
	}
}

func TestPins_AllVersions(t *testing.T) {
	p := Pins()
	for _, k := range []string{"ETCD_VERSION", "KUBERNETES_VERSION", "KWOK_VERSION", "EXTERNAL_ATTACHER_VERSION", "EXTERNAL_PROVISIONER_VERSION"} {
		if !strings.HasPrefix(p[k], "v") {
			t.Errorf("pin %s = %q, want a version", k, p[k])
		}
	}
	if !strings.Contains(BinDir(), p["KUBERNETES_VERSION"]) && os.Getenv("VIGIL_TESTBIN") == "" {
		t.Errorf("BinDir() = %s, want it named after the Kubernetes version", BinDir())
	}
}

func atoiOrZero(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0
		}
		n = n*10 + int(r-'0')
	}
	return n
}

func TestBinDir_MatchesTestbinScript(t *testing.T) {
	testenv.RequireTool(t, "bash", "bash")
	out, err := exec.Command("bash", "tools/testbin.sh", "--dir").Output()
	if err != nil {
		t.Fatalf("bash tools/testbin.sh --dir: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != BinDir() {
		t.Errorf("testbin.sh --dir = %s, BinDir() = %s: the two must agree", got, BinDir())
	}
}

func TestNewState_Racks(t *testing.T) {
	cfg := Config{Racks: 2, RackSize: 3, WorkDir: t.TempDir()}.withDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	st, err := newState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 2 || st.Nodes[1].Name != "rack-2" || st.Nodes[1].HostIP != "10.213.0.5" {
		t.Fatalf("racks %+v, want rack-1 and rack-2 with one link each", st.Nodes)
	}
	want := []string{"rack-1-node-1", "rack-1-node-2", "rack-1-node-3", "rack-2-node-1", "rack-2-node-2", "rack-2-node-3"}
	if got := st.k8sNodes(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("k8sNodes = %v, want %v", got, want)
	}
	if env := strings.Join(nodeEnv(st, st.Nodes[0]), " "); !strings.Contains(env, "VIGIL_NODES=rack-1-node-1,rack-1-node-2,rack-1-node-3") {
		t.Errorf("rack env %s lacks VIGIL_NODES", env)
	}
	if y := kwokctlConfig(cfg, st); strings.Count(y, "kube-api-qps, value: \"500\"") != 2 {
		t.Errorf("scale sandbox config does not lift kcm's and the scheduler's QPS:\n%s", y)
	}
	if y := kwokctlConfig(Config{Nodes: 1}.withDefaults(), st); strings.Contains(y, "kube-api-qps") {
		t.Errorf("a node sandbox changes the QPS:\n%s", y)
	}
	if (Config{Racks: 10}).Validate() != nil {
		t.Error("10 racks of the default 50 refused")
	}
}

// A descriptor the test process inherited (flock's lock, say) is not passed on
// to the processes the sandbox starts.
func TestStartDetached_InheritedDescriptorNotPassedOn(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "lockfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Make it look inherited: a descriptor without close-on-exec.
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	closeInheritedOnExec = sync.OnceFunc(closeInheritedOnExecBody)
	out := filepath.Join(dir, "fds")
	// It lingers a little after listing: startDetached reads the start time of
	// what it started, and a process already gone counts as one that failed.
	pid, _, err := startDetached("", []string{"sh", "-c", "ls -l /proc/$$/fd > " + out + "; sleep 0.3"}, nil, filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		if _, err := procStartTime(pid); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "lockfile") {
		t.Errorf("the started process got the inherited descriptor:\n%s", b)
	}
}
