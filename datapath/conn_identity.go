package datapath

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
)

// MaxBoundIdentity bounds how long a connection keeps an identity that the
// authenticator can no longer check (its API server is down): one hour after
// the token was last proved, and never past the token's own expiry.
const MaxBoundIdentity = time.Hour

// BoundCheckPatience is the longest a call on a connection whose token was
// proved waits for the authenticator. A TokenReview hangs while an API
// server is starting again (it accepts connections before it answers), and
// calls that waited on it stalled every engine's heartbeats for 3.5-4 s at
// once, past the manager's connectivity-loss threshold
// (TestClient_APIServerStarting_HeartbeatsAndNodesDoNotWaitOnTokenReview,
// TestBoundIdentities_SlowCheckDoesNotHoldTheCall).
const BoundCheckPatience = 200 * time.Millisecond

// boundIdentities keeps, per live connection and token, the identity the
// token last proved on it. Data-path I/O, heartbeats and the node report
// must not depend on the Kubernetes API server: when a token cannot be
// checked (ErrAuthUnavailable) on a connection where it was proved before,
// that connection keeps its identity within MaxBoundIdentity and the token's
// expiry; and when the check does not answer within patience, the call goes
// on with that identity while the check finishes in the background (one at a
// time per binding), its answer applied to the binding when it comes. A
// refusal (ErrUnauthenticated: a revoked or expired token) ends the binding
// at once, and a new connection proves its token from scratch (it waits for
// the check: it has nothing proved to go on). Entries go with their
// connection.
type boundIdentities struct {
	log      *slog.Logger
	now      func() time.Time
	patience time.Duration

	mu       sync.Mutex
	m        map[boundKey]boundIdentity
	lastWarn time.Time
}

type boundKey struct {
	conn  string // the connection's remote address
	token [sha256.Size]byte
}

type boundIdentity struct {
	id       Identity
	until    time.Time
	checking bool // a check that outlasted patience is still under way
}

func newBoundIdentities(log *slog.Logger) *boundIdentities {
	return &boundIdentities{log: log, now: time.Now, patience: BoundCheckPatience, m: map[boundKey]boundIdentity{}}
}

// checked is an authenticator's answer.
type checked struct {
	id  Identity
	err error
}

// authenticate proves token on conn with auth: a proof binds the identity to
// the connection; when the proof is unavailable or slow, the bound identity
// answers.
func (b *boundIdentities) authenticate(ctx context.Context, auth Authenticator, conn, token string) (Identity, error) {
	key := boundKey{conn: conn, token: sha256.Sum256([]byte(token))}
	b.mu.Lock()
	bound, ok := b.m[key]
	ok = ok && conn != "" && b.now().Before(bound.until)
	b.mu.Unlock()
	if !ok {
		id, err := auth.Authenticate(ctx, token)
		return b.settle(key, conn, token, checked{id, err}, true)
	}
	if bound.checking {
		return b.keep(bound.id, "the check of its token has not answered yet"), nil
	}
	done := make(chan checked, 1)
	go func() {
		id, err := auth.Authenticate(context.WithoutCancel(ctx), token)
		done <- checked{id, err}
	}()
	wait := time.NewTimer(b.patience)
	defer wait.Stop()
	select {
	case c := <-done:
		return b.settle(key, conn, token, c, true)
	case <-wait.C:
	}
	switch b.setChecking(key, true) {
	case bindingGone: // refused or closed meanwhile: nothing proved to go on
		return b.settle(key, conn, token, <-done, true)
	case alreadyChecking:
		return b.keep(bound.id, "the check of its token has not answered yet"), nil
	}
	go func() {
		// A binding that ended meanwhile (its connection closed) is not made again.
		_, _ = b.settle(key, conn, token, <-done, false)
		b.setChecking(key, false)
	}()
	return b.keep(bound.id, fmt.Sprintf("the check of its token has not answered within %s", b.patience)), nil
}

// Outcomes of setChecking.
const (
	checkingSet = iota
	bindingGone
	alreadyChecking
)

// setChecking marks the binding of key as being checked in the background,
// or no longer.
func (b *boundIdentities) setChecking(key boundKey, on bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	bound, ok := b.m[key]
	switch {
	case !ok:
		return bindingGone
	case bound.checking == on:
		return alreadyChecking
	}
	bound.checking = on
	b.m[key] = bound
	return checkingSet
}

// settle applies an authenticator's answer for token on conn: a proof binds
// the identity again (or anew, with create), a refusal ends the binding, and
// when the answer is unavailable a binding in force answers.
func (b *boundIdentities) settle(key boundKey, conn, token string, c checked, create bool) (Identity, error) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	bound, ok := b.m[key]
	if c.err == nil {
		until := now.Add(MaxBoundIdentity)
		if exp := jwtExpiry(token); !exp.IsZero() && exp.Before(until) {
			until = exp
		}
		if conn != "" && (ok || create) {
			b.m[key] = boundIdentity{id: c.id, until: until, checking: bound.checking}
		}
		return c.id, nil
	}
	err := authError(c.err)
	if !isUnavailable(err) || !ok || !now.Before(bound.until) {
		delete(b.m, key) // a refusal, or a binding past its end
		return Identity{}, err
	}
	b.warnLocked(now, bound.id, fmt.Sprintf("credentials cannot be checked now: %v", err))
	return bound.id, nil
}

// keep answers with a bound identity without its check, warning at most
// every 10 s.
func (b *boundIdentities) keep(id Identity, why string) Identity {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.warnLocked(b.now(), id, why)
	return id
}

func (b *boundIdentities) warnLocked(now time.Time, id Identity, why string) {
	if now.Sub(b.lastWarn) < 10*time.Second {
		return
	}
	b.lastWarn = now
	b.log.Warn("datapath: a connection keeps the identity its token proved on it", "identity", id.String(), "why", why)
}

// forget drops every binding of conn (it closed).
func (b *boundIdentities) forget(conn string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.m {
		if k.conn == conn {
			delete(b.m, k)
		}
	}
}

// size is the number of bindings (for tests).
func (b *boundIdentities) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

func isUnavailable(err error) bool {
	return errors.Is(err, ErrAuthUnavailable)
}

// peerConn names the gRPC connection of ctx by its remote address.
func peerConn(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// connEnds is a gRPC stats handler that forgets a connection's bindings when
// it ends.
type connEnds struct{ b *boundIdentities }

type connKey struct{}

func (h connEnds) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if info.RemoteAddr == nil {
		return ctx
	}
	return context.WithValue(ctx, connKey{}, info.RemoteAddr.String())
}

func (h connEnds) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, end := s.(*stats.ConnEnd); end {
		if conn, ok := ctx.Value(connKey{}).(string); ok {
			h.b.forget(conn)
		}
	}
}

func (connEnds) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connEnds) HandleRPC(context.Context, stats.RPCStats)                       {}

// jwtExpiry reads the exp claim of a JWT without verifying it (the
// authenticator verified the token); zero for a token that is not a JWT or
// has no exp (a static token).
func jwtExpiry(token string) time.Time {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if json.Unmarshal(raw, &claims) != nil || claims.Exp == nil {
		return time.Time{}
	}
	sec, err := claims.Exp.Int64()
	if err != nil || sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0)
}
