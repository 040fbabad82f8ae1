package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSecure_EveryResponseCarriesTheSecurityHeadersAndNoCORS(t *testing.T) {
	f := newFixture(t, nil, nil)
	for _, r := range []resp{
		f.do(t, http.MethodGet, PathSettings, "", "Origin", "https://evil.example"),
		f.do(t, http.MethodPut, PathSettings+"/dry-run", `{"value":"true"}`, "Origin", "https://evil.example"),
		f.do(t, http.MethodOptions, PathSettings, "", "Origin", "https://evil.example", "Access-Control-Request-Method", "PATCH"),
	} {
		csp := r.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("CSP %q", csp)
		}
		if r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("frame/sniff headers: %v", r.header)
		}
		for k := range r.header {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("CORS header %s", k)
			}
		}
	}
}

func TestTokenCheck_Valid(t *testing.T) {
	c := newTokenCheck("abc")
	for tok, want := range map[string]bool{"abc": true, "abd": false, "": false, "abcd": false, "ab": false} {
		if c.valid(tok) != want {
			t.Errorf("valid(%q) = %t", tok, !want)
		}
	}
	if newTokenCheck("").valid("") {
		t.Error("an empty token must never be valid")
	}
}

func TestBearerToken_FromTheHeaderOnly(t *testing.T) {
	cases := map[string]string{"Bearer abc": "abc", "bearer abc": "abc", "Basic abc": "", "Bearer ": "", "": ""}
	for h, want := range cases {
		r, _ := http.NewRequest(http.MethodGet, "/?token=abc", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		if got := BearerToken(r); got != want {
			t.Errorf("BearerToken(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	cases := map[string]bool{"127.0.0.1:9500": true, "127.1.2.3:1": true, "[::1]:9500": true, "localhost:9500": true,
		":9500": false, "0.0.0.0:9500": false, "10.0.0.1:9500": false, "[::]:1": false, "nonsense": false}
	for addr, want := range cases {
		if IsLoopback(addr) != want {
			t.Errorf("IsLoopback(%q) = %t", addr, !want)
		}
	}
}

func TestLoopbackHostOnly_RefusesOtherHosts(t *testing.T) {
	h := LoopbackHostOnly(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	cases := map[string]int{"127.0.0.1:9500": 204, "localhost:9500": 204, "[::1]:9500": 204, "127.0.0.1": 204,
		"evil.example:9500": 421, "evil.example": 421, "10.0.0.1:9500": 421, "": 421}
	for host, want := range cases {
		req := httptest.NewRequest(http.MethodGet, "/v1/settings", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %q = %d, want %d", host, rec.Code, want)
		}
	}
}
