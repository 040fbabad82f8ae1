package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParsePartitionTarget_Good(t *testing.T) {
	for _, s := range []string{"all", "apiserver", "datapath"} {
		if got, err := ParsePartitionTarget(s); err != nil || string(got) != s {
			t.Errorf("ParsePartitionTarget(%q) = %q, %v; want %q, nil", s, got, err, s)
		}
	}
}

func TestParsePartitionTarget_Bad(t *testing.T) {
	for _, s := range []string{"", "API", "both", "apiserver ", "kubelet"} {
		_, err := ParsePartitionTarget(s)
		if !errors.Is(err, ErrInvalidPartitionTarget) {
			t.Errorf("ParsePartitionTarget(%q) = %v, want ErrInvalidPartitionTarget", s, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("%q", s)) || !strings.Contains(msg, "apiserver, datapath, all") {
			t.Errorf("ParsePartitionTarget(%q) error %q: want the value and the allowed targets", s, msg)
		}
	}
}

func TestPartitionRuleset_Targets(t *testing.T) {
	n := &nodeState{Name: "node-1", HostIP: "10.213.0.1", NodeVeth: "vgabcden0"}
	for _, c := range []struct {
		target    PartitionTarget
		want, not []string
	}{
		{PartitionAPIServer, []string{"ip daddr 10.213.0.1 tcp dport 6443 drop", "ip saddr 10.213.0.1 tcp sport 6443 drop"}, []string{"9600", "oifname"}},
		{PartitionDatapath, []string{"ip daddr 10.213.0.1 tcp dport 9600 drop", "ip saddr 10.213.0.1 tcp sport 9600 drop"}, []string{"6443", "oifname"}},
		{PartitionAll, []string{`oifname "vgabcden0" drop`, `iifname "vgabcden0" drop`}, []string{"6443", "9600"}},
	} {
		script, err := partitionRuleset(n, c.target, cutPorts{api: 6443, datapath: 9600})
		if err != nil {
			t.Fatalf("%s: %v", c.target, err)
		}
		// Replacing, not adding: the old table goes in the same transaction.
		if !strings.HasPrefix(script, "table inet vigil_partition\ndelete table inet vigil_partition\n") {
			t.Errorf("%s: script does not replace the table first:\n%s", c.target, script)
		}
		for _, w := range c.want {
			if !strings.Contains(script, w) {
				t.Errorf("%s: script lacks %q:\n%s", c.target, w, script)
			}
		}
		for _, w := range c.not {
			if strings.Contains(script, w) {
				t.Errorf("%s: script has %q:\n%s", c.target, w, script)
			}
		}
		if strings.Contains(script, "reject") {
			t.Errorf("%s: script rejects instead of dropping silently:\n%s", c.target, script)
		}
	}
}

// A real node's cut also holds its pods' packets (the forward hook), and
// matches the port over the node's link: pods reach the API server at the
// `kubernetes` Service's endpoint, another node's host end.
func TestPartitionRuleset_RealNode(t *testing.T) {
	n := &nodeState{Name: "node-2", HostIP: "10.213.0.5", NodeVeth: "vgabcden1", Cgroup: "vigil-x-node-2"}
	script, err := partitionRuleset(n, PartitionAPIServer, cutPorts{api: 6443, datapath: 9600})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"hook forward", `oifname "vgabcden1" tcp dport 6443 drop`, `iifname "vgabcden1" tcp sport 6443 drop`} {
		if !strings.Contains(script, w) {
			t.Errorf("script lacks %q:\n%s", w, script)
		}
	}
	if strings.Count(script, "tcp dport 6443 drop") != 2 || strings.Contains(script, "10.213.0.5") {
		t.Errorf("want the port dropped in output and forward, over the link, not by the host end's address:\n%s", script)
	}
	script, err = partitionRuleset(n, PartitionAll, cutPorts{api: 6443, datapath: 9600})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(script, `oifname "vgabcden1" drop`) != 2 || strings.Count(script, `iifname "vgabcden1" drop`) != 2 {
		t.Errorf("want every packet over the link dropped in output, input and forward:\n%s", script)
	}
	kwok, err := partitionRuleset(&nodeState{Name: "node-2", HostIP: "10.213.0.5", NodeVeth: "vgabcden1"}, PartitionAll, cutPorts{api: 6443, datapath: 9600})
	if err != nil || strings.Contains(kwok, "forward") {
		t.Errorf("a kwok node's cut has no forward chain (%v):\n%s", err, kwok)
	}
}

func TestPartitionRuleset_Bad(t *testing.T) {
	n := &nodeState{Name: "node-1", HostIP: "10.213.0.1", NodeVeth: "v"}
	if _, err := partitionRuleset(n, "both", cutPorts{api: 6443, datapath: 9600}); !errors.Is(err, ErrInvalidPartitionTarget) {
		t.Errorf("target both: %v, want ErrInvalidPartitionTarget", err)
	}
	if _, err := partitionRuleset(n, PartitionDatapath, cutPorts{api: 6443}); !errors.Is(err, ErrInvalidPartitionTarget) {
		t.Errorf("datapath without a port: %v, want ErrInvalidPartitionTarget", err)
	}
	_, err := partitionRuleset(n, PartitionDatapathGroup, cutPorts{api: 6443, datapath: 9600})
	if !errors.Is(err, ErrInvalidPartitionTarget) || !strings.Contains(err.Error(), "no datapath servers run on nodes") {
		t.Errorf("datapath-group without servers on nodes: %v, want ErrInvalidPartitionTarget saying so", err)
	}
}

// A cut from the datapath group drops the Raft port over the node's link,
// both ways, and nothing else: the server's clients (the datapath port) and
// the API server still get through.
func TestPartitionRuleset_DatapathGroup(t *testing.T) {
	n := &nodeState{Name: "node-1", HostIP: "10.213.0.1", NodeVeth: "vgabcden0"}
	script, err := partitionRuleset(n, PartitionDatapathGroup, cutPorts{api: 6443, datapath: 9600, raft: 9601})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`oifname "vgabcden0" tcp dport 9601 drop`, `oifname "vgabcden0" tcp sport 9601 drop`,
		`iifname "vgabcden0" tcp sport 9601 drop`, `iifname "vgabcden0" tcp dport 9601 drop`} {
		if !strings.Contains(script, w) {
			t.Errorf("script lacks %q:\n%s", w, script)
		}
	}
	for _, w := range []string{"9600", "6443", `"vgabcden0" drop`} {
		if strings.Contains(script, w) {
			t.Errorf("script has %q: a cut from the group must leave the clients and the API server through:\n%s", w, script)
		}
	}
}

// echoServer answers each line it reads with the same line, on 127.0.0.1.
func echoServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// dialFrom connects to addr from inside network namespace netns: the socket is
// made by a thread that entered netns and is never returned to the runtime.
func dialFrom(netns, addr string, timeout time.Duration) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with this goroutine
		f, err := os.Open("/run/netns/" + netns)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("setns %s: %w", netns, err)}
			return
		}
		c, err := net.DialTimeout("tcp", addr, timeout)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// roundTrip sends a line over c and waits up to timeout for its echo.
func roundTrip(c net.Conn, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != "ping\n" {
		err = fmt.Errorf("echo %q, want ping", line)
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// partitionFixture is one node link with the sandbox's two kinds of forwarders
// on its host end (socat, exactly as Up and StartStack start them), each to an
// echo server standing in for the API server and the datapath, and a Sandbox
// whose state records them.
type partitionFixture struct {
	s               *Sandbox
	n               *nodeState
	apiAddr, dpAddr string
}

func newPartitionFixture(t *testing.T, withDatapath bool) *partitionFixture {
	t.Helper()
	RequireRoot(t)
	dir := t.TempDir()
	st := &state{Name: "unit-part", WorkDir: dir}
	n := &nodeState{Name: "node-1", HostIP: "10.213.251.9", NodeIP: "10.213.251.10"}
	n.NetNS, n.HostVeth, n.NodeVeth = linkNames("unit-part", NodeName(0), 0)
	st.Nodes = []*nodeState{n}
	t.Cleanup(func() {
		_ = killAll(st.Forwarders, 5*time.Second)
		if err := deleteLink(n); err != nil {
			t.Error(err)
		}
	})
	if err := createLink(n); err != nil {
		t.Fatal(err)
	}
	forward := func(name string, port, backend int) {
		p := &proc{ProcessSpec: ProcessSpec{Name: name, Args: []string{"socat",
			fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr", port, n.HostIP), fmt.Sprintf("TCP:127.0.0.1:%d", backend)}},
			Log: filepath.Join(dir, name+".log")}
		var err error
		p.PID, p.StartTime, err = startDetached("", p.Args, nil, p.Log)
		if p.PID != 0 {
			st.Forwarders = append(st.Forwarders, p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	st.APIServerPort = echoServer(t)
	forward("forward-api", st.APIServerPort, st.APIServerPort)
	f := &partitionFixture{n: n, apiAddr: net.JoinHostPort(n.HostIP, fmt.Sprint(st.APIServerPort))}
	if withDatapath {
		st.DatapathPort = echoServer(t)
		forward("forward-datapath", st.DatapathPort, st.DatapathPort)
		f.dpAddr = net.JoinHostPort(n.HostIP, fmt.Sprint(st.DatapathPort))
	}
	if err := st.save(); err != nil {
		t.Fatal(err)
	}
	f.s = &Sandbox{workDir: dir, logf: t.Logf}
	for _, a := range []string{f.apiAddr, f.dpAddr} {
		if a != "" {
			if err := waitTCP(t.Context(), a, 10*time.Second, "forwarder"); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

// check dials each forwarder from inside the node: reachable ones must answer an
// echo; cut ones must time out (silently dropped, never refused or reset).
func (f *partitionFixture) check(t *testing.T, what string, apiOK, dpOK bool) {
	t.Helper()
	for _, c := range []struct {
		name, addr string
		ok         bool
	}{{"API server forwarder", f.apiAddr, apiOK}, {"datapath forwarder", f.dpAddr, dpOK}} {
		if c.addr == "" {
			continue
		}
		timeout := time.Second
		if c.ok {
			timeout = 10 * time.Second
		}
		conn, err := dialFrom(f.n.NetNS, c.addr, timeout)
		if err == nil {
			err = roundTrip(conn, timeout)
			conn.Close()
		}
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %s %s from inside the node: %v, want an answer", what, c.name, c.addr, err)
		case !c.ok && err == nil:
			t.Errorf("%s: %s %s answered from inside the node, want it cut", what, c.name, c.addr)
		case !c.ok && !isTimeout(err):
			t.Errorf("%s: %s %s: %v, want a timeout (a silent drop, not a refusal or reset)", what, c.name, c.addr, err)
		}
	}
}

func (f *partitionFixture) partition(t *testing.T) PartitionTarget {
	t.Helper()
	st, err := loadState(f.s.workDir)
	if err != nil {
		t.Fatal(err)
	}
	return st.Nodes[0].Partition
}

// TestSandbox_Partition_Targets cuts one node link from each target in turn and
// checks, from inside the node's namespace, which forwarder still answers; a
// connection opened before a cut stalls (no reset); Heal restores both.
func TestSandbox_Partition_Targets(t *testing.T) {
	f := newPartitionFixture(t, true)
	f.check(t, "before any cut", true, true)

	early, err := dialFrom(f.n.NetNS, f.apiAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	if err := roundTrip(early, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		target      PartitionTarget
		apiOK, dpOK bool
	}{{PartitionAPIServer, false, true}, {PartitionDatapath, true, false}, {PartitionAll, false, false}, {PartitionAPIServer, false, true}} {
		if err := f.s.Partition("node-1", c.target); err != nil {
			t.Fatalf("Partition(%s): %v", c.target, err)
		}
		if got := f.partition(t); got != c.target {
			t.Errorf("state after Partition(%s): partition %q", c.target, got)
		}
		f.check(t, "cut from "+string(c.target), c.apiOK, c.dpOK)
	}
	// Under the API server cut, the connection opened before it stalls.
	if err := roundTrip(early, time.Second); !isTimeout(err) {
		t.Errorf("connection opened before the API server cut: %v, want a timeout (stalled, not reset)", err)
	}

	if err := f.s.Heal("node-1"); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Heal("node-1"); err != nil {
		t.Errorf("second Heal: %v, want nil (idempotent)", err)
	}
	if got := f.partition(t); got != "" {
		t.Errorf("state after Heal: partition %q, want none", got)
	}
	f.check(t, "healed", true, true)
}

// TestSandbox_Partition_Bad refuses a bad target, an unknown node and a
// datapath cut without a stack, each with a clear error and no change.
func TestSandbox_Partition_Bad(t *testing.T) {
	f := newPartitionFixture(t, false)
	err := f.s.Partition("node-1", "both")
	if !errors.Is(err, ErrInvalidPartitionTarget) || !strings.Contains(err.Error(), "apiserver, datapath, all") {
		t.Errorf("Partition(both) = %v, want ErrInvalidPartitionTarget naming the targets", err)
	}
	if err := f.s.Partition("node-9", PartitionAll); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("Partition(node-9) = %v, want ErrUnknownNode", err)
	}
	err = f.s.Partition("node-1", PartitionDatapath)
	if !errors.Is(err, ErrNotUp) || !strings.Contains(err.Error(), "no Vigil stack") {
		t.Errorf("Partition(datapath) without a stack = %v, want ErrNotUp saying no stack runs", err)
	}
	err = f.s.Partition("node-1", PartitionDatapathGroup)
	if !errors.Is(err, ErrNotUp) || !strings.Contains(err.Error(), "do not run on nodes") {
		t.Errorf("Partition(datapath-group) without servers on nodes = %v, want ErrNotUp saying so", err)
	}
	if got := f.partition(t); got != "" {
		t.Errorf("after refused partitions: partition %q, want none", got)
	}
	f.check(t, "after refused partitions", true, true)
}
