package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
)

// TestDatapathServe_GrowsTheBboltReleaseToThree: a data directory of the
// release that kept its control state in datapath.db is upgraded by a lone
// server (Raft in process), which is restarted with --raft-listen (same
// directory and id) and grown to three with two servers started with
// --raft-join and added by `add-server`. Every volume keeps its epoch, a
// fence is committed by the three, and the old lone server is then stopped
// without losing the group: another leads, with every volume and epoch.
func TestDatapathServe_GrowsTheBboltReleaseToThree(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if out, err := exec.Command("cp", "-r", filepath.Join("..", "datapath", "testdata", "release-bbolt"), data).CombinedOutput(); err != nil {
		t.Fatalf("copy the fixture: %v\n%s", err, out)
	}
	tokens, ctlToken := writeFile(t, "tokens", serveTokens), writeFile(t, "ctl", "controller-token-0123\n")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	lone := startGroupServe(t, [][]string{{"--data-dir", data, "--token-file", tokens, "--over-provisioning-percentage", "1000"}})[0]
	before := grownVolumes(t, ctx, lone.addr)
	if len(before) != 5 {
		t.Fatalf("the upgraded lone server's volumes: %+v; want the fixture's 5", before)
	}
	stopServe(t, lone)

	raft := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	dp := []string{"", freeAddr(t), freeAddr(t)}
	first := startGroupServe(t, [][]string{{"--data-dir", data, "--token-file", tokens, "--over-provisioning-percentage", "1000", "--raft-listen", raft[0]}})[0]
	dp[0] = first.addr
	joiners := []*groupServer{nil}
	for i := 1; i < 3; i++ {
		joiners = append(joiners, spawnServe(t, []string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--token-file", tokens, "--listen", dp[i],
			"--server-id", fmt.Sprintf("datapath-%d", i), "--raft-listen", raft[i], "--raft-join"}))
	}
	if joiners[1].waitListening(time.Second) {
		t.Fatal("a joining server served before it was added")
	}
	for i := 1; i < 3; i++ {
		app, out := DatapathApp(), &bytes.Buffer{}
		app.Writer = out
		err := app.Run([]string{DatapathBinary, "add-server", "--addr", dp[0], "--token-file", ctlToken,
			"--server-id", fmt.Sprintf("datapath-%d", i), "--raft-address", raft[i], "--advertise-address", dp[i]})
		if err != nil {
			t.Fatalf("add-server datapath-%d: %v\n%s", i, err, out)
		}
		for _, want := range []string{"added as a non-voter", "catching up: applied", "as a voter"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("add-server datapath-%d printed:\n%s\nwant it to say %q", i, out, want)
			}
		}
		if !joiners[i].waitListening(30 * time.Second) {
			t.Fatalf("datapath-%d did not serve after it was added", i)
		}
	}
	c, err := client.Dial(ctx, dp[0], "controller-token-0123", client.WithServers(dp[1], dp[2]), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rep, err := c.Servers(ctx)
	if err != nil || len(rep.Servers) != 3 {
		t.Fatalf("the group's servers: %+v, %v; want 3", rep.Servers, err)
	}
	for _, s := range rep.Servers {
		if want := dp[s.ID[len(s.ID)-1]-'0']; s.Address != want {
			t.Errorf("%s recorded serving clients at %s, want %s", s.ID, s.Address, want)
		}
	}
	checkSameVolumes(t, before, grownVolumes(t, ctx, dp[0]), nil)
	const pvcA = "vol-30f36322caca48de" // node-2 granted at epoch 3 in the fixture
	e, err := c.Fence(ctx, pvcA, "node-2")
	if err != nil || e != 4 {
		t.Fatalf("fence node-2 on pvc-a in the group of three: epoch %d, %v; want 4", e, err)
	}

	stopServe(t, first) // the old lone server, which holds every volume's data
	leader := waitLeaderAmong(t, ctx, dp[1], dp[2])
	checkSameVolumes(t, before, grownVolumes(t, ctx, leader), map[string]uint64{pvcA: 4})
	rest, err := client.Dial(ctx, dp[1], "controller-token-0123", client.WithServers(dp[2]), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Close()
	if _, err := rest.Fence(ctx, pvcA, "node-2"); err != nil && !errors.Is(err, datapath.ErrNotApplied) {
		t.Fatalf("a fence with the old server stopped: %v; want it committed (NOT_APPLIED: the stopped server holds the data)", err)
	}
	checkSameVolumes(t, before, grownVolumes(t, ctx, leader), map[string]uint64{pvcA: 5})
}

// stopServe stops a serve child with SIGTERM and waits for its exit.
func stopServe(t *testing.T, g *groupServer) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// grownVolumes is the group's volumes as the server at addr (or the leader
// it names) reports them.
func grownVolumes(t *testing.T, ctx context.Context, addr string) []datapath.GroupVolume {
	t.Helper()
	c, err := client.Dial(ctx, addr, "controller-token-0123", client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vs, err := c.GroupVolumes(ctx)
	if err != nil {
		t.Fatalf("the group's volumes at %s: %v", addr, err)
	}
	return vs
}

// checkSameVolumes fails unless got holds before's volumes, each on its
// server and at its epoch (or the one bumped says).
func checkSameVolumes(t *testing.T, before, got []datapath.GroupVolume, bumped map[string]uint64) {
	t.Helper()
	if len(got) != len(before) {
		t.Fatalf("volumes %+v; want %+v", got, before)
	}
	for i, v := range before {
		if e, ok := bumped[v.ID]; ok {
			v.Epoch = e
		}
		if !reflect.DeepEqual(got[i], v) {
			t.Fatalf("volume %d: %+v; want %+v", i, got[i], v)
		}
	}
}

// waitLeaderAmong waits for one of addrs to lead, and returns it.
func waitLeaderAmong(t *testing.T, ctx context.Context, addrs ...string) string {
	t.Helper()
	for ctx.Err() == nil {
		for _, a := range addrs {
			if s, err := (&groupServer{addr: a}).role(ctx); err == nil && s.Role == datapath.RoleLeader {
				return a
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("none of %s leads", strings.Join(addrs, ", "))
	return ""
}

// TestDatapathAddServer_BadFlags: add-server refuses a missing or malformed
// item by name before it calls anything, and a server that does not run is
// refused by the leader, the group unchanged.
func TestDatapathAddServer_BadFlags(t *testing.T) {
	tok := writeFile(t, "ctl", "controller-token-0123\n")
	good := []string{"--token-file", tok, "--server-id", "datapath-1", "--raft-address", "127.0.0.1:9601", "--advertise-address", "127.0.0.1:9600"}
	with := func(flag, value string) []string {
		out := append([]string{}, good...)
		for i := range out {
			if out[i] == flag {
				out[i+1] = value
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no server id", []string{"--token-file", tok, "--raft-address", "127.0.0.1:9601", "--advertise-address", "127.0.0.1:9600"}, `"server-id" not set`},
		{"raft address without a port", with("--raft-address", "dp-1.example"), `--raft-address "dp-1.example": want HOST:PORT`},
		{"clients' address 0.0.0.0", with("--advertise-address", "0.0.0.0:9600"), "not 0.0.0.0"},
		{"an argument", append(append([]string{}, good...), "datapath-1"), "add-server takes no arguments"},
		{"no catch-up time", append(append([]string{}, good...), "--catch-up-timeout", "0s"), "--catch-up-timeout 0s: want a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := DatapathApp().Run(append([]string{DatapathBinary, "add-server", "--timeout", "2s"}, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}

	tokens := writeFile(t, "tokens", serveTokens)
	lone := startGroupServe(t, [][]string{{"--data-dir", filepath.Join(t.TempDir(), "data"), "--token-file", tokens, "--raft-listen", freeAddr(t)}})[0]
	down := freeAddr(t) // nothing listens there
	err := DatapathApp().Run([]string{DatapathBinary, "add-server", "--addr", lone.addr, "--token-file", tok, "--timeout", "10s",
		"--server-id", "datapath-1", "--raft-address", down, "--advertise-address", "127.0.0.1:9600"})
	if err == nil || !strings.Contains(err.Error(), "raft address "+down+" does not answer") || !strings.Contains(err.Error(), "--raft-join") {
		t.Fatalf("add a server that does not run: %v; want a refusal naming its raft address and --raft-join", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, lone.addr, "controller-token-0123")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rep, err := c.Servers(ctx); err != nil || len(rep.Servers) != 1 {
		t.Fatalf("the group after the refusal: %+v, %v; want its one server", rep.Servers, err)
	}
	if _, err := c.CreateVolume(ctx, "pvc-after", 1<<20, datapath.AccessRWO); err != nil {
		t.Fatalf("a create after the refusal (the group must not wait for the server it refused): %v", err)
	}
}
