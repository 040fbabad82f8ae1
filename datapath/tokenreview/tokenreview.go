package tokenreview

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

// Reviewer creates TokenReviews: the TokenReviews client of client-go
// (Clientset.AuthenticationV1().TokenReviews()) satisfies it.
type Reviewer interface {
	Create(ctx context.Context, tr *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)
}

// Limits and defaults of Config.
const (
	DefaultTTL         = 30 * time.Second
	MaxTTL             = 10 * time.Minute
	DefaultOutageGrace = 2 * time.Minute
	MaxOutageGrace     = time.Hour
	DefaultMaxEntries  = 10000
	// RefusalTTL caps how long a refusal is cached (a token that was just
	// created may not be known to every API server yet).
	RefusalTTL = 5 * time.Second
	// ReviewTimeout bounds one TokenReview.
	ReviewTimeout = 10 * time.Second
)

// Config configures an Authenticator.
type Config struct {
	// Reviewer asks the API server; required.
	Reviewer Reviewer
	// Audience the tokens must be issued for; default vigil.DatapathTokenAudience.
	Audience string
	// Controllers are the ServiceAccounts of the controller role; Engines
	// those of the engine role. At least one of the two, none in both.
	Controllers, Engines []ServiceAccount
	// TTL is how long an answer is used before the token is reviewed again;
	// default DefaultTTL, at most MaxTTL.
	TTL time.Duration
	// OutageGrace is how long after the API server last accepted a token it
	// is still accepted while TokenReviews fail; 0: not at all. At most
	// MaxOutageGrace.
	OutageGrace time.Duration
	// MaxEntries bounds the cache; default DefaultMaxEntries.
	MaxEntries int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Log receives a warning when a token is accepted on the outage grace;
	// default slog.Default().
	Log *slog.Logger
}

// Authenticator implements datapath.Authenticator with TokenReviews.
type Authenticator struct {
	cfg      Config
	roles    map[string]datapath.Role // ServiceAccount username -> role
	mu       sync.Mutex
	cache    map[[sha256.Size]byte]*entry
	flight   singleflight.Group
	reviews  uint64    // TokenReviews made (for tests and benchmarks)
	lastWarn time.Time // of the outage-grace warning
}

// entry is a cached answer for one token.
type entry struct {
	id       datapath.Identity
	err      error     // a refusal; nil: id is good
	fresh    time.Time // used without asking again until then
	verified time.Time // when the API server last accepted it (zero for a refusal)
	exp      time.Time // the token's own expiry; zero: unknown
	// refreshing: a background review of the token is under way (a.mu).
	refreshing bool
}

// refreshAt is when an accepted token is reviewed again in the background,
// while its cached answer still serves: two thirds into the TTL.
func (a *Authenticator) refreshAt(e *entry) time.Time {
	return e.verified.Add(a.cfg.TTL * 2 / 3)
}

// New checks cfg and returns an Authenticator.
func New(cfg Config) (*Authenticator, error) {
	if cfg.Reviewer == nil {
		return nil, errors.New("tokenreview: no Reviewer: give a TokenReviews client (a kubeconfig or the in-cluster config)")
	}
	if cfg.Audience == "" {
		cfg.Audience = vigil.DatapathTokenAudience
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultMaxEntries
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	switch {
	case cfg.TTL < time.Second || cfg.TTL > MaxTTL:
		return nil, fmt.Errorf("tokenreview: cache TTL %s: want 1s to %s", cfg.TTL, MaxTTL)
	case cfg.OutageGrace < 0 || cfg.OutageGrace > MaxOutageGrace:
		return nil, fmt.Errorf("tokenreview: outage grace %s: want 0 (none) to %s", cfg.OutageGrace, MaxOutageGrace)
	case cfg.MaxEntries < 1:
		return nil, fmt.Errorf("tokenreview: cache size %d: want at least 1", cfg.MaxEntries)
	case len(cfg.Controllers)+len(cfg.Engines) == 0:
		return nil, errors.New("tokenreview: no ServiceAccount has a role: name the controller ServiceAccounts, the engine ServiceAccounts, or both")
	}
	a := &Authenticator{cfg: cfg, roles: map[string]datapath.Role{}, cache: map[[sha256.Size]byte]*entry{}}
	for _, l := range []struct {
		sas  []ServiceAccount
		role datapath.Role
	}{{cfg.Controllers, datapath.RoleController}, {cfg.Engines, datapath.RoleEngine}} {
		for _, sa := range l.sas {
			if r, dup := a.roles[sa.Username()]; dup && r != l.role {
				return nil, fmt.Errorf("tokenreview: ServiceAccount %s is named for both the controller and the engine role; give it one", sa)
			}
			a.roles[sa.Username()] = l.role
		}
	}
	return a, nil
}

// Authenticate implements datapath.Authenticator.
func (a *Authenticator) Authenticate(ctx context.Context, token string) (datapath.Identity, error) {
	now := a.cfg.Now()
	key := sha256.Sum256([]byte(token))
	a.mu.Lock()
	e := a.cache[key]
	a.mu.Unlock()
	if e != nil && now.Before(e.fresh) {
		if e.err == nil && !now.Before(a.refreshAt(e)) {
			a.refresh(key, token, e)
		}
		return e.id, e.err // fresh is never past the token's expiry
	}
	exp := tokenExpiry(token)
	if !exp.IsZero() && !now.Before(exp) {
		return datapath.Identity{}, fmt.Errorf("%w: the token expired at %s", datapath.ErrUnauthenticated, exp.UTC().Format(time.RFC3339))
	}
	v, err, _ := a.flight.Do(hex.EncodeToString(key[:]), func() (any, error) {
		a.mu.Lock()
		again := a.cache[key]
		a.mu.Unlock()
		if again != nil && now.Before(again.fresh) {
			return again, nil // answered while this caller looked
		}
		return a.reviewAndRemember(context.WithoutCancel(ctx), key, token, now, exp)
	})
	if err != nil {
		return a.onReviewError(e, now, err)
	}
	answer := v.(*entry)
	return answer.id, answer.err
}

// refresh reviews an accepted token again in the background, once at a time,
// so that a token in use is never waited on: a caller whose token's answer
// expires mid-request would otherwise wait for the API server, and an engine
// heartbeat that waits longer than the connectivity-loss threshold makes a
// healthy node look cut off from its storage. Every token in use expired in
// the same 30 s rhythm, so a slow API server stalled the heartbeats of
// whole racks at once. The cached answer still ends at its TTL: a review that
// has not come back by then is waited on (or fails into the outage grace) as
// before, and a refusal replaces the answer as soon as it arrives, before the
// TTL ends.
func (a *Authenticator) refresh(key [sha256.Size]byte, token string, e *entry) {
	a.mu.Lock()
	if e.refreshing || a.cache[key] != e {
		a.mu.Unlock()
		return
	}
	e.refreshing = true
	a.mu.Unlock()
	go func() {
		start := a.cfg.Now()
		_, err, _ := a.flight.Do(hex.EncodeToString(key[:]), func() (any, error) {
			return a.reviewAndRemember(context.Background(), key, token, start, tokenExpiry(token))
		})
		if err != nil {
			a.mu.Lock()
			e.refreshing = false // the next call tries again; the answer ends at its TTL
			a.mu.Unlock()
		}
	}()
}

// reviewAndRemember reviews token (within ReviewTimeout) and caches the answer
// as of start, the time the review was asked for.
func (a *Authenticator) reviewAndRemember(ctx context.Context, key [sha256.Size]byte, token string, start, exp time.Time) (*entry, error) {
	ctx, cancel := context.WithTimeout(ctx, ReviewTimeout)
	defer cancel()
	tr, err := a.review(ctx, token)
	if err != nil {
		return nil, err
	}
	return a.remember(key, tr.Status, start, exp), nil
}

// review makes one TokenReview.
func (a *Authenticator) review(ctx context.Context, token string) (*authnv1.TokenReview, error) {
	a.mu.Lock()
	a.reviews++
	a.mu.Unlock()
	return a.cfg.Reviewer.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{
		Token: token, Audiences: []string{a.cfg.Audience}}}, metav1.CreateOptions{})
}

// onReviewError answers when the API server could not be asked: the cached
// acceptance within the outage grace, else a refusal that says why.
func (a *Authenticator) onReviewError(e *entry, now time.Time, err error) (datapath.Identity, error) {
	if e != nil && e.err == nil && a.cfg.OutageGrace > 0 && now.Before(e.verified.Add(a.cfg.OutageGrace)) &&
		(e.exp.IsZero() || now.Before(e.exp)) {
		a.mu.Lock()
		warn := now.Sub(a.lastWarn) >= 10*time.Second
		if warn {
			a.lastWarn = now
		}
		a.mu.Unlock()
		if warn {
			a.cfg.Log.Warn("datapath: TokenReview failed; accepting a token the API server accepted before, within the outage grace",
				"identity", e.id.String(), "verified", e.verified, "grace", a.cfg.OutageGrace, "err", err)
		}
		return e.id, nil
	}
	return datapath.Identity{}, fmt.Errorf("%w: TokenReview failed: %v", datapath.ErrAuthUnavailable, err)
}

// remember caches the answer of a TokenReview and returns it.
func (a *Authenticator) remember(key [sha256.Size]byte, st authnv1.TokenReviewStatus, now, exp time.Time) *entry {
	id, err := a.identityOf(st)
	e := &entry{id: id, err: err, exp: exp}
	if err == nil {
		e.fresh, e.verified = now.Add(a.cfg.TTL), now
	} else {
		e.fresh = now.Add(min(a.cfg.TTL, RefusalTTL))
	}
	if !exp.IsZero() && exp.Before(e.fresh) {
		e.fresh = exp
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.cache[key]; !ok && len(a.cache) >= a.cfg.MaxEntries {
		a.evict(now)
	}
	a.cache[key] = e
	return e
}

// evict makes room in a full cache: entries that can no longer be used go
// first, then arbitrary ones (map order) down to 90% of the bound.
func (a *Authenticator) evict(now time.Time) {
	for k, e := range a.cache {
		if !now.Before(e.fresh) && (e.err != nil || !now.Before(e.verified.Add(a.cfg.OutageGrace))) {
			delete(a.cache, k)
		}
	}
	target := a.cfg.MaxEntries - max(1, a.cfg.MaxEntries/10)
	for k := range a.cache {
		if len(a.cache) <= target {
			return
		}
		delete(a.cache, k)
	}
}

// identityOf maps a TokenReview's answer to an identity: authenticated, for
// the audience, a ServiceAccount with a role, and for an engine the node the
// token is bound to.
func (a *Authenticator) identityOf(st authnv1.TokenReviewStatus) (datapath.Identity, error) {
	if !st.Authenticated {
		why := st.Error
		if why == "" {
			why = "not authenticated"
		}
		return datapath.Identity{}, fmt.Errorf("%w: the API server refused the token: %.200s", datapath.ErrUnauthenticated, why)
	}
	if !contains(st.Audiences, a.cfg.Audience) {
		return datapath.Identity{}, fmt.Errorf("%w: the token is not for the audience %q (its audiences: %q)",
			datapath.ErrUnauthenticated, a.cfg.Audience, st.Audiences)
	}
	user := st.User.Username
	role, ok := a.roles[user]
	if !ok {
		return datapath.Identity{}, fmt.Errorf("%w: %.300s has no datapath role; controller ServiceAccounts: %v; engine ServiceAccounts: %v",
			datapath.ErrPermissionDenied, user, a.cfg.Controllers, a.cfg.Engines)
	}
	if role == datapath.RoleController {
		return datapath.Identity{Role: role, Name: user}, nil
	}
	nodes := st.User.Extra[vigil.NodeNameTokenExtra]
	if len(nodes) != 1 || !validNode(nodes[0]) {
		return datapath.Identity{}, fmt.Errorf("%w: %s is an engine ServiceAccount, but its token names no single node (user extra %s: %q): "+
			"give the engine a projected token of its pod, or a TokenRequest bound to its Node",
			datapath.ErrPermissionDenied, user, vigil.NodeNameTokenExtra, nodes)
	}
	return datapath.Identity{Role: role, Node: nodes[0], Name: user}, nil
}

// Reviews reports how many TokenReviews were made.
func (a *Authenticator) Reviews() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reviews
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func validNode(n string) bool {
	return n != "" && len(n) <= datapath.MaxNodeLen && !strings.ContainsFunc(n, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

// tokenExpiry reads the exp claim of a JWT without verifying anything: it
// only bounds how long an answer is cached and refuses a token already past
// it. Zero when the token is not a JWT or has no exp.
func tokenExpiry(token string) time.Time {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Exp == nil {
		return time.Time{}
	}
	sec, err := claims.Exp.Int64()
	if err != nil || sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0)
}
