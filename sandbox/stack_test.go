package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/engine-node/fusedisk"
	"github.com/vigil-storage/vigil/internal/testenv"
	"github.com/vigil-storage/vigil/sandbox/heartbeat"
	"github.com/vigil-storage/vigil/settings"
)

func TestStackConfig_WithDefaults_Bad(t *testing.T) {
	if _, err := (StackConfig{}).withDefaults(t.TempDir()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("empty VigilBinDir: err %v, want ErrInvalidConfig", err)
	}
	if _, err := (StackConfig{VigilBinDir: t.TempDir(), DatapathPort: 70000}).withDefaults(t.TempDir()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("port 70000: err %v, want ErrInvalidConfig", err)
	}
	if _, err := (StackConfig{VigilBinDir: t.TempDir()}).withDefaults(t.TempDir()); !errors.Is(err, ErrBinariesMissing) {
		t.Errorf("empty bin dirs: err %v, want ErrBinariesMissing", err)
	}
}

func TestNodeCSIEndpoint_UnderNodeDir(t *testing.T) {
	if got, want := NodeCSIEndpoint("/w/nodes/node-1"), "unix:///w/nodes/node-1/engine/csi.sock"; got != want {
		t.Errorf("NodeCSIEndpoint = %q, want %q", got, want)
	}
}

func TestUnescapeMountPath_Octal(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/bad\09`: `/bad\09`} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// A process killed by a power cut leaves its mounts in the host's namespace;
// cleanupMounts removes the nested ones under the work dir, deepest first.
func TestCleanupMounts_Nested(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	dir := t.TempDir()
	outer, inner := filepath.Join(dir, "a b"), filepath.Join(dir, "a b", "inner")
	if err := os.MkdirAll(outer, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", outer, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(inner, syscall.MNT_DETACH); _ = syscall.Unmount(outer, syscall.MNT_DETACH) })
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(outer, inner, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if mps, _ := mountsUnder(dir); len(mps) != 2 || mps[0].path != inner {
		t.Fatalf("mountsUnder = %+v, want %s then %s", mps, inner, outer)
	}
	if err := cleanupMounts(dir); err != nil {
		t.Fatal(err)
	}
	if mps, _ := mountsUnder(dir); len(mps) != 0 {
		t.Errorf("after cleanupMounts: %+v still mounted", mps)
	}
}

func TestStackConfig_WithDefaults_Auth(t *testing.T) {
	bin := t.TempDir()
	for _, b := range []string{BinVigilManager, BinVigilDatapath, BinVigilEngineNode, BinVigilSandbox, BinCSIProvisioner, BinCSIAttacher} {
		if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c, err := (StackConfig{VigilBinDir: bin}).withDefaults(bin)
	if err != nil || c.Auth != StackAuthTokenReview {
		t.Fatalf("default Auth = %q, %v; want %q", c.Auth, err, StackAuthTokenReview)
	}
	if _, err := (StackConfig{VigilBinDir: bin, Auth: "shared"}).withDefaults(bin); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("Auth shared: err %v, want ErrInvalidConfig", err)
	}
	for _, bad := range []StackConfig{{TokenReviewOutageGrace: -time.Second}, {Auth: StackAuthStatic, TokenReviewOutageGrace: 20 * time.Second}} {
		bad.VigilBinDir = bin
		if _, err := bad.withDefaults(bin); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "TokenReviewOutageGrace") {
			t.Errorf("Auth %q TokenReviewOutageGrace %s: err %v, want ErrInvalidConfig naming the field", bad.Auth, bad.TokenReviewOutageGrace, err)
		}
	}
	if c, err := (StackConfig{VigilBinDir: bin, TokenReviewOutageGrace: 20 * time.Second}).withDefaults(bin); err != nil || c.TokenReviewOutageGrace != 20*time.Second {
		t.Errorf("TokenReviewOutageGrace 20s with TokenReview: %+v, %v; want it kept", c, err)
	}
}

func TestNodeTokenFile_UnderNodeDir(t *testing.T) {
	if got, want := NodeTokenFile("/w/nodes/node-1"), "/w/nodes/node-1/datapath.token"; got != want {
		t.Errorf("NodeTokenFile = %q, want %q", got, want)
	}
}

// TestWriteStaticTokens_OneTokenPerIdentity: the static mode's tokens file
// gives the manager and the CSI controller the controller role and each node's
// file that node's engine, every token different, every file private.
func TestWriteStaticTokens_OneTokenPerIdentity(t *testing.T) {
	work := t.TempDir()
	stk := &Stack{Dir: filepath.Join(work, "stack"), TokenFile: filepath.Join(work, "stack", "manager.token"),
		CSITokenFile: filepath.Join(work, "stack", "csi-controller.token")}
	st := &state{Nodes: []*nodeState{{Name: "node-1"}, {Name: "node-2"}}}
	tokensFile, err := writeStaticTokens(stk, st, work)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := datapath.ReadTokensFile(tokensFile)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for file, want := range map[string]datapath.Identity{
		stk.TokenFile:                        {Role: datapath.RoleController},
		stk.CSITokenFile:                     {Role: datapath.RoleController},
		NodeTokenFile(st.Nodes[0].dir(work)): {Role: datapath.RoleEngine, Node: "node-1"},
		NodeTokenFile(st.Nodes[1].dir(work)): {Role: datapath.RoleEngine, Node: "node-2"},
	} {
		fi, err := os.Stat(file)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want a file only its owner reads", file, err, fi)
		}
		tok, err := datapath.ReadTokenFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if seen[tok] {
			t.Fatalf("%s holds a token another identity has", file)
		}
		seen[tok] = true
		id, err := auth.Authenticate(context.Background(), tok)
		if err != nil || id.Role != want.Role || id.Node != want.Node {
			t.Errorf("%s: %+v, %v; want %+v", file, id, err, want)
		}
	}
}

// TestWriteStaticTokens_RackTokens: on a scale sandbox each rack's
// RackTokensFile holds exactly its nodes' tokens, each one that node's engine
// identity at the datapath, and no rack gets a single node's token file.
func TestWriteStaticTokens_RackTokens(t *testing.T) {
	work := t.TempDir()
	stk := &Stack{Dir: filepath.Join(work, "stack"), TokenFile: filepath.Join(work, "stack", "manager.token"),
		CSITokenFile: filepath.Join(work, "stack", "csi-controller.token")}
	st := &state{Nodes: []*nodeState{{Name: "rack-1", Members: []string{"rack-1-node-1", "rack-1-node-2"}},
		{Name: "rack-2", Members: []string{"rack-2-node-1"}}}}
	tokensFile, err := writeStaticTokens(stk, st, work)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := datapath.ReadTokensFile(tokensFile)
	if err != nil {
		t.Fatal(err)
	}
	if ctrl, nodes := auth.Counts(); ctrl != 2 || nodes != 3 {
		t.Errorf("tokens file: %d controller and %d node tokens, want 2 and 3", ctrl, nodes)
	}
	for _, rack := range st.Nodes {
		file := RackTokensFile(rack.dir(work))
		if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want a file only its owner reads", file, err, fi)
		}
		tokens, err := heartbeat.ReadNodeTokens(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(tokens) != len(rack.Members) {
			t.Errorf("%s: %d tokens, want one per node of %s (%d)", file, len(tokens), rack.Name, len(rack.Members))
		}
		for _, node := range rack.Members {
			id, err := auth.Authenticate(context.Background(), tokens[node])
			if err != nil || id.Role != datapath.RoleEngine || id.Node != node {
				t.Errorf("%s's token in %s: %+v, %v; want the engine of %s", node, file, id, err, node)
			}
		}
		if _, err := os.Stat(NodeTokenFile(rack.dir(work))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("rack %s has a single node's token file (%v)", rack.Name, err)
		}
	}
}

// stuckBackend never answers a read until released: a FUSE server that can no
// longer serve (its process is dying).
type stuckBackend struct{ release chan struct{} }

func (b stuckBackend) ReadAt(ctx context.Context, off int64, n int) ([]byte, error) {
	<-b.release
	return nil, syscall.EIO
}
func (b stuckBackend) WriteAt(context.Context, int64, []byte) error { return nil }
func (b stuckBackend) Flush(context.Context) error                  { return nil }

// A reader stuck on a FUSE disk under the work dir whose server no longer
// answers is freed by abortFUSEUnder: its read fails instead of waiting forever.
func TestAbortFUSEUnder_FreesAStuckReader(t *testing.T) {
	testenv.RequireRoot(t, "mount(2)")
	testenv.RequireNoError(t, "FUSE", fusedisk.Usable())
	dir := t.TempDir()
	mnt := filepath.Join(dir, "node-1", "disk")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	b := stuckBackend{release: make(chan struct{})}
	d, err := fusedisk.Mount(mnt, 1<<20, b, fusedisk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(b.release); _ = cleanupMounts(dir); _ = d.Unmount() })
	done := make(chan error, 1)
	go func() {
		f, err := os.Open(d.Path())
		if err == nil {
			_, err = f.ReadAt(make([]byte, 4096), 0)
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the read returned before the abort: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	abortFUSEUnder(dir)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the read succeeded on an aborted connection")
		}
		t.Logf("read after the abort: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the read still waits 30 s after the abort")
	}
}

// TestWriteStackSettings_OneReplicaPerServerUpToThree: the stack's CSI
// controller gets default-replica-count of one per server, at most 3 (the
// host's one server: 1; three servers on nodes: 3, as deploy/), in a file
// the settings accept.
func TestWriteStackSettings_OneReplicaPerServerUpToThree(t *testing.T) {
	for servers, want := range map[int]string{0: "1", 1: "1", 2: "2", 3: "3", 5: "3"} {
		stk := &Stack{Dir: t.TempDir(), DatapathServers: make([]StackServer, servers)}
		dir, err := writeStackSettings(stk)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, settings.NameDefaultReplicaCount))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("%d servers: default-replica-count %q, want %s", servers, got, want)
		}
		if _, err := settings.ParseValue(settings.NameDefaultReplicaCount, strings.TrimSpace(string(b))); err != nil {
			t.Errorf("%d servers: %v", servers, err)
		}
	}
}
