package datapath

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
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

// boundIdentities keeps, per live connection and token, the identity the
// token last proved on it. Data-path I/O must not depend on the Kubernetes API
// server: when a token cannot be checked (ErrAuthUnavailable) on a connection
// where it was proved before, that connection keeps its identity within
// MaxBoundIdentity and the token's expiry. A refusal (ErrUnauthenticated: a
// revoked or expired token) ends the binding at once, and a new connection
// proves its token from scratch. Entries go with their connection.
type boundIdentities struct {
	log *slog.Logger
	now func() time.Time

	mu       sync.Mutex
	m        map[boundKey]boundIdentity
	lastWarn time.Time
}

type boundKey struct {
	conn  string // the connection's remote address
	token [sha256.Size]byte
}

type boundIdentity struct {
	id    Identity
	until time.Time
}

func newBoundIdentities(log *slog.Logger) *boundIdentities {
	return &boundIdentities{log: log, now: time.Now, m: map[boundKey]boundIdentity{}}
}

// authenticate proves token on conn with auth: a proof binds the identity to
// the connection; when the proof is unavailable, the bound identity answers.
func (b *boundIdentities) authenticate(ctx context.Context, auth Authenticator, conn, token string) (Identity, error) {
	id, err := auth.Authenticate(ctx, token)
	key := boundKey{conn: conn, token: sha256.Sum256([]byte(token))}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		until := now.Add(MaxBoundIdentity)
		if exp := jwtExpiry(token); !exp.IsZero() && exp.Before(until) {
			until = exp
		}
		if conn != "" {
			b.m[key] = boundIdentity{id: id, until: until}
		}
		return id, nil
	}
	err = authError(err)
	bound, ok := b.m[key]
	if !isUnavailable(err) || !ok || !now.Before(bound.until) {
		delete(b.m, key) // a refusal, or a binding past its end
		return Identity{}, err
	}
	if now.Sub(b.lastWarn) >= 10*time.Second {
		b.lastWarn = now
		b.log.Warn("datapath: credentials cannot be checked now; a connection keeps the identity its token proved on it",
			"identity", bound.id.String(), "until", bound.until, "err", err)
	}
	return bound.id, nil
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
