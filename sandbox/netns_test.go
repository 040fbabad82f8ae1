package sandbox

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/internal/testenv"
)

func TestStartDetached_InNetns(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces and veth links")
	n := &nodeState{Name: "node-1", HostIP: "10.213.251.5", NodeIP: "10.213.251.6"}
	n.NetNS, n.HostVeth, n.NodeVeth = linkNames("unit-proc", NodeName(0), 0)
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
