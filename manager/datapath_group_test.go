package manager

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/devcerts"
)

// groupServer is one `serve` child of a three-server group.
type groupServer struct {
	cmd       *exec.Cmd
	addr      string // where it listens
	advertise string // --advertise-address
	ca        string // --raft-ca-file, the CA of its certificate
	ready     chan struct{}
}

// startGroupServe starts `serve` children at once (each waits for the
// group's leader before it listens) and returns once every one listens.
func startGroupServe(t *testing.T, args [][]string) []*groupServer {
	t.Helper()
	out := make([]*groupServer, len(args))
	for i, a := range args {
		out[i] = spawnServe(t, a)
	}
	for i, g := range out {
		if !g.waitListening(30 * time.Second) {
			t.Fatalf("server %d never listened", i)
		}
	}
	return out
}

// spawnServe starts one `serve` child with args (after --listen
// 127.0.0.1:0, which a --listen of args overrides); it does not wait.
func spawnServe(t *testing.T, a []string) *groupServer {
	t.Helper()
	g := &groupServer{ready: make(chan struct{})}
	for j := range a {
		switch a[j] {
		case "--advertise-address":
			g.advertise = a[j+1]
		case "--raft-ca-file":
			g.ca = a[j+1]
		}
	}
	var pipe io.Reader
	g.cmd, pipe = serveChild(t, a)
	t.Cleanup(func() { _ = g.cmd.Process.Kill(); _ = g.cmd.Wait() })
	go func() {
		lines := bufio.NewScanner(pipe)
		for lines.Scan() {
			if addr, ok := listeningAt(lines.Text()); ok && g.addr == "" {
				g.addr = addr
				close(g.ready)
			}
		}
	}()
	return g
}

// waitListening reports whether g listens within d.
func (g *groupServer) waitListening(d time.Duration) bool {
	select {
	case <-g.ready:
		return true
	case <-time.After(d):
		return false
	}
}

// role asks server g for its own role, as the controller.
func (g *groupServer) role(ctx context.Context) (datapath.ServerStatus, error) {
	c, err := client.Dial(ctx, g.addr, "controller-token-0123", client.WithCAFile(g.ca), client.WithTimeout(time.Second), client.WithRetries(0))
	if err != nil {
		return datapath.ServerStatus{}, err
	}
	defer c.Close()
	rep, err := c.Servers(ctx)
	if err != nil {
		return datapath.ServerStatus{}, err
	}
	for _, s := range rep.Servers {
		if s.Self {
			return s, nil
		}
	}
	return datapath.ServerStatus{}, fmt.Errorf("no row of its own in %+v", rep.Servers)
}

// TestDatapathServe_GroupAdvertisesAndHandsOverOnSIGTERM: three `serve`
// processes that listen on 127.0.0.1 and are known to each other by the
// name localhost (--raft-advertise, as a StatefulSet's pods by their DNS
// names) and to clients by their --advertise-address form one group, Raft
// over mutual TLS with their shared certificate (--raft-ca-file); the
// leader records every server's advertised datapath address at once (the
// peer list gives them). On SIGTERM the leader
// hands the leadership over before it exits, so another server leads at
// once, not after the group's heartbeat timeout (0.5 s, then an election).
func TestDatapathServe_GroupAdvertisesAndHandsOverOnSIGTERM(t *testing.T) {
	tokens := writeFile(t, "tokens", serveTokens)
	certs, err := devcerts.WriteServerFiles(t.TempDir(), []string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var raftPorts []string
	for range 3 {
		_, port, _ := net.SplitHostPort(freeAddr(t))
		raftPorts = append(raftPorts, port)
	}
	var peers []string
	for i, p := range raftPorts {
		peers = append(peers, fmt.Sprintf("dp-%d=localhost:%s@dp-%d.example:9600", i, p, i))
	}
	var args [][]string
	for i, p := range raftPorts {
		args = append(args, []string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--token-file", tokens,
			"--server-id", fmt.Sprintf("dp-%d", i), "--node-name", fmt.Sprintf("node-%d", i), "--raft-listen", "127.0.0.1:" + p, "--raft-advertise", "localhost:" + p,
			"--raft-peers", strings.Join(peers, ","), "--advertise-address", fmt.Sprintf("dp-%d.example:9600", i),
			"--tls-cert-file", certs.Cert, "--tls-private-key-file", certs.Key, "--raft-ca-file", certs.CA})
	}
	srvs := startGroupServe(t, args)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader := -1
	for i, g := range srvs {
		s, err := g.role(ctx)
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		if s.Role == datapath.RoleLeader {
			leader = i
			if s.Address != g.advertise || s.RaftAddress != "localhost:"+raftPorts[i] {
				t.Errorf("the leader's record: %+v; want its advertised addresses %s and localhost:%s", s, g.advertise, raftPorts[i])
			}
		}
		if want := fmt.Sprintf("node-%d", i); s.Node != want { // every server's own row, recorded or not
			t.Errorf("server %d's own row: %+v; want node %s (--node-name)", i, s, want)
		}
	}
	if leader < 0 {
		t.Fatal("no server leads")
	}
	c, err := client.Dial(ctx, srvs[leader].addr, "controller-token-0123", client.WithCAFile(srvs[leader].ca), client.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Servers {
		if s.Self && s.Node != fmt.Sprintf("node-%d", leader) {
			t.Errorf("the leader's record of itself: %+v; want node node-%d", s, leader)
		}
	}
	for _, s := range rep.Servers { // every server recorded at once, not only the leader
		if i := strings.TrimPrefix(s.ID, "dp-"); s.Address != srvs[atoi(t, i)].advertise || s.RaftAddress != "localhost:"+raftPorts[atoi(t, i)] {
			t.Errorf("the leader's record of %s: %+v; want %s and localhost:%s", s.ID, s, srvs[atoi(t, i)].advertise, raftPorts[atoi(t, i)])
		}
	}
	if len(rep.Servers) != 3 {
		t.Errorf("the leader records %d servers, want 3: %+v", len(rep.Servers), rep.Servers)
	}
	if err := srvs[leader].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srvs[leader].cmd.Wait(); err != nil {
		t.Fatalf("the leader's exit after SIGTERM: %v", err)
	}
	exited := time.Now()
	for {
		for i, g := range srvs {
			if i == leader {
				continue
			}
			if s, err := g.role(ctx); err == nil && s.Role == datapath.RoleLeader {
				t.Logf("dp-%d leads %s after dp-%d exited", i, time.Since(exited).Round(time.Millisecond), leader)
				return
			}
		}
		if since := time.Since(exited); since > 300*time.Millisecond {
			t.Fatalf("no server leads %s after the leader's SIGTERM exit: it did not hand the leadership over", since)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
