// Package httpapi is vigil-manager's REST API: JSON under /v1/ for the settings
// (read, change one, reset one, change several all or nothing, history), the
// nodes, the NodeRecovery records and a Server-Sent Events stream of changes to
// all three. Package ui renders the same views as pages and uses this package's
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
// # What it leaves to others
//
// It consumes three small interfaces it declares: SettingsService (implemented by
// *settings.Settings: validation, stores, history and the managed overlay stay in
// package settings, the one registry), NodesSource (the manager's view of node
// verdicts, fencing and grants) and RecoveriesSource (the NodeRecovery informer).
// Node and recovery changes reach the event stream through Hub.Publish, called by
// whoever watches them; settings changes come from SettingsService.Subscribe.
//
// The tests in this package (httptest, the real *settings.Settings on the memory
// store, wrapped to record history until package settings records it itself)
// cover every endpoint and every refused input; BenchmarkAPI_100Clients is the
// load test; the browser tests in test/e2e drive the pages against the real
// binary.
package httpapi
