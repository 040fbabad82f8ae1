package manager

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
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
	"github.com/vigil-storage/vigil/datapath/devcerts"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// serveChildEnv makes TestDatapathServe_Child run the command for real; the
// parent test starts the test binary again with it set.
const serveChildEnv = "VIGIL_TEST_DATAPATH_SERVE_ARGS"

func TestDatapathServe_Child(t *testing.T) {
	args := os.Getenv(serveChildEnv)
	if args == "" {
		t.Skip("only runs as the child of TestDatapathServe_SIGTERMFlushesAndExits")
	}
	if err := DatapathApp().Run(append([]string{DatapathBinary}, strings.Split(args, "\x1f")...)); err != nil {
		t.Fatal(err)
	}
}

// serveTokens is a tokens file for the serve tests: the controller and the
// engines of node-1, node-2 and node-3.
const serveTokens = `# a comment, then a blank line

controller controller-token-0123
node node-1 node-1-token-0123456
node node-2 node-2-token-0123456
node node-3 node-3-token-0123456
`

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// startServe runs `datapath serve` with args in a child process and returns
// its address and its output lines.
func startServe(t *testing.T, args ...string) (*exec.Cmd, string, *bufio.Scanner) {
	t.Helper()
	cmd, out := serveChild(t, args)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if addr, ok := listeningAt(lines.Text()); ok {
			return cmd, addr, lines
		}
	}
	t.Fatal("the server never said where it listens")
	return nil, "", nil
}

// serveChild starts `datapath serve` with args (after --listen
// 127.0.0.1:0, which a --listen of args overrides) in a child process of
// this test binary, and returns it and its standard output.
func serveChild(t *testing.T, args []string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDatapathServe_Child$", "-test.v")
	cmd.Env = append(os.Environ(), serveChildEnv+"="+strings.Join(append([]string{"serve", "--listen", "127.0.0.1:0"}, args...), "\x1f"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

// listeningAt is the address in the server's "listening on" line.
func listeningAt(line string) (string, bool) {
	a, ok := strings.CutPrefix(line, "datapath: listening on ")
	if !ok {
		return "", false
	}
	return strings.TrimSuffix(strings.Fields(a)[0], ","), true
}

// TestDatapathServe_SIGTERMFlushesAndExits runs the server with TLS and a
// tokens file: each caller with its own token over TLS, `datapath status`
// verifying the server with the CA, then SIGTERM flushes and exits.
func TestDatapathServe_SIGTERMFlushesAndExits(t *testing.T) {
	dir := t.TempDir()
	tokenFile := writeFile(t, "tokens", serveTokens)
	certs, err := devcerts.WriteServerFiles(t.TempDir(), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	cmd, addr, lines := startServe(t, "--data-dir", data, "--token-file", tokenFile, "--capacity", "1073741824",
		"--tls-cert-file", certs.Cert, "--tls-private-key-file", certs.Key)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(token string) *client.Client {
		c, err := client.Dial(ctx, addr, token, client.WithCAFile(certs.CA))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c, node1, node2, node3 := dial("controller-token-0123"), dial("node-1-token-0123456"), dial("node-2-token-0123456"), dial("node-3-token-0123456")
	v, err := c.CreateVolume(ctx, "pvc-1", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Grant(ctx, v.ID, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := node1.WriteAt(ctx, v.ID, "node-1", e, 4096, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := node2.WriteAt(ctx, v.ID, "node-1", e, 0, []byte("not mine")); !errors.Is(err, datapath.ErrPermissionDenied) {
		t.Fatalf("node-2 writes as node-1: %v; want ErrPermissionDenied", err)
	}
	if err := node2.Heartbeat(ctx, "node-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := node3.Leave(ctx, "node-3", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := node3.Fence(ctx, v.ID, "node-1"); !errors.Is(err, datapath.ErrPermissionDenied) {
		t.Fatalf("node-3 fences: %v; want ErrPermissionDenied", err)
	}
	var refused strings.Builder
	app := DatapathApp()
	app.Writer = &refused
	if err := app.Run([]string{DatapathBinary, "status", "--addr", addr, "--token-file", writeFile(t, "t", "controller-token-0123"),
		"--timeout", "3s"}); err == nil {
		t.Fatalf("datapath status in plaintext to a TLS server succeeded:\n%s", refused.String())
	}
	ctlToken := writeFile(t, "ctl", "controller-token-0123\n")
	var status strings.Builder
	app = DatapathApp()
	app.Writer = &status
	if err := app.Run([]string{DatapathBinary, "status", "--addr", addr, "--token-file", ctlToken, "--ca-file", certs.CA}); err != nil {
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
	serverTable := regexp.MustCompile(`(?m)^SERVER +NODE +ADDRESS +ROLE +LAST CONTACT +APPLIED INDEX\n` +
		`datapath-0 +- +` + regexp.QuoteMeta(addr) + ` +leader +- +[1-9][0-9]*\n` +
		`1 servers in the control group`)
	if !serverTable.MatchString(status.String()) {
		t.Fatalf("datapath status output lacks the control group (one server, leading):\n%s", status.String())
	}
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
	store, closeStore := reopenServed(t, data)
	defer closeStore()
	p, err := store.ReadAt(v.ID, "node-1", e, 4096, 4)
	if err != nil || string(p) != "kept" {
		t.Fatalf("after shutdown read %q, %v", p, err)
	}
}

func TestDatapathServe_BadFlags(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, "tokens", serveTokens)
	bare := writeFile(t, "bare", "s3cret-shared-token-of-old\n")
	certs, err := devcerts.WriteServerFiles(t.TempDir(), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// A kubeconfig that loads; nothing here calls the API server.
	kubeconfig := writeFile(t, "kubeconfig", `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	serve := func(args ...string) []string {
		return append([]string{"serve", "--data-dir", dir}, args...)
	}
	sa := func(args ...string) []string {
		return serve(append([]string{"--engine-service-account", "vigil-system:vigil-engine-node", "--kubeconfig", kubeconfig}, args...)...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no credentials", serve(), "--token-file"},
		{"empty tokens file", serve("--token-file", writeFile(t, "empty", "\n# nothing\n")), "holds no token"},
		{"missing tokens file", serve("--token-file", filepath.Join(dir, "nope")), "no such file"},
		{"a bare shared token", serve("--token-file", bare), "line 1: a bare token"},
		{"unknown kind", serve("--token-file", writeFile(t, "k", "controller controller-token-0123\nadmin admin-token-012345678\n")), `line 2: unknown kind "admin"`},
		{"short token", serve("--token-file", writeFile(t, "s", "node node-1 short\n")), "line 1: the token is 5 bytes; at least 16"},
		{"bad node name", serve("--token-file", writeFile(t, "n", "node node/1\tx node-1-token-0123456\n")), "line 1"},
		{"one token twice", serve("--token-file", writeFile(t, "d", "controller same-token-0123456789\nnode node-1 same-token-0123456789\n")), "line 2: the token of line 1 again"},
		{"too many fields", serve("--token-file", writeFile(t, "f", "controller a-token-0123456789 extra\n")), "line 1: 2 fields after \"controller\""},
		{"negative capacity", serve("--token-file", good, "--capacity", "-1"), "capacity -1"},
		{"over-provisioning below 100", serve("--token-file", good, "--over-provisioning-percentage", "50"), "over-provisioning percentage 50: want 100"},
		{"over-provisioning above 1000", serve("--token-file", good, "--over-provisioning-percentage", "1001"), "to 1000"},
		{"bad listen address", serve("--token-file", good, "--listen", "nowhere"), `--listen "nowhere"`},
		{"missing boot id file", serve("--token-file", good, "--boot-id-file", filepath.Join(dir, "nope")), "--boot-id-file: datapath: invalid argument: boot id: open"},
		{"bad boot id", serve("--token-file", good, "--boot-id-file", writeFile(t, "boot", "not a boot id\n")), "want letters, digits, '-' and '_' only"},
		{"plaintext off loopback", serve("--token-file", good, "--listen", "0.0.0.0:9600"), "--insecure"},
		{"certificate without key", serve("--token-file", good, "--tls-cert-file", certs.Cert), "--tls-private-key-file"},
		{"TLS and insecure", serve("--token-file", good, "--tls-cert-file", certs.Cert, "--tls-private-key-file", certs.Key, "--insecure"), "contradicts"},
		{"certificate that is not one", serve("--token-file", good, "--tls-cert-file", good, "--tls-private-key-file", certs.Key), "--tls-cert-file"},
		{"key of another certificate", serve("--token-file", good, "--tls-cert-file", certs.Cert, "--tls-private-key-file", writeKey(t)), "private key does not match"},
		{"service account without a namespace", sa("--controller-service-accounts", "vigil-manager"), "want NAMESPACE:NAME"},
		{"service account with two separators", sa("--controller-service-accounts", "vigil-system:a:b"), "want NAMESPACE:NAME"},
		{"service account with a bad name", sa("--controller-service-accounts", "vigil-system:Vigil_Manager"), `name "Vigil_Manager"`},
		{"service account in both roles", sa("--controller-service-accounts", "vigil-system/vigil-engine-node"), "both the controller and the engine role"},
		{"cache TTL zero", sa("--token-review-cache-ttl", "0s"), "--token-review-cache-ttl 0s"},
		{"cache TTL too long", sa("--token-review-cache-ttl", "1h"), "want 1s to 10m0s"},
		{"negative outage grace", sa("--token-review-outage-grace", "-1s"), "--token-review-outage-grace -1s"},
		{"empty audience", sa("--token-review-audience", ""), "--token-review-audience is empty"},
		{"zero review rate", sa("--token-review-qps", "0"), "--token-review-qps 0 and --token-review-burst 100: both must be positive"},
		{"negative review burst", sa("--token-review-burst", "-1"), "--token-review-burst -1: both must be positive"},
		{"review rate without service accounts", serve("--token-file", good, "--token-review-qps", "10"), "--token-review-qps is a TokenReview setting"},
		{"kubeconfig without service accounts", serve("--token-file", good, "--kubeconfig", kubeconfig), "no ServiceAccount has a role"},
		{"audience without service accounts", serve("--token-file", good, "--token-review-audience", "x"), "--token-review-audience is a TokenReview setting"},
		{"bad server id", serve("--token-file", good, "--server-id", "data path"), `--server-id "data path"`},
		{"node name with white space", serve("--token-file", good, "--node-name", "node 1"), `--node-name: datapath: invalid argument: node "node 1" contains white space`},
		{"node name too long", serve("--token-file", good, "--node-name", strings.Repeat("n", 254)), "--node-name: datapath: invalid argument: node"},
		{"peers without a raft address", serve("--token-file", good, "--raft-peers", "datapath-0=127.0.0.1:9601"), "--raft-peers needs --raft-listen"},
		{"raft address without a port", serve("--token-file", good, "--raft-listen", "127.0.0.1"), `--raft-listen "127.0.0.1": want HOST:PORT`},
		{"raft address on port 0", serve("--token-file", good, "--raft-listen", "127.0.0.1:0"), "with a fixed port"},
		{"raft off loopback", serve("--token-file", good, "--raft-listen", "0.0.0.0:9601"), "is off loopback: give --raft-ca-file"},
		{"advertise without a raft address", serve("--token-file", good, "--raft-advertise", "dp-0.peers:9601"), "--raft-advertise needs --raft-listen"},
		{"advertise without a port", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-advertise", "dp-0.peers"), `--raft-advertise "dp-0.peers": want HOST:PORT`},
		{"advertise on port 0", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-advertise", "dp-0.peers:0"), "a fixed port"},
		{"advertise 0.0.0.0", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-advertise", "0.0.0.0:9601"), "not 0.0.0.0"},
		{"raft CA without a raft address", serve("--token-file", good, "--raft-ca-file", certs.CA), "--raft-ca-file needs --raft-listen"},
		{"raft CA without a certificate", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-ca-file", certs.CA), "--raft-ca-file needs --tls-cert-file"},
		{"raft CA and raft in the clear", serve("--token-file", good, "--tls-cert-file", certs.Cert, "--tls-private-key-file", certs.Key,
			"--raft-listen", "127.0.0.1:9601", "--raft-ca-file", certs.CA, "--raft-insecure"), "contradicts --raft-insecure"},
		{"raft CA that is no CA", serve("--token-file", good, "--tls-cert-file", certs.Cert, "--tls-private-key-file", certs.Key,
			"--raft-listen", "127.0.0.1:9601", "--raft-ca-file", good), "holds no PEM certificate"},
		{"clients' advertised address without a port", serve("--token-file", good, "--advertise-address", "dp-0.peers"), `--advertise-address "dp-0.peers": want HOST:PORT`},
		{"clients' advertised address 0.0.0.0", serve("--token-file", good, "--advertise-address", "0.0.0.0:9600"), "not 0.0.0.0"},
		{"peers naming this server at its listen address, not the advertised one", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601",
			"--raft-advertise", "dp-0.peers:9601", "--raft-peers", "datapath-0=127.0.0.1:9601,b=127.0.0.1:9602"),
			"lists this server (datapath-0) at 127.0.0.1:9601, but --raft-advertise is dp-0.peers:9601"},
		// --raft-insecure passes the loopback check: the peers check after it speaks.
		{"raft off loopback with --raft-insecure", serve("--token-file", good, "--raft-listen", "0.0.0.0:9601", "--raft-insecure",
			"--raft-peers", "a=10.0.0.1:9601,b=10.0.0.2:9601"), "does not list this server"},
		{"malformed peers", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-peers", "datapath-0"), "want ID=HOST:PORT"},
		{"peer listed twice", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-peers", "datapath-0=127.0.0.1:9601,datapath-0=127.0.0.1:9602"), "listed twice"},
		{"peer's datapath address without a port", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-peers",
			"datapath-0=127.0.0.1:9601@127.0.0.1:9600,b=127.0.0.1:9602@dp-b"), `peer 2 "b=127.0.0.1:9602@dp-b": datapath: invalid argument: datapath address of server b "dp-b"`},
		{"nothing after @", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-peers", "datapath-0=127.0.0.1:9601@"), "nothing after @"},
		{"this server serving clients elsewhere", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--advertise-address", "dp-0.example:9600",
			"--raft-peers", "datapath-0=127.0.0.1:9601@dp-9.example:9600"), "lists this server (datapath-0) serving clients at dp-9.example:9600, but --advertise-address is dp-0.example:9600"},
		{"join without a raft address", serve("--token-file", good, "--raft-join"), "--raft-join needs --raft-listen"},
		{"join and peers", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-join", "--raft-peers", "datapath-0=127.0.0.1:9601"),
			"contradicts --raft-peers (a joining server bootstraps no group)"},
		{"peers without this server", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-peers", "a=127.0.0.1:9602,b=127.0.0.1:9603"), "does not list this server (--server-id datapath-0)"},
		{"this server at another address", serve("--token-file", good, "--raft-listen", "127.0.0.1:9601", "--raft-peers", "datapath-0=127.0.0.1:9609"), "lists this server (datapath-0) at 127.0.0.1:9609, but --raft-listen is 127.0.0.1:9601"},
		{"bad metrics address", serve("--token-file", good, "--metrics-address", "nowhere"), `--metrics-address "nowhere"`},
		{"missing kubeconfig", serve("--engine-service-account", "vigil-system:vigil-engine-node", "--kubeconfig", filepath.Join(dir, "nope")), "--kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := DatapathApp().Run(append([]string{DatapathBinary}, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("refused flags created files in the data directory: %v", entries)
	}
}

func TestDatapathStatus_BadFlags(t *testing.T) {
	tok := writeFile(t, "ctl", "controller-token-0123\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"plaintext off loopback", []string{"--addr", "10.1.2.3:9600", "--token-file", tok}, "--ca-file"},
		{"missing CA file", []string{"--token-file", tok, "--ca-file", "/nonexistent/ca.crt"}, "/nonexistent/ca.crt"},
		{"bad output format", []string{"-o", "yaml", "--token-file", tok}, `invalid output format "yaml" for -o; allowed: table, json`},
		{"empty server in the list", []string{"--addr", "127.0.0.1:9600,", "--token-file", tok}, "--addr: datapath servers \"127.0.0.1:9600,\": item 2: empty"},
		{"CA and insecure", []string{"--token-file", tok, "--ca-file", tok, "--insecure"}, "contradict"},
		{"empty token file", []string{"--token-file", writeFile(t, "empty", "\n")}, "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := DatapathApp().Run(append([]string{DatapathBinary, "status", "--timeout", "2s"}, tc.args...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// writeKey writes a private key of a certificate other than the test's.
func writeKey(t *testing.T) string {
	t.Helper()
	other, err := devcerts.WriteServerFiles(t.TempDir(), []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return other.Key
}

// reopenServed opens the data directory a lone `serve` left, with its
// one-member control group as serve starts it.
func reopenServed(t *testing.T, data string) (*datapath.Store, func()) {
	t.Helper()
	rf := raftFlags{self: raftstate.Server{ID: defaultServerID, RaftAddress: raftstate.InProcessAddress}, dir: filepath.Join(data, "raft")}
	g, err := startControl(context.Background(), rf, "", nil)
	if err != nil {
		t.Fatalf("reopen the control group after shutdown: %v", err)
	}
	store, err := datapath.Open(data, datapath.Options{Control: g})
	if err != nil {
		_ = g.Close()
		t.Fatalf("reopen after shutdown: %v", err)
	}
	return store, func() { _ = store.Close(); _ = g.Close() }
}

// TestDatapathServe_UpgradesADirectoryOfTheBboltRelease: `serve` on a data
// directory written by the release that kept the control state in
// datapath.db (datapath/testdata/release-bbolt) serves it as a one-member
// group: the same volumes, epochs and data; the next fence moves the epoch
// on by one; after SIGTERM the directory reopens from the group alone.
func TestDatapathServe_UpgradesADirectoryOfTheBboltRelease(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if out, err := exec.Command("cp", "-r", filepath.Join("..", "datapath", "testdata", "release-bbolt"), data).CombinedOutput(); err != nil {
		t.Fatalf("copy the fixture: %v\n%s", err, out)
	}
	tokens := writeFile(t, "tokens", serveTokens)
	cmd, addr, lines := startServe(t, "--data-dir", data, "--token-file", tokens, "--over-provisioning-percentage", "1000", "--metrics-address", "127.0.0.1:0")
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "datapath: metrics on http://") {
		t.Fatalf("no metrics address after the listening line: %q", lines.Text())
	}
	metricsURL := strings.TrimPrefix(lines.Text(), "datapath: metrics on ")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, "controller-token-0123")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	node2, err := client.Dial(ctx, addr, "node-2-token-0123456")
	if err != nil {
		t.Fatal(err)
	}
	defer node2.Close()
	vols, err := c.ListVolumes(ctx)
	if err != nil || len(vols) != 5 {
		t.Fatalf("volumes served from the old directory: %+v, %v; want the fixture's 5", vols, err)
	}
	const pvcA = "vol-30f36322caca48de"
	as, err := c.Attachments(ctx, pvcA)
	if err != nil || len(as) != 2 || as[0].Node != "node-1" || as[0].Epoch != 2 || as[0].State != datapath.StateFenced ||
		as[1].Node != "node-2" || as[1].Epoch != 3 || as[1].State != datapath.StateGranted {
		t.Fatalf("pvc-a's table: %+v, %v; want node-1 fenced at 2, node-2 granted at 3", as, err)
	}
	if p, err := node2.ReadAt(ctx, pvcA, "node-2", 3, 4096, 28); err != nil || string(p) != "written by node-2 at epoch 3" {
		t.Fatalf("node-2 reads pvc-a at epoch 3: %q, %v", p, err)
	}
	if e, err := c.Fence(ctx, pvcA, "node-2"); err != nil || e != 4 {
		t.Fatalf("fence node-2: epoch %d, %v; want 4", e, err)
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`vigil_datapath_servers{state="leader"} 1`, `vigil_datapath_servers{state="unreachable"} 0`,
		"vigil_datapath_leader_changes_total 1", "vigil_datapath_commit_duration_seconds_count "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("server exit after SIGTERM: %v", err)
	}
	store, closeStore := reopenServed(t, data)
	defer closeStore()
	if e, err := store.Epoch(pvcA); err != nil || e != 4 {
		t.Fatalf("pvc-a's epoch after the restart: %d, %v; want 4", e, err)
	}
}
