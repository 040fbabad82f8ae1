package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
)

// Secure wraps the manager's whole mux: every response carries the security
// headers (CSP without inline scripts, frame denial, no sniffing, no referrer)
// and none carries CORS headers, so no other origin can read a response.
func Secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", ContentSecurityPolicy)
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		hd.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// tokenCheck compares bearer tokens in constant time (of their digests, so the
// length of the token does not leak either).
type tokenCheck struct{ digest [32]byte }

func newTokenCheck(token string) tokenCheck { return tokenCheck{digest: sha256.Sum256([]byte(token))} }

func (t tokenCheck) valid(given string) bool {
	d := sha256.Sum256([]byte(given))
	return given != "" && subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1
}

// fingerprintOf names a token in the history without revealing it.
func fingerprintOf(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:4])
}

// BearerToken returns the token of an Authorization: Bearer header, "" if none.
func BearerToken(r *http.Request) string {
	h := r.Header.Get(headerAuth)
	if len(h) > len(bearerPrefix) && strings.EqualFold(h[:len(bearerPrefix)], bearerPrefix) {
		return strings.TrimSpace(h[len(bearerPrefix):])
	}
	return ""
}

// ValidToken reports whether token is the API token.
func (a *API) ValidToken(token string) bool { return a.token.valid(token) }

// TokenForReads reports whether reads need the token too (a non-loopback listener).
func (a *API) TokenForReads() bool { return a.cfg.TokenForReads }

// authorize checks the token of a request: writes always need it, reads when
// TokenForReads. It writes the 401 itself and returns false.
func (a *API) authorize(w http.ResponseWriter, r *http.Request, write bool) bool {
	if !write && !a.cfg.TokenForReads {
		return true
	}
	tok := BearerToken(r)
	if a.token.valid(tok) {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="vigil-manager"`)
	what := "changing settings"
	if !write {
		what = "reading from this address (the manager listens beyond loopback)"
	}
	msg := "no token: " + what + " needs the API token in an Authorization: Bearer header (see --api-token-file; a generated token's file is named in the manager's log)"
	if tok != "" {
		msg = "wrong token: " + what + " needs the API token the manager was started with (--api-token-file, or the generated file named in its log)"
	}
	writeError(w, apiError(http.StatusUnauthorized, CodeUnauthorized, "%s", msg))
	return false
}

// ActorOf says who makes a request's change: source (SourceUI or SourceAPI),
// and as identity the bearer token's fingerprint and the caller's IP address,
// e.g. "token:9f86d081 from 127.0.0.1" (see TokenIdentityPrefix).
func ActorOf(r *http.Request, source string) Actor {
	id := TokenIdentityPrefix + fingerprintOf(BearerToken(r))
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		id += " from " + host
	}
	return Actor{Source: source, Identity: id}
}

func sourceOf(r *http.Request) string {
	if r.Header.Get(HeaderClient) == SourceUI {
		return SourceUI
	}
	return SourceAPI
}

// IsLoopback reports whether a listen address (HOST:PORT) binds loopback only:
// 127.0.0.0/8, ::1 or "localhost". An empty host (all interfaces) is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoopbackHostOnly refuses requests whose Host is not a loopback name or
// address (421). With reads open on loopback, this keeps a web page elsewhere
// from reading the API through a DNS name rebound to 127.0.0.1.
func LoopbackHostOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			writeError(w, apiError(http.StatusMisdirectedRequest, CodeBadRequest,
				"Host %q: this manager listens on loopback and answers only to localhost, 127.0.0.1 or [::1]", r.Host))
			return
		}
		h.ServeHTTP(w, r)
	})
}
