package sandbox

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/internal/testenv"
)

<<<<<<< HEAD
func TestStartDetached_InNetns(t *testing.T) {
	RequireRoot(t)
=======
// dialFromNetns reports whether a TCP connection from inside netns to addr succeeds
// within 2 s (bash's /dev/tcp).
func dialFromNetns(netns, addr string) bool {
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "ip", "netns", "exec", netns, "bash", "-c",
		"exec 3<>/dev/tcp/"+host+"/"+port).Run() == nil
}

func TestLink_PartitionAndHeal(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces and veth links")
	n := &nodeState{Name: "node-1", HostIP: "10.213.251.1", NodeIP: "10.213.251.2"}
	n.NetNS, n.HostVeth, n.NodeVeth = linkNames("unit-link", 0)
	t.Cleanup(func() {
		if err := deleteLink(n); err != nil {
			t.Error(err)
		}
		if netnsExists(n.NetNS) || linkExists(n.HostVeth) {
			t.Errorf("netns %s or veth %s left behind", n.NetNS, n.HostVeth)
		}
	})
	if err := createLink(n); err != nil {
		t.Fatal(err)
	}
	if err := createLink(n); err == nil {
		t.Error("second createLink of the same node succeeded, want an error")
	}
	l, err := net.Listen("tcp", n.HostIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if !dialFromNetns(n.NetNS, l.Addr().String()) {
		t.Fatal("node cannot reach the host end of its link")
	}
	if err := setLink(n, false); err != nil {
		t.Fatal(err)
	}
	if dialFromNetns(n.NetNS, l.Addr().String()) {
		t.Error("partitioned node still reaches the host")
	}
	if err := setLink(n, true); err != nil {
		t.Fatal(err)
	}
	ok := false
	for i := 0; i < 20 && !ok; i++ {
		ok = dialFromNetns(n.NetNS, l.Addr().String())
	}
	if !ok {
		t.Error("healed node cannot reach the host")
	}
}

func TestStartDetached_InNetns(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces and veth links")
>>>>>>> main
	n := &nodeState{Name: "node-1", HostIP: "10.213.251.5", NodeIP: "10.213.251.6"}
	n.NetNS, n.HostVeth, n.NodeVeth = linkNames("unit-proc", 0)
	t.Cleanup(func() { _ = deleteLink(n) })
	if err := createLink(n); err != nil {
		t.Fatal(err)
	}
	p := &proc{ProcessSpec: ProcessSpec{Name: "sleep", Args: []string{"sleep", "100"}}, Log: t.TempDir() + "/log"}
	if err := startProc(n, p, nil); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = killAll([]*proc{p}, 5*time.Second) }()
	mine, _ := os.Readlink("/proc/self/ns/net")
	var theirs string
	for i := 0; i < 100; i++ { // nsenter switches namespace, then execs
		theirs, _ = os.Readlink("/proc/" + itoa(p.PID) + "/ns/net")
		if theirs != mine {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if theirs == mine || theirs == "" {
		t.Errorf("process net namespace %q, want one other than ours (%q)", theirs, mine)
	}
	if err := killAll([]*proc{p}, 5*time.Second); err != nil || p.alive() {
		t.Errorf("killAll = %v, alive %v", err, p.alive())
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
