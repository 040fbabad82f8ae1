// Package httpapi is vigil-manager's REST API: JSON under /v1/ for the settings
// (read, change one, reset one, change several all or nothing, history, and the
// refused values that block acting), the nodes, the NodeRecovery records and a
// Server-Sent Events stream of changes to all of them. Package ui renders the same views as pages and uses this package's
// Service for its form posts, so the browser and curl go through one code path.
//
// # What it owns
//
// The HTTP contract: routes and methods (a wrong method is a JSON 405 naming the
// allowed ones), strict JSON bodies (unknown fields, trailing data and bodies over
// MaxBodyBytes are refused), the error format (ErrorBody: the setting, the value
// given and what is allowed; 400 invalid, 404 unknown with the closest name, 409
// managed with its file, 412 stale ETag naming the settings that changed), the
// ETags (fingerprints of every setting, so a 412 can say exactly what changed
// since the caller read it) and the security of the listener: writes need the
// bearer token, compared in constant time; reads need it too when the manager
// listens beyond loopback (Config.TokenForReads); every response carries a
// Content-Security-Policy without inline scripts, frame denial and no CORS
// headers, and the token is only ever read from a header (or, for the pages'
// forms, a form field), never a cookie, so there is no CSRF surface.
//
// Every change is recorded by package settings, in the store, with who made
// it: source "api", or "ui" for the pages (their script sends X-Vigil-Client:
// ui; their forms post as the UI), and as identity the token's fingerprint and
// the caller's IP address, "token:9f86d081 from 127.0.0.1": the first 8 hex
// digits of the token's SHA-256 (printf %s "$TOKEN" | sha256sum | cut -c1-8),
// never the token itself.
//
// A value the settings refused at startup, with nothing good standing in for
// it, keeps the manager from acting: GET /v1/settings names it (actBlocked and
// problems: the file or the store, the value and what is allowed), the
// "problems" event tells open streams when that changes, and the pages show it
// as a banner. The collection ETag carries a fingerprint of the problems after
// "~", so a conditional GET never keeps a banner that is gone; problems never
// make an If-Match stale.
//
// # What it leaves to others
//
// It consumes three small interfaces it declares: SettingsService (implemented by
// *settings.Settings: validation, stores, history, problems and the managed
// overlay stay in package settings, the one registry; Actor and ChangeRecord are
// its types), NodesSource (the manager's NodesReport: the controllers' verdicts,
// the datapath's heartbeats, fences and grants, the Node objects) and
// RecoveriesSource (the NodeRecovery informer). Node and recovery changes reach
// the event stream through NodesChanged and RecoveriesChanged, called by whoever
// watches them; the API sends an event only when what it would send changed
// (heartbeat ages aside: they move every moment). Settings changes come from
// SettingsService.Subscribe, problems from ProblemsChanged.
//
// The tests in this package (httptest, the real *settings.Settings on the memory
// store, so validation, history and problems are package settings' own) cover
// every endpoint and every refused input; BenchmarkAPI_100Clients is the load
// test; the browser tests in test/e2e drive the pages against the real binary.
package httpapi
