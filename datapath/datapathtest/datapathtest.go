// Package datapathtest starts a real datapath server for tests: a store in a
// temporary directory, served on 127.0.0.1 (plaintext, or TLS with a
// throwaway CA), stopped and flushed by t.Cleanup. Callers prove who they are
// as in production: Token is the controller's, NodeToken(node) the token of
// one node's engine, and the server's real authorization lets each do only
// its own part.
package datapathtest

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/devcerts"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// Server is a running test server.
type Server struct {
	Addr string
	// Token is the controller's token (create, grant, fence, release, reports).
	Token string
	Dir   string
	Store *datapath.Store
	// CA verifies the server's certificate and CAFile holds it (PEM); both
	// are empty without Config.TLS.
	CA     *x509.CertPool
	CAFile string
	auth   *nodeTokens
	// Group is the server's member of its control group (Config.Control,
	// StartGroup); nil otherwise.
	Group *raftstate.Group
	// stop ends the server, its store and its group (once).
	stop func()
	// member is how to start the server again (Restart): set for the
	// servers of StartGroup.
	member *member
}

// Stop stops the server, closes its store and leaves its control group, as
// a killed process would leave them; later calls do nothing.
func (s *Server) Stop() { s.stop() }

// NodeToken is the token of node's engine: I/O, heartbeats and Leave as
// that node only.
func (s *Server) NodeToken(node string) string { return s.auth.token(node) }

// At is the same server reached at addr (through a proxy, say): same
// tokens, same CA.
func (s *Server) At(addr string) *Server {
	c := *s
	c.Addr = addr
	return &c
}

// Config says how StartWith runs the server.
type Config struct {
	// Options of the store (Capacity 0 means 1 TiB here, so tests do not
	// depend on the disk's size).
	Options datapath.Options
	// Dir is the data directory; default a new t.TempDir() (give one to
	// reopen after a stop).
	Dir string
	// TLS serves TLS with a certificate for 127.0.0.1 from a new CA.
	TLS bool
	// Auth replaces the server's authenticator (a TokenReview one, say);
	// Token and NodeToken keep working only if it accepts them.
	Auth datapath.Authenticator
	// BootID, if set, is the boot id the server reports (datapath.WithBootID).
	BootID string
	// Control keeps the store's control state in a one-member Raft group
	// in Dir/raft, Raft in process, as `vigil-datapath serve` runs a lone
	// server (Options.Control is set to it).
	Control bool
}

// ControlServerID is the server id of Config.Control's group.
const ControlServerID = "datapath-0"

// startControl starts the one-member group of Config.Control; it is closed
// after the store.
func startControl(t testing.TB, dir string) *raftstate.Group {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := raftstate.Config{ID: ControlServerID, Dir: filepath.Join(dir, "raft"), Transport: raftstate.InProcessTransport(), LogOutput: io.Discard,
		Timing: raftstate.Timing{HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond}}
	g, err := raftstate.Start(ctx, cfg, raftstate.Server{ID: ControlServerID, RaftAddress: raftstate.InProcessAddress}, nil)
	if err != nil {
		t.Fatalf("start the one-member control group: %v", err)
	}
	return g
}

// Start starts a plaintext server with opts and registers its shutdown with
// t.Cleanup.
func Start(t testing.TB, opts datapath.Options) *Server {
	t.Helper()
	return StartWith(t, Config{Options: opts})
}

// StartIn is Start with a chosen data directory (to reopen after a stop).
func StartIn(t testing.TB, dir string, opts datapath.Options) *Server {
	t.Helper()
	return StartWith(t, Config{Options: opts, Dir: dir})
}

// StartWith starts a server as cfg says.
func StartWith(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Options.Capacity == 0 {
		cfg.Options.Capacity = 1 << 40
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	var group *raftstate.Group
	if cfg.Control {
		group = startControl(t, cfg.Dir)
		cfg.Options.Control = group
	}
	store, err := datapath.Open(cfg.Dir, cfg.Options)
	if err != nil {
		t.Fatalf("open datapath store: %v", err)
	}
	nt := newNodeTokens()
	out := &Server{Token: nt.controller, Dir: cfg.Dir, Store: store, auth: nt, Group: group}
	var auth datapath.Authenticator = nt
	if cfg.Auth != nil {
		auth = cfg.Auth
	}
	var opts []datapath.ServerOption
	if cfg.BootID != "" {
		opts = append(opts, datapath.WithBootID(cfg.BootID))
	}
	if cfg.TLS {
		files, err := devcerts.WriteServerFiles(t.TempDir(), []string{"127.0.0.1", "localhost"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		tc, err := datapath.ServerTLS(files.Cert, files.Key)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, datapath.WithTLS(tc))
		out.CAFile = files.CA
		out.CA = mustPool(t, files.CA)
	}
	srv, err := datapath.NewServer(store, auth, opts...)
	if err != nil {
		t.Fatalf("datapath server: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	out.Addr = lis.Addr().String()
	out.stop = serve(t, srv, lis, store, group)
	return out
}

// serve serves srv on lis until the returned stop (or the test's end) stops
// it and closes store and group.
func serve(t testing.TB, srv *datapath.Server, lis net.Listener, store *datapath.Store, group *raftstate.Group) func() {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			srv.Stop(0)
			if err := <-done; err != nil {
				t.Errorf("datapath serve: %v", err)
			}
			if err := store.Close(); err != nil {
				t.Errorf("close datapath store: %v", err)
			}
			if group != nil {
				if err := group.Close(); err != nil {
					t.Errorf("close the control group: %v", err)
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func mustPool(t testing.TB, caFile string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("CA file %s holds no certificate", caFile)
	}
	return pool
}

// nodeTokens authenticates the controller's random token and, for any node,
// a token derived from the node name with a random key ("node.NAME.MAC"): so
// a test may use any node name without registering it first, and one node's
// token never passes for another's.
type nodeTokens struct {
	controller string
	key        []byte
}

func newNodeTokens() *nodeTokens {
	var k [32]byte
	_, _ = rand.Read(k[:])
	var c [16]byte
	_, _ = rand.Read(c[:])
	return &nodeTokens{controller: "controller." + hex.EncodeToString(c[:]), key: k[:]}
}

func (n *nodeTokens) mac(node string) string {
	m := hmac.New(sha256.New, n.key)
	m.Write([]byte(node))
	return hex.EncodeToString(m.Sum(nil))
}

func (n *nodeTokens) token(node string) string { return "node." + node + "." + n.mac(node) }

// Authenticate implements datapath.Authenticator.
func (n *nodeTokens) Authenticate(_ context.Context, token string) (datapath.Identity, error) {
	if hmac.Equal([]byte(token), []byte(n.controller)) {
		return datapath.Identity{Role: datapath.RoleController, Name: "datapathtest controller token"}, nil
	}
	if rest, ok := strings.CutPrefix(token, "node."); ok {
		if i := strings.LastIndexByte(rest, '.'); i > 0 && hmac.Equal([]byte(rest[i+1:]), []byte(n.mac(rest[:i]))) {
			return datapath.Identity{Role: datapath.RoleEngine, Node: rest[:i], Name: "datapathtest node token"}, nil
		}
	}
	return datapath.Identity{}, fmt.Errorf("%w: not a token of this test server", datapath.ErrUnauthenticated)
}
