package httpapi

import "github.com/vigil-storage/vigil/settings"

// Every externally visible string of the API in one place: paths, headers, event
// names and the security headers' values.

// Paths of the API.
const (
	PathSettings   = "/v1/settings"
	PathHistory    = "/v1/settings/history"
	PathNodes      = "/v1/nodes"
	PathRecoveries = "/v1/recoveries"
	PathEvents     = "/v1/events"
)

// Headers.
const (
	// HeaderClient set to "ui" by the pages' script records a change as made
	// through the UI (source "ui"); anything else is "api".
	HeaderClient = "X-Vigil-Client"
	headerAuth   = "Authorization"
	bearerPrefix = "Bearer "
)

// Sources of a change as the history records them (package settings' words).
const (
	SourceUI  = settings.ActorUI
	SourceAPI = settings.ActorAPI
)

// TokenIdentityPrefix starts the identity the history records for a change
// made with the API token: "token:" and the first 8 hex digits of the token's
// SHA-256 (printf %s "$TOKEN" | sha256sum | cut -c1-8), then " from " and the
// caller's IP address. The token itself is never recorded.
const TokenIdentityPrefix = "token:"

// Event names of the /v1/events stream.
const (
	EventHello      = "hello"      // first event of every stream: {"etag": collection ETag}
	EventSettings   = "settings"   // a setting's value in force or source changed: {"setting": SettingView, "etag": ...}
	EventNodes      = "nodes"      // the nodes changed (heartbeat ages aside): NodesReport
	EventRecoveries = "recoveries" // a recovery changed: [RecoveryView] without records
	EventProblems   = "problems"   // the refused values or the blocking changed: ProblemsView
)

// ContentSecurityPolicy allows only the manager's own scripts, styles and
// images: no inline script, no framing, forms post only to the manager.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// DefaultMaxBodyBytes bounds request bodies unless Config says otherwise.
const DefaultMaxBodyBytes = 64 << 10
