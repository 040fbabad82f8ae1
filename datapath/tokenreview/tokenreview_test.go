package tokenreview

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

// fakeReviewer answers TokenReviews from a table, the way the API server
// would: unknown tokens are not authenticated, tokens for another audience
// neither; err, when set, fails every review.
type fakeReviewer struct {
	mu      sync.Mutex
	users   map[string]fakeUser // token -> user
	err     error
	calls   atomic.Int64
	block   chan struct{} // when set, reviews wait for it
	lastAud []string
}

type fakeUser struct {
	name     string
	node     string
	audience string
}

func (f *fakeReviewer) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	f.calls.Add(1)
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastAud = tr.Spec.Audiences
	if f.err != nil {
		return nil, f.err
	}
	out := tr.DeepCopy()
	u, ok := f.users[tr.Spec.Token]
	switch {
	case !ok:
		out.Status.Error = "invalid bearer token"
	case !contains(tr.Spec.Audiences, u.audience):
		out.Status.Error = "token audiences [" + u.audience + "] is invalid for the target audiences " + fmt.Sprint(tr.Spec.Audiences)
	default:
		out.Status.Authenticated = true
		out.Status.Audiences = []string{u.audience}
		out.Status.User.Username = u.name
		if u.node != "" {
			out.Status.User.Extra = map[string]authnv1.ExtraValue{vigil.NodeNameTokenExtra: {u.node}}
		}
	}
	return out, nil
}

func (f *fakeReviewer) setErr(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	managerSA = ServiceAccount{"vigil-system", "vigil-manager"}
	engineSA  = ServiceAccount{"vigil-system", "vigil-engine-node"}
	t0        = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

// jwt makes a token shaped like a JWT with the given exp claim (0: none).
func jwt(name string, exp time.Time) string {
	claims := `{"sub":"` + name + `"}`
	if !exp.IsZero() {
		claims = fmt.Sprintf(`{"sub":%q,"exp":%d}`, name, exp.Unix())
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + ".sig"
}

func newAuth(t *testing.T, f *fakeReviewer, clk *clock, mod func(*Config)) *Authenticator {
	t.Helper()
	cfg := Config{Reviewer: f, Controllers: []ServiceAccount{managerSA}, Engines: []ServiceAccount{engineSA},
		TTL: 30 * time.Second, OutageGrace: 2 * time.Minute, Now: clk.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func standardReviewer() *fakeReviewer {
	return &fakeReviewer{users: map[string]fakeUser{
		"manager":          {name: managerSA.Username(), audience: vigil.DatapathTokenAudience},
		"engine-a":         {name: engineSA.Username(), node: "node-a", audience: vigil.DatapathTokenAudience},
		"engine-unbound":   {name: engineSA.Username(), audience: vigil.DatapathTokenAudience},
		"engine-kubeapi":   {name: engineSA.Username(), node: "node-a", audience: "https://kubernetes.default.svc"},
		"someone-else":     {name: "system:serviceaccount:default:default", audience: vigil.DatapathTokenAudience},
		"a-person":         {name: "alice", audience: vigil.DatapathTokenAudience},
		jwt("expired", t0): {name: managerSA.Username(), audience: vigil.DatapathTokenAudience},
	}}
}

func TestAuthenticator_Authenticate_RolesFromServiceAccounts(t *testing.T) {
	f := standardReviewer()
	a := newAuth(t, f, &clock{t: t0}, nil)
	for _, tc := range []struct {
		token   string
		want    datapath.Identity
		wantErr error
		mention string
	}{
		{"manager", datapath.Identity{Role: datapath.RoleController, Name: managerSA.Username()}, nil, ""},
		{"engine-a", datapath.Identity{Role: datapath.RoleEngine, Node: "node-a", Name: engineSA.Username()}, nil, ""},
		{"engine-unbound", datapath.Identity{}, datapath.ErrPermissionDenied, "names no single node"},
		{"engine-kubeapi", datapath.Identity{}, datapath.ErrUnauthenticated, "is invalid for the target audiences"},
		{"someone-else", datapath.Identity{}, datapath.ErrPermissionDenied, "system:serviceaccount:default:default has no datapath role"},
		{"a-person", datapath.Identity{}, datapath.ErrPermissionDenied, "alice has no datapath role"},
		{"not-a-token", datapath.Identity{}, datapath.ErrUnauthenticated, "invalid bearer token"},
		{jwt("expired", t0), datapath.Identity{}, datapath.ErrUnauthenticated, "expired at 2025-03-01T12:00:00Z"},
	} {
		id, err := a.Authenticate(context.Background(), tc.token)
		if tc.wantErr == nil {
			if err != nil || id != tc.want {
				t.Errorf("%s: %+v, %v; want %+v", tc.token, id, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.mention) || id != (datapath.Identity{}) {
			t.Errorf("%.20s: %+v, %v; want %v mentioning %q", tc.token, id, err, tc.wantErr, tc.mention)
		}
	}
	if got := f.lastAud; len(got) != 1 || got[0] != vigil.DatapathTokenAudience {
		t.Errorf("reviews asked for audiences %q; want only %q", got, vigil.DatapathTokenAudience)
	}
}

// TestAuthenticator_Authenticate_AudienceAnsweredOutsideIsRefused: an API
// server that authenticates the token but says it is for other audiences
// (or says nothing about audiences) is not taken at its word.
func TestAuthenticator_Authenticate_AudienceAnsweredOutsideIsRefused(t *testing.T) {
	a := newAuth(t, &fakeReviewer{}, &clock{t: t0}, nil)
	for _, auds := range [][]string{nil, {"https://kubernetes.default.svc"}} {
		_, err := a.identityOf(authnv1.TokenReviewStatus{Authenticated: true, Audiences: auds,
			User: authnv1.UserInfo{Username: managerSA.Username()}})
		if !errors.Is(err, datapath.ErrUnauthenticated) || !strings.Contains(err.Error(), "not for the audience") {
			t.Errorf("audiences %q: %v; want ErrUnauthenticated", auds, err)
		}
	}
	_, err := a.identityOf(authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{vigil.DatapathTokenAudience},
		User: authnv1.UserInfo{Username: engineSA.Username(), Extra: map[string]authnv1.ExtraValue{vigil.NodeNameTokenExtra: {"a", "b"}}}})
	if !errors.Is(err, datapath.ErrPermissionDenied) {
		t.Errorf("two node names: %v; want ErrPermissionDenied", err)
	}
}

func TestAuthenticator_Authenticate_CachesWithinTTLOnly(t *testing.T) {
	f := standardReviewer()
	clk := &clock{t: t0}
	a := newAuth(t, f, clk, nil)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		if _, err := a.Authenticate(ctx, "engine-a"); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("5 calls within the TTL made %d TokenReviews; want 1", n)
	}
	clk.Advance(30 * time.Second)
	if _, err := a.Authenticate(ctx, "engine-a"); err != nil || f.calls.Load() != 2 {
		t.Fatalf("after the TTL: %v, %d reviews; want a second review", err, f.calls.Load())
	}
	// A revoked token (its pod deleted) is refused once the TTL has passed.
	f.mu.Lock()
	delete(f.users, "engine-a")
	f.mu.Unlock()
	if _, err := a.Authenticate(ctx, "engine-a"); err != nil {
		t.Fatalf("within the TTL the cached answer stands: %v", err)
	}
	clk.Advance(30 * time.Second)
	if _, err := a.Authenticate(ctx, "engine-a"); !errors.Is(err, datapath.ErrUnauthenticated) {
		t.Fatalf("a revoked token after the TTL: %v; want ErrUnauthenticated", err)
	}
	// Refusals are cached for at most RefusalTTL.
	calls := f.calls.Load()
	_, _ = a.Authenticate(ctx, "not-a-token")
	_, _ = a.Authenticate(ctx, "not-a-token")
	if f.calls.Load() != calls+1 {
		t.Fatalf("a refusal was not cached: %d reviews for 2 calls", f.calls.Load()-calls)
	}
	clk.Advance(RefusalTTL)
	_, _ = a.Authenticate(ctx, "not-a-token")
	if f.calls.Load() != calls+2 {
		t.Fatalf("a refusal was cached past %s", RefusalTTL)
	}
}

// TestAuthenticator_Authenticate_NeverPastTheTokensExpiry: a cached yes ends
// when the token expires, even inside the TTL, and the outage grace does not
// stretch it.
func TestAuthenticator_Authenticate_NeverPastTheTokensExpiry(t *testing.T) {
	exp := t0.Add(10 * time.Second)
	tok := jwt("short-lived", exp)
	f := &fakeReviewer{users: map[string]fakeUser{tok: {name: engineSA.Username(), node: "node-a", audience: vigil.DatapathTokenAudience}}}
	clk := &clock{t: t0}
	a := newAuth(t, f, clk, nil)
	if _, err := a.Authenticate(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	clk.Advance(9 * time.Second)
	if _, err := a.Authenticate(context.Background(), tok); err != nil || f.calls.Load() != 1 {
		t.Fatalf("before expiry: %v after %d reviews", err, f.calls.Load())
	}
	f.setErr(errors.New("connection refused"))
	clk.Advance(time.Second)
	_, err := a.Authenticate(context.Background(), tok)
	if !errors.Is(err, datapath.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("at expiry, with the API server away: %v; want ErrUnauthenticated (expired)", err)
	}
	if f.calls.Load() != 1 {
		t.Fatalf("an expired token was sent for review")
	}
}

// TestAuthenticator_Authenticate_ReviewErrorIsNeverAYes: a token the API
// server never confirmed is refused with ErrAuthUnavailable while reviews
// fail; one it confirmed is accepted within the outage grace only.
func TestAuthenticator_Authenticate_ReviewErrorIsNeverAYes(t *testing.T) {
	f := standardReviewer()
	clk := &clock{t: t0}
	a := newAuth(t, f, clk, nil)
	ctx := context.Background()
	if _, err := a.Authenticate(ctx, "engine-a"); err != nil {
		t.Fatal(err)
	}
	f.setErr(errors.New("the server is currently unable to handle the request"))
	if _, err := a.Authenticate(ctx, "manager"); !errors.Is(err, datapath.ErrAuthUnavailable) || !strings.Contains(err.Error(), "unable to handle") {
		t.Fatalf("never confirmed, API server failing: %v; want ErrAuthUnavailable with the cause", err)
	}
	_, _ = a.Authenticate(ctx, "not-a-token")
	clk.Advance(time.Minute) // past the TTL, within the grace
	id, err := a.Authenticate(ctx, "engine-a")
	if err != nil || id.Node != "node-a" {
		t.Fatalf("confirmed a minute ago, API server failing: %+v, %v; want node-a within the grace", id, err)
	}
	clk.Advance(time.Minute + time.Second) // past the grace
	if _, err := a.Authenticate(ctx, "engine-a"); !errors.Is(err, datapath.ErrAuthUnavailable) {
		t.Fatalf("past the outage grace: %v; want ErrAuthUnavailable", err)
	}
	noGrace := newAuth(t, f, clk, func(c *Config) { c.OutageGrace = 0 })
	f.setErr(nil)
	_, _ = noGrace.Authenticate(ctx, "engine-a")
	f.setErr(errors.New("down"))
	clk.Advance(31 * time.Second)
	if _, err := noGrace.Authenticate(ctx, "engine-a"); !errors.Is(err, datapath.ErrAuthUnavailable) {
		t.Fatalf("without an outage grace: %v; want ErrAuthUnavailable", err)
	}
}

// TestAuthenticator_Authenticate_ConcurrentChecksShareAReview: many calls
// with one uncached token make one TokenReview.
func TestAuthenticator_Authenticate_ConcurrentChecksShareAReview(t *testing.T) {
	f := standardReviewer()
	f.block = make(chan struct{})
	a := newAuth(t, f, &clock{t: t0}, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := a.Authenticate(context.Background(), "engine-a")
			errs <- err
		}()
	}
	for f.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(f.block) // callers that come later join the review or find its answer
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("20 concurrent calls made %d TokenReviews", n)
	}
}

// TestAuthenticator_Authenticate_RefreshesInTheBackground: two thirds into
// its TTL a token in use is reviewed again while its cached answer serves, so
// a call never waits on a slow API server for a token it accepted; only one
// such review runs at a time; a refusal it brings takes effect at once; and a
// review that fails leaves the answer to its TTL.
func TestAuthenticator_Authenticate_RefreshesInTheBackground(t *testing.T) {
	f := standardReviewer()
	clk := &clock{t: t0}
	a := newAuth(t, f, clk, nil)
	ctx := context.Background()
	if _, err := a.Authenticate(ctx, "engine-a"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(19 * time.Second)
	_, _ = a.Authenticate(ctx, "engine-a")
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("a review before two thirds of the TTL: %d reviews", n)
	}
	f.block = make(chan struct{}) // the API server is slow from now on
	clk.Advance(2 * time.Second)
	answered := make(chan error, 1)
	go func() {
		_, err := a.Authenticate(ctx, "engine-a")
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("a cached yes during its refresh: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call waited on the background review")
	}
	waitFor(t, func() bool { return f.calls.Load() == 2 }, "the background review")
	for range 5 {
		if _, err := a.Authenticate(ctx, "engine-a"); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.calls.Load(); n != 2 {
		t.Fatalf("%d reviews: a second refresh started while one was under way", n)
	}
	// The token is revoked meanwhile: the refusal applies as soon as it comes.
	f.mu.Lock()
	delete(f.users, "engine-a")
	f.mu.Unlock()
	close(f.block)
	waitFor(t, func() bool {
		_, err := a.Authenticate(ctx, "engine-a")
		return errors.Is(err, datapath.ErrUnauthenticated)
	}, "the refusal of the background review, before the TTL ends")

	// A background review that fails: the answer serves until its TTL, and
	// the next call after the failure tries again.
	g := standardReviewer()
	b := newAuth(t, g, clk, nil)
	if _, err := b.Authenticate(ctx, "manager"); err != nil {
		t.Fatal(err)
	}
	g.setErr(errors.New("the server is currently unable to handle the request"))
	clk.Advance(25 * time.Second)
	if _, err := b.Authenticate(ctx, "manager"); err != nil {
		t.Fatalf("within the TTL while its refresh fails: %v", err)
	}
	waitFor(t, func() bool {
		_, _ = b.Authenticate(ctx, "manager")
		return g.calls.Load() >= 3
	}, "a new refresh after a failed one")
	g.setErr(nil)
	waitFor(t, func() bool {
		_, _ = b.Authenticate(ctx, "manager")
		clk.mu.Lock()
		defer clk.mu.Unlock()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.cache {
			if e.err == nil && e.verified.Equal(clk.t) {
				return true
			}
		}
		return false
	}, "the answer renewed by a refresh that succeeds")
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("waited 5 s for %s", what)
}

func TestAuthenticator_Cache_Bounded(t *testing.T) {
	f := &fakeReviewer{users: map[string]fakeUser{}}
	for i := 0; i < 100; i++ {
		f.users[fmt.Sprintf("tok-%d", i)] = fakeUser{name: engineSA.Username(), node: fmt.Sprintf("node-%d", i), audience: vigil.DatapathTokenAudience}
	}
	a := newAuth(t, f, &clock{t: t0}, func(c *Config) { c.MaxEntries = 10 })
	for i := 0; i < 100; i++ {
		id, err := a.Authenticate(context.Background(), fmt.Sprintf("tok-%d", i))
		if err != nil || id.Node != fmt.Sprintf("node-%d", i) {
			t.Fatalf("tok-%d: %+v, %v", i, id, err)
		}
		a.mu.Lock()
		n := len(a.cache)
		a.mu.Unlock()
		if n > 10 {
			t.Fatalf("cache holds %d entries; the bound is 10", n)
		}
	}
}

func TestNew_BadConfig(t *testing.T) {
	good := Config{Reviewer: &fakeReviewer{}, Engines: []ServiceAccount{engineSA}}
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		mention string
	}{
		{"no reviewer", func(c *Config) { c.Reviewer = nil }, "no Reviewer"},
		{"no service accounts", func(c *Config) { c.Engines = nil }, "no ServiceAccount has a role"},
		{"both roles", func(c *Config) { c.Controllers = []ServiceAccount{engineSA} }, "both the controller and the engine role"},
		{"TTL too short", func(c *Config) { c.TTL = time.Millisecond }, "cache TTL 1ms"},
		{"TTL too long", func(c *Config) { c.TTL = time.Hour }, "want 1s to 10m0s"},
		{"negative grace", func(c *Config) { c.OutageGrace = -time.Second }, "outage grace -1s"},
		{"cache size", func(c *Config) { c.MaxEntries = -1 }, "cache size -1"},
	} {
		cfg := good
		tc.mod(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v; want an error mentioning %q", tc.name, err, tc.mention)
		}
	}
}

func TestParseServiceAccount_GoodAndBad(t *testing.T) {
	for _, s := range []string{"vigil-system:vigil-manager", "vigil-system/vigil-manager"} {
		sa, err := ParseServiceAccount(s)
		if err != nil || sa != managerSA || sa.Username() != "system:serviceaccount:vigil-system:vigil-manager" {
			t.Errorf("%s: %+v, %v", s, sa, err)
		}
	}
	for _, s := range []string{"", "vigil-manager", "a:b:c", "a/b:c", ":name", "ns:", "NS:name", "ns:Name_1", strings.Repeat("n", 64) + ":x"} {
		if _, err := ParseServiceAccount(s); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
			t.Errorf("%q: %v; want an error naming it", s, err)
		}
	}
	got, err := ParseServiceAccounts([]string{"vigil-system:vigil-manager,vigil-system/vigil-csi-controller", "x:y"})
	if err != nil || len(got) != 3 || got[1].Name != "vigil-csi-controller" || got[2].String() != "x:y" {
		t.Fatalf("ParseServiceAccounts: %+v, %v", got, err)
	}
}

func TestTokenExpiry_ReadsOnlyWellFormedClaims(t *testing.T) {
	if got := tokenExpiry(jwt("x", t0)); !got.Equal(t0) {
		t.Errorf("exp = %s; want %s", got, t0)
	}
	for _, tok := range []string{"opaque-token", "a.b.c", jwt("x", time.Time{}), "a." + base64.RawURLEncoding.EncodeToString([]byte(`{"exp":"soon"}`)) + ".c"} {
		if got := tokenExpiry(tok); !got.IsZero() {
			t.Errorf("%s: exp = %s; want none", tok, got)
		}
	}
}
