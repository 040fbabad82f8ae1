package datapath

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// switchAuth answers with err when set, else with node-a's identity.
type switchAuth struct{ err error }

func (a *switchAuth) Authenticate(context.Context, string) (Identity, error) {
	if a.err != nil {
		return Identity{}, a.err
	}
	return Identity{Role: RoleEngine, Node: "node-a", Name: "engine"}, nil
}

func jwtWithExp(exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(fmt.Sprintf(`{"exp":%d}`, exp.Unix()))) + ".sig"
}

func TestBoundIdentities(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		token   string
		conn    string        // the connection asking during the outage
		later   time.Duration // how long after the proof
		outage  error
		wantErr error
	}{
		{"same connection during an outage", "tok", "c1", time.Minute, ErrAuthUnavailable, nil},
		{"a timeout counts as an outage", "tok", "c1", time.Minute, context.DeadlineExceeded, nil},
		{"another connection proves itself", "tok", "c2", time.Minute, ErrAuthUnavailable, ErrAuthUnavailable},
		{"past the bound", "tok", "c1", MaxBoundIdentity, ErrAuthUnavailable, ErrAuthUnavailable},
		{"past the token's expiry", jwtWithExp(now.Add(5 * time.Minute)), "c1", 6 * time.Minute, ErrAuthUnavailable, ErrAuthUnavailable},
		{"before the token's expiry", jwtWithExp(now.Add(5 * time.Minute)), "c1", 4 * time.Minute, ErrAuthUnavailable, nil},
		{"a refusal is never overruled", "tok", "c1", time.Second, ErrUnauthenticated, ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBoundIdentities(slog.New(slog.NewTextHandler(io.Discard, nil)))
			b.now = func() time.Time { return now }
			auth := &switchAuth{}
			if _, err := b.authenticate(ctx, auth, "c1", tc.token); err != nil {
				t.Fatal(err)
			}
			auth.err = tc.outage
			b.now = func() time.Time { return now.Add(tc.later) }
			id, err := b.authenticate(ctx, auth, tc.conn, tc.token)
			if !errors.Is(err, tc.wantErr) || (err == nil && id.Node != "node-a") {
				t.Fatalf("= %v, %v; want %v", id, err, tc.wantErr)
			}
		})
	}
}

func TestBoundIdentities_RefusalAndCloseEndTheBinding(t *testing.T) {
	ctx := context.Background()
	b := newBoundIdentities(slog.New(slog.NewTextHandler(io.Discard, nil)))
	auth := &switchAuth{}
	for _, conn := range []string{"c1", "c2"} {
		if _, err := b.authenticate(ctx, auth, conn, "tok"); err != nil {
			t.Fatal(err)
		}
	}
	auth.err = ErrUnauthenticated
	if _, err := b.authenticate(ctx, auth, "c1", "tok"); !errors.Is(err, ErrUnauthenticated) {
		t.Fatal(err)
	}
	auth.err = ErrAuthUnavailable
	if _, err := b.authenticate(ctx, auth, "c1", "tok"); !errors.Is(err, ErrAuthUnavailable) {
		t.Fatalf("after a refusal, an outage: %v; want the binding gone", err)
	}
	b.forget("c2")
	if _, err := b.authenticate(ctx, auth, "c2", "tok"); !errors.Is(err, ErrAuthUnavailable) || b.size() != 0 {
		t.Fatalf("after the connection closed: %v, %d bindings; want none", err, b.size())
	}
}

// TestServer_Bulk_APIServerOutageKeepsTheConnection: a bulk connection that
// proved its token keeps writing while tokens cannot be checked; a new bulk
// connection cannot prove itself meanwhile.
func TestServer_Bulk_APIServerOutageKeepsTheConnection(t *testing.T) {
	old := bulkReauth
	bulkReauth = 0 // every write
	t.Cleanup(func() { bulkReauth = old })
	s := openTest(t, t.TempDir())
	auth := &switchAuth{}
	addr := serveTest(t, s, auth)
	v := mustCreate(t, s, "pvc-a", 1<<20, AccessRWO)
	e, _ := s.Grant(v.ID, "node-a")
	dial := func() *bulkConnTest {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return dialBulkTest(t, c, "node-a-token")
	}
	b := dial()
	if _, err := b.read(); err != nil {
		t.Fatalf("hello: %v", err)
	}
	gen := b.open(9, e, v.ID, "node-a")
	auth.err = ErrAuthUnavailable
	b.write(1, e, gen, v.ID, "node-a", []byte("during"))
	if id, err := b.read(); id != 1 || err != nil {
		t.Fatalf("write during the outage: id %d, %v; want it applied", id, err)
	}
	if got, _ := s.ReadAt(v.ID, "node-a", e, 0, 6); string(got) != "during" {
		t.Fatalf("volume holds %q", got)
	}
	if _, err := dial().read(); !errors.Is(err, ErrAuthUnavailable) {
		t.Fatalf("a new bulk connection during the outage: %v; want ErrAuthUnavailable", err)
	}
}
