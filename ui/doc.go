// Package ui is the storage UI vigil-manager serves at /: server-rendered pages
// (html/template) for the settings, the nodes and the node recoveries, with their
// stylesheet, script and icon embedded in the binary (go:embed). There is no
// build step, no Node toolchain and no third-party JavaScript or CSS.
//
// Every page works without JavaScript: the settings form posts to the manager
// (the API token goes in a form field, never a cookie), errors are rendered next
// to their fields, and a successful save redirects back to the page. The small
// script in static/app.js adds, when it runs: live refresh from /v1/events (the
// stream is read with fetch, so the token travels in a header), inline validation
// through /v1/settings/NAME/check (the rules stay in package settings), one Save
// for every change at once (PATCH /v1/settings with If-Match), a guard against
// leaving with unsaved changes, and the token kept for the tab in sessionStorage.
//
// Every page shows a banner while a refused settings value keeps the manager
// from acting, naming the file (or the store), the value and what is allowed;
// the script updates it from the "problems" event.
//
// The nodes page shows each node's verdict and since when (the leader's
// controllers; a standby shows the Node's Ready condition and says so), its
// engine's last heartbeat at the datapath, a graceful stop, whether Vigil
// fenced it (and when) and whether it carries vigil.io/fenced, and its rows at
// the datapath with their epochs. Without a datapath those columns say so.
//
// The recoveries page draws each recovery's timeline as an SVG rendered by the
// server (timeline.go): detected → fenced → pods reaped → attachments freed →
// replacements Running → node back and clean, each with its time after detection.
//
// The pages read through package httpapi (its Service for settings, its sources
// for nodes and recoveries), so the browser and the REST API share one code path
// and one set of checks. The browser tests in test/e2e drive these pages in
// headless Chromium against the real binary.
package ui
