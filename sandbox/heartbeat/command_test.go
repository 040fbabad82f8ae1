package heartbeat

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// runCommand runs the heartbeat command with args until ctx ends.
func runCommand(ctx context.Context, args ...string) error {
	app := &cli.App{Name: "vigil-sandbox", Commands: []*cli.Command{Command()}}
	return app.RunContext(ctx, append([]string{"vigil-sandbox", "heartbeat"}, args...))
}

func writeTokens(t *testing.T, entries []datapath.TokenEntry) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(datapath.FormatTokens(entries)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// lastHeartbeats is the datapath's last heartbeat of each node.
func lastHeartbeats(t *testing.T, dp *dpclient.Client) map[string]time.Time {
	t.Helper()
	rep, err := dp.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, n := range rep.Nodes {
		out[n.Node] = n.LastHeartbeat
	}
	return out
}

// TestCommand_HeartbeatsEachNodeWithItsToken: against a real datapath over
// TLS, where a node's token may heartbeat only as that node, the command
// keeps every node of its tokens file alive.
func TestCommand_HeartbeatsEachNodeWithItsToken(t *testing.T) {
	s := datapathtest.StartWith(t, datapathtest.Config{TLS: true})
	dp, err := dpclient.Dial(context.Background(), s.Addr, s.Token, dpclient.WithCAFile(s.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	nodes := []string{"rack-1-node-1", "rack-1-node-2", "rack-1-node-3"}
	var entries []datapath.TokenEntry
	for _, n := range nodes {
		entries = append(entries, datapath.TokenEntry{Node: n, Token: s.NodeToken(n)})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runCommand(ctx, "--datapath", s.Addr, "--node-tokens-file", writeTokens(t, entries), "--ca-file", s.CAFile,
			"--interval", "50ms")
	}()
	start := time.Now()
	deadline := start.Add(20 * time.Second)
	for {
		seen := lastHeartbeats(t, dp)
		missing := 0
		for _, n := range nodes {
			if !seen[n].After(start) {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("heartbeat exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s the datapath saw %v, want a heartbeat of each of %v", seen, nodes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("heartbeat after SIGTERM-like cancel = %v, want nil", err)
	}
}

// TestBeat_AnotherNodesTokenRefused: a client with node A's token cannot
// heartbeat as node B (why the command needs every node's own token).
func TestBeat_AnotherNodesTokenRefused(t *testing.T) {
	s := datapathtest.StartWith(t, datapathtest.Config{TLS: true})
	dial := func(tok string) *dpclient.Client {
		c, err := dpclient.Dial(context.Background(), s.Addr, tok, dpclient.WithCAFile(s.CAFile), dpclient.WithRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := dial(s.NodeToken("a"))
	r := Beat(context.Background(), PerNode{"a": a, "b": a}, []string{"a", "b"}, 10*time.Second)
	if r.Sent != 1 || r.Failed != 1 || !errors.Is(r.FirstErr, datapath.ErrPermissionDenied) {
		t.Errorf("Beat with a's token for a and b = %+v; want a sent, b refused with ErrPermissionDenied", r)
	}
	if r := Beat(context.Background(), PerNode{"b": dial(s.Token)}, []string{"b"}, 10*time.Second); r.Failed != 1 {
		t.Errorf("Beat with the controller's token = %+v; want refused", r)
	}
}
