package datapath

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
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

// hangAuth answers with err, or with node-a's identity, once released.
type hangAuth struct {
	release chan struct{}
	err     error
	calls   atomic.Int32
}

func (a *hangAuth) Authenticate(context.Context, string) (Identity, error) {
	a.calls.Add(1)
	<-a.release
	if a.err != nil {
		return Identity{}, a.err
	}
	return Identity{Role: RoleEngine, Node: "node-a", Name: "engine"}, nil
}

// TestBoundIdentities_SlowCheckDoesNotHoldTheCall: on a connection whose
// token was proved, a check that hangs holds a call for at most the
// patience, one check runs at a time, and its answer applies when it comes: a
// refusal ends the binding, and a connection closed meanwhile is not bound
// again. A connection with nothing proved waits for its check.
func TestBoundIdentities_SlowCheckDoesNotHoldTheCall(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		answer  error
		closed  bool // the connection closes while the check hangs
		wantErr error
		bound   int
	}{
		{"a refusal ends the binding", ErrUnauthenticated, false, ErrAuthUnavailable, 0},
		{"a proof keeps it", nil, false, nil, 1},
		{"a closed connection is not bound again", nil, true, ErrAuthUnavailable, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBoundIdentities(slog.New(slog.NewTextHandler(io.Discard, nil)))
			b.patience = 20 * time.Millisecond
			if _, err := b.authenticate(ctx, &switchAuth{}, "c1", "tok"); err != nil {
				t.Fatal(err)
			}
			auth := &hangAuth{release: make(chan struct{}), err: tc.answer}
			for i := 0; i < 3; i++ {
				start := time.Now()
				if id, err := b.authenticate(ctx, auth, "c1", "tok"); err != nil || id.Node != "node-a" {
					t.Fatalf("call %d while the check hangs: %v, %v; want the bound identity", i, id, err)
				}
				if d := time.Since(start); d > time.Second {
					t.Fatalf("call %d took %s; want at most about the patience (20ms)", i, d)
				}
			}
			if n := auth.calls.Load(); n != 1 {
				t.Fatalf("%d checks under way; want one at a time", n)
			}
			waited := make(chan error, 1)
			go func() { _, err := b.authenticate(ctx, auth, "c2", "tok"); waited <- err }()
			select {
			case err := <-waited:
				t.Fatalf("a new connection answered (%v) while its check hangs; want it to wait", err)
			case <-time.After(50 * time.Millisecond):
			}
			if tc.closed {
				b.forget("c1")
			}
			close(auth.release)
			<-waited
			b.forget("c2")
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, err := b.authenticate(ctx, &switchAuth{err: ErrAuthUnavailable}, "c1", "tok")
				if errors.Is(err, tc.wantErr) && b.size() == tc.bound {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after the check answered %v: %v, %d bindings; want %v, %d", tc.answer, err, b.size(), tc.wantErr, tc.bound)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
