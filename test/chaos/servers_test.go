package chaos

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

var serversEnv = func() Env {
	e := testEnv
	e.Loop, e.Servers = true, []string{"node-1", "node-2", "node-3"}
	return e
}()

// A run with servers on nodes draws the server kinds only, a run with the
// host server never draws them, and a list may not mix the two.
func TestParseKinds_Servers(t *testing.T) {
	for _, s := range []string{"", "auto", "all"} {
		got, err := ParseKinds(s, true, GroupServers)
		if err != nil || !slices.Equal(got, ServerKinds) {
			t.Errorf("ParseKinds(%q, servers 3) = %v, %v; want %v", s, got, err, ServerKinds)
		}
		host, _ := ParseKinds(s, true, 0)
		for _, k := range ServerKinds {
			if slices.Contains(host, k) {
				t.Errorf("ParseKinds(%q, host server) draws %s", s, k)
			}
		}
	}
	without, _ := ParseKinds("auto", false, GroupServers)
	if !slices.Equal(without, []Kind{DatapathServerPartition, DatapathRollingRestart}) {
		t.Errorf("auto without the loop, servers 3 = %v; want the two kinds that need no failover", without)
	}
	for _, c := range []struct {
		list    string
		servers int
		want    string
	}{
		{"datapath-leader-power-cut", 0, "needs the datapath as a group of servers on nodes (CHAOS_DATAPATH_SERVERS=3)"},
		{"datapath-rolling-restart,power-cut", GroupServers, `"power-cut" runs with the one datapath server on the host`},
		{"datapath-restart", GroupServers, `"datapath-restart" runs with the one datapath server on the host`},
	} {
		_, err := ParseKinds(c.list, true, c.servers)
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "datapath-server-partition") {
			t.Errorf("ParseKinds(%q, servers %d) = %v; want ErrBadConfig saying %q and listing the kinds", c.list, c.servers, err, c.want)
		}
	}
}

func TestConfigFromEnv_Servers(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want int
	}{
		{map[string]string{}, 0},
		{map[string]string{EnvFaults: "auto"}, 0},
		{map[string]string{EnvDatapathServers: "3"}, 3},
		{map[string]string{EnvDatapathServers: " 0 "}, 0},
		// The new kinds alone imply the group.
		{map[string]string{EnvFaults: "datapath-leader-power-cut"}, 3},
		{map[string]string{EnvFaults: "datapath-rolling-restart, datapath-server-partition"}, 3},
		{map[string]string{EnvFaults: "engine-kill"}, 0},
	} {
		cfg, err := ConfigFromEnv(func(k string) string { return c.env[k] })
		if err != nil || cfg.Servers != c.want {
			t.Errorf("ConfigFromEnv(%v) = servers %d, %v; want %d", c.env, cfg.Servers, err, c.want)
		}
		if err == nil && (cfg.Servers > 0) != strings.HasSuffix(cfg.ReportDir, "/servers") {
			t.Errorf("ConfigFromEnv(%v): report in %s; want servers/ exactly for a run with servers", c.env, cfg.ReportDir)
		}
	}
	for _, env := range []map[string]string{
		{EnvDatapathServers: "5"}, {EnvDatapathServers: "three"}, {EnvDatapathServers: "-1"},
		{EnvDatapathServers: "0", EnvFaults: "datapath-rolling-restart"},
		{EnvFaults: "datapath-rolling-restart,engine-kill"},
	} {
		_, err := ConfigFromEnv(func(k string) string { return env[k] })
		if !errors.Is(err, ErrBadConfig) {
			t.Errorf("ConfigFromEnv(%v) = %v, want ErrBadConfig", env, err)
			continue
		}
		if v := env[EnvDatapathServers]; v != "" && env[EnvFaults] == "" &&
			(!strings.Contains(err.Error(), EnvDatapathServers) || !strings.Contains(err.Error(), "want 0") || !strings.Contains(err.Error(), v)) {
			t.Errorf("ConfigFromEnv(%v) = %q; want the variable, its value and what is allowed", env, err)
		}
	}
}

// Every server kind comes up and follows its rules; the draws are the seed's.
func TestDraw_ServerKinds(t *testing.T) {
	seen, roles := map[Kind]bool{}, map[string]bool{}
	firsts := map[string]bool{}
	for i := range 600 {
		f, err := Draw(i, CycleSeed(11, i), ServerKinds, serversEnv)
		if err != nil {
			t.Fatal(err)
		}
		if g, _ := Draw(i, CycleSeed(11, i), ServerKinds, serversEnv); g != f {
			t.Fatalf("seed drew %+v and %+v", f, g)
		}
		seen[f.Kind] = true
		switch f.Kind {
		case DatapathLeaderPowerCut:
			if f.Expect != ServerLoss || f.Node != "" || f.Down < 2*time.Second || f.Down > 10*time.Second {
				t.Errorf("%s: want the leader's node (found when it runs) off 2 to 10 s, expect server-loss", f)
			}
		case DatapathServerPartition:
			if f.Expect != NoFailover || f.Cut < 4*time.Second || f.Cut > 12*time.Second || (f.Role != RoleLeader && f.Role != RoleFollower) {
				t.Errorf("%s: want the leader or a follower cut off 4 to 12 s, expect no failover", f)
			}
			roles[f.Role] = true
		case DatapathRollingRestart:
			if f.Expect != NoFailover || !slices.Contains(serversEnv.Servers, f.Node) {
				t.Errorf("%s: want a server to start with, expect no failover", f)
			}
			firsts[f.Node] = true
		default:
			t.Errorf("%s: not a server kind", f)
		}
	}
	if len(seen) != 3 || len(roles) != 2 || len(firsts) != 3 {
		t.Errorf("600 draws: kinds %v, roles %v, first servers %v; want every one", seen, roles, firsts)
	}
	if _, err := Draw(1, 1, ServerKinds, testEnv); !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "CHAOS_DATAPATH_SERVERS=3") {
		t.Errorf("a server kind without servers: %v; want ErrBadConfig naming CHAOS_DATAPATH_SERVERS=3", err)
	}
}

// The server kinds left the host kinds' draws as they were: the same seeds
// draw the same faults with or without servers in the env.
func TestDraw_HostKindsUnchangedByServers(t *testing.T) {
	with := testEnv
	with.Servers = serversEnv.Servers
	for i := range 300 {
		a, _ := Draw(i, CycleSeed(5, i), HostKinds, testEnv)
		b, _ := Draw(i, CycleSeed(5, i), HostKinds, with)
		if a != b {
			t.Fatalf("seed %d: %+v without servers, %+v with", CycleSeed(5, i), a, b)
		}
	}
}

func TestFault_String_ServerKinds(t *testing.T) {
	for _, c := range []struct {
		f    Fault
		want string
	}{
		{Fault{Cycle: 1, Seed: 2, Kind: DatapathLeaderPowerCut, Down: 3 * time.Second, Expect: ServerLoss},
			"cycle 1 seed 2: datapath-leader-power-cut of the leader's node, down 3s, expect server-loss"},
		{Fault{Cycle: 2, Seed: 3, Kind: DatapathServerPartition, Role: RoleFollower, Cut: 5 * time.Second, Expect: NoFailover},
			"cycle 2 seed 3: datapath-server-partition of the follower's server from the other two for 5s, expect no-failover"},
		{Fault{Cycle: 3, Seed: 4, Kind: DatapathRollingRestart, Node: "node-2", Expect: NoFailover},
			"cycle 3 seed 4: datapath-rolling-restart starting with node-2, expect no-failover"},
	} {
		if got := c.f.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}
