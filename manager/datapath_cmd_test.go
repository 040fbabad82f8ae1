package manager

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
)

// serveChildEnv makes TestDatapathServe_Child run the command for real; the
// parent test starts the test binary again with it set.
const serveChildEnv = "VIGIL_TEST_DATAPATH_SERVE_ARGS"

func TestDatapathServe_Child(t *testing.T) {
	args := os.Getenv(serveChildEnv)
	if args == "" {
		t.Skip("only runs as the child of TestDatapathServe_SIGTERMFlushesAndExits")
	}
	if err := App().Run(append([]string{"vigil-manager"}, strings.Split(args, "\x1f")...)); err != nil {
		t.Fatal(err)
	}
}

func TestDatapathServe_SIGTERMFlushesAndExits(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	args := []string{"datapath", "serve", "--listen", "127.0.0.1:0", "--data-dir", data, "--token-file", tokenFile, "--capacity", "1073741824"}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDatapathServe_Child$", "-test.v")
	cmd.Env = append(os.Environ(), serveChildEnv+"="+strings.Join(args, "\x1f"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	addr := ""
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "datapath: listening on "); ok {
			addr = strings.TrimSuffix(strings.Fields(a)[0], ",")
			break
		}
	}
	if addr == "" {
		t.Fatal("the server never said where it listens")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.CreateVolume(ctx, "pvc-1", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Grant(ctx, v.ID, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteAt(ctx, v.ID, "node-1", e, 4096, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := c.Heartbeat(ctx, "node-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leave(ctx, "node-3", time.Minute); err != nil {
		t.Fatal(err)
	}
	var status strings.Builder
	app := App()
	app.Writer = &status
	if err := app.Run([]string{"vigil-manager", "datapath", "status", "--addr", addr, "--token-file", tokenFile}); err != nil {
		t.Fatalf("datapath status: %v", err)
	}
	if !strings.Contains(status.String(), v.ID) || !strings.Contains(status.String(), "node-1") || !strings.Contains(status.String(), "granted") {
		t.Fatalf("datapath status output lacks the volume or its grant:\n%s", status.String())
	}
	nodeTable := regexp.MustCompile(`(?m)^NODE +LAST HEARTBEAT +LAST I/O +LEAVING +LIVE GRANTS\n` +
		`node-1 +none since start +[0-9.]+m?s ago +- +1\n` +
		`node-2 +[0-9.]+m?s ago +none since start +- +0\n` +
		`node-3 +none since start +none since start +for [0-9.ms]+ +0\n` +
		`3 nodes; the datapath started `)
	if !nodeTable.MatchString(status.String()) {
		t.Fatalf("datapath status output lacks the node table (node-1 with its grant and I/O, node-2 heartbeating, node-3 leaving):\n%s", status.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	for lines.Scan() {
		rest.WriteString(lines.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("server exit after SIGTERM: %v\n%s", err, rest.String())
	}
	if !strings.Contains(rest.String(), "every volume flushed") {
		t.Fatalf("no flush message in:\n%s", rest.String())
	}
	store, err := datapath.Open(data, datapath.Options{})
	if err != nil {
		t.Fatalf("reopen after shutdown: %v", err)
	}
	defer store.Close()
	p, err := store.ReadAt(v.ID, "node-1", e, 4096, 4)
	if err != nil || string(p) != "kept" {
		t.Fatalf("after shutdown read %q, %v", p, err)
	}
}

func TestDatapathServe_BadFlags(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	good := filepath.Join(dir, "token")
	_ = os.WriteFile(good, []byte("tok\n"), 0o600)
	cases := map[string][]string{
		"empty token file":   {"datapath", "serve", "--data-dir", dir, "--token-file", empty},
		"missing token file": {"datapath", "serve", "--data-dir", dir, "--token-file", filepath.Join(dir, "nope")},
		"negative capacity":  {"datapath", "serve", "--data-dir", dir, "--token-file", good, "--capacity", "-1"},
		"bad listen address": {"datapath", "serve", "--data-dir", dir, "--token-file", good, "--listen", "nowhere"},
	}
	want := map[string]string{"empty token file": "is empty", "missing token file": "no such file", "negative capacity": "capacity -1", "bad listen address": "--listen nowhere"}
	for name, args := range cases {
		err := App().Run(append([]string{"vigil-manager"}, args...))
		if err == nil || !strings.Contains(err.Error(), want[name]) {
			t.Errorf("%s: err = %v, want it to mention %q", name, err, want[name])
		}
	}
}
