package ui

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/httpapi"
	"github.com/vigil-storage/vigil/settings"
)

func (f *fixture) get(t testing.TB, path string) (int, string) {
	t.Helper()
	res, err := f.srv.Client().Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// post sends the settings form as a browser without JavaScript does.
func (f *fixture) post(t testing.TB, path string, form url.Values) (int, string, string) {
	t.Helper()
	c := *f.srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := c.PostForm(f.srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Location"), string(b)
}

func mustContain(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("page lacks %q", w)
		}
	}
}

func TestUI_SettingsPage_EverySettingWithItsControl(t *testing.T) {
	f := newFixture(t, map[string]string{settings.NameCrashLoopPodDeletion: "true"}, false)
	code, body := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d", code)
	}
	for _, d := range settings.Definitions() {
		mustContain(t, body, `id="setting-`+d.Name+`"`, d.DisplayName)
	}
	mustContain(t, body,
		`<select id="in-node-down-pod-deletion-policy"`, // enum: a select
		`role="switch" id="in-fast-fenced-trigger"`,     // bool: a toggle
		`type="number" id="in-crash-loop-restart-limit" name="crash-loop-restart-limit" value="5" min="1" max="1000"`,
		`list="examples-node-down-grace-period"`, `<code>500ms</code>`, // duration with examples
		`<textarea id="in-extra-protected-provisioners"`,                      // list
		"Force-delete both StatefulSet and Deployment pods on the down node.", // choice descriptions
		dangerTitle, "Force deletion removes a pod", // the Danger group
		`class="badge source-managed"`, "Locked by the managed file", // the managed setting
		`id="dry-run-banner" role="status" hidden>`, // dry run off: no banner
		"No change recorded yet.",
	)
	if !strings.Contains(body, `id="in-crash-loop-pod-deletion" name="crash-loop-pod-deletion" value="true" checked aria-describedby="desc-crash-loop-pod-deletion help-crash-loop-pod-deletion err-crash-loop-pod-deletion" disabled`) {
		t.Error("the managed toggle is not disabled")
	}
	danger := body[strings.Index(body, `id="group-danger"`):strings.Index(body, `id="group-node-failure"`)]
	for _, n := range dangerSettings {
		if !strings.Contains(danger, `id="setting-`+n+`"`) {
			t.Errorf("%s is not in the Danger group", n)
		}
	}
}

func TestUI_SettingsPage_DryRunBannerAndProblem(t *testing.T) {
	f := newFixture(t, map[string]string{settings.NameDryRun: "true", settings.NameNodeDownGracePeriod: "forever"}, false)
	_, body := f.get(t, "/")
	mustContain(t, body, `<div class="banner warn" id="dry-run-banner" role="status"><strong>Dry run.</strong> `+dryRunBanner,
		"Refused value:", `setting node-down-grace-period: invalid value &#34;forever&#34;`)
}

// A value refused at startup blocks acting: every page says so at the top,
// naming the file, the value and what is allowed.
func TestUI_Pages_BlockedBannerNamesTheRefusedValue(t *testing.T) {
	f := newFixture(t, map[string]string{settings.NameNodeDownGracePeriod: "forever"}, false)
	var path string
	for _, p := range f.set.Problems() {
		path = p.Path
	}
	for _, p := range []string{"/", PathNodes, PathRecoveries, PathRecoveries + "/node-a-20260102-030000"} {
		_, body := f.get(t, p)
		mustContain(t, body, `<div class="banner bad blocked" id="blocked-banner" role="alert">`, "Vigil is not acting.",
			"<li>overlay file "+path+" refused: setting node-down-grace-period: invalid value &#34;forever&#34;",
			"allowed: a duration from 0s to 10m")
	}
	clean := newFixture(t, nil, false)
	_, body := clean.get(t, PathNodes)
	mustContain(t, body, `id="blocked-banner" role="alert" hidden>`)
}

func formOf(t *testing.T, f *fixture, changes map[string]string) url.Values {
	t.Helper()
	list := f.ui.api.Service().Settings()
	form := url.Values{fieldETag: {list.ETag}, fieldToken: {testToken}}
	for _, v := range list.Settings {
		if v.ManagedPath != "" {
			continue
		}
		form.Set(origPrefix+v.Name, v.Value)
		form.Set(v.Name, v.Value)
	}
	for k, v := range changes {
		form.Set(k, v)
	}
	return form
}

func TestUI_SaveSettings_TwoAtOnceWithoutJavaScript(t *testing.T) {
	f := newFixture(t, nil, false)
	form := formOf(t, f, map[string]string{settings.NameNodeDownPodDeletionPolicy: "delete-statefulset-pod",
		settings.NameExtraProtectedProvisioners: "ebs.csi.aws.com\n  rbd.csi.ceph.com \n"})
	// A toggle posts its hidden "false" and, when checked, "true" after it.
	form[settings.NameFastFencedTrigger] = []string{"false", "true"}
	code, loc, body := f.post(t, pathSave, form)
	if code != http.StatusSeeOther || !strings.HasPrefix(loc, "/?saved=") {
		t.Fatalf("POST = %d %s %s", code, loc, body)
	}
	if f.set.NodeDownPodDeletionPolicy() != settings.PolicyDeleteStatefulSetPod || !f.set.FastFencedTrigger() ||
		strings.Join(f.set.ExtraProtectedProvisioners(), ",") != "ebs.csi.aws.com,rbd.csi.ceph.com" {
		t.Fatalf("not in force: %v", f.set.Values())
	}
	h, _ := f.set.History(t.Context(), 10)
	if len(h) != 3 || h[0].Actor.Source != httpapi.SourceUI || !strings.HasPrefix(h[0].Actor.Identity, httpapi.TokenIdentityPrefix) {
		t.Fatalf("history = %+v", h)
	}
	_, page := f.get(t, loc)
	mustContain(t, page, "Saved: 3 setting(s) changed.", "by ui")
}

func TestUI_SaveSettings_InvalidDurationInlineAndNothingChanged(t *testing.T) {
	f := newFixture(t, nil, false)
	before := f.set.Values()
	form := formOf(t, f, map[string]string{settings.NameNodeDownGracePeriod: "5 minutes", settings.NameDryRun: "true"})
	code, _, body := f.post(t, pathSave, form)
	if code != http.StatusBadRequest {
		t.Fatalf("POST = %d", code)
	}
	mustContain(t, body, `id="err-node-down-grace-period" data-role="error">setting node-down-grace-period: invalid value &#34;5 minutes&#34;`,
		`value="5 minutes"`, "Nothing was saved")
	if f.set.DryRun() || f.set.Values()[settings.NameNodeDownGracePeriod] != before[settings.NameNodeDownGracePeriod] {
		t.Fatal("a refused form changed something")
	}
}

func TestUI_SaveSettings_NeedsTheToken(t *testing.T) {
	f := newFixture(t, nil, false)
	for _, tok := range []string{"", "wrong"} {
		form := formOf(t, f, map[string]string{settings.NameDryRun: "true"})
		form.Set(fieldToken, tok)
		code, _, body := f.post(t, pathSave, form)
		if code != http.StatusUnauthorized || f.set.DryRun() {
			t.Fatalf("token %q: %d, dry-run %t", tok, code, f.set.DryRun())
		}
		mustContain(t, body, `id="token-error">`, `value="true" checked`)
	}
}

func TestUI_SaveSettings_StaleFormNamesTheChange(t *testing.T) {
	f := newFixture(t, nil, false)
	form := formOf(t, f, map[string]string{settings.NameDryRun: "true"})
	_ = f.set.Set(t.Context(), settings.NameCrashLoopRestartLimit, "9") // another tab, the CLI
	code, _, body := f.post(t, pathSave, form)
	if code != http.StatusPreconditionFailed || f.set.DryRun() {
		t.Fatalf("POST = %d", code)
	}
	mustContain(t, body, "Changed elsewhere while you edited: now &#34;9&#34; (store).")
}

func TestUI_SaveSettings_ResetOne(t *testing.T) {
	f := newFixture(t, nil, false)
	_ = f.set.Set(t.Context(), settings.NameCrashLoopRestartLimit, "9")
	form := formOf(t, f, nil)
	form.Set(fieldReset, settings.NameCrashLoopRestartLimit)
	if code, _, _ := f.post(t, pathSave, form); code != http.StatusSeeOther || f.set.CrashLoopRestartLimit() != 5 {
		t.Fatalf("reset = %d, limit %d", code, f.set.CrashLoopRestartLimit())
	}
}

func TestUI_NodesPage(t *testing.T) {
	f := newFixture(t, nil, false)
	code, body := f.get(t, PathNodes)
	if code != http.StatusOK {
		t.Fatalf("= %d", code)
	}
	mustContain(t, body, `id="node-node-a"`, `<span class="pill bad" data-role="verdict">down</span>`, "ready-unknown", "1m30s ago",
		"vigil.io/fenced", "epoch 8", "0.80s ago", `data-partial="/nodes?partial=1"`,
		"1m30s ago</td>", // node-a's silent engine: heartbeat age
		`<span class="pill bad">fenced</span> <time class="muted" datetime="2026-01-02T03:00:00Z">1m29.6s ago</time>`,
		`<span class="pill info" data-role="verdict">leaving</span>`, "none since the datapath started",
		"Verdicts: the manager's controllers", "the datapath, polled every second",
		`<span class="pill bad" data-role="server-role">unreachable</span> <code>dp-a</code> <span class="muted">10.0.0.1:9600</span><br><span class="small">does not answer: the volumes it holds are unavailable</span>`,
		`<span class="pill ok" data-role="server-role">leader</span> <code>dp-b</code>`,
		`<span class="pill info" data-role="server-role">follower</span> <code>dp-c</code> <span class="muted">10.0.0.3:9600</span><br><span class="muted small">leader heard <time datetime="2026-01-02T03:01:29Z">1.0s ago</time></span>`,
		`<td data-role="server"><span class="muted">none</span></td>`)
	_, part := f.get(t, PathNodes+"?partial=1")
	if strings.Contains(part, "<html") || !strings.Contains(part, `id="node-node-b"`) {
		t.Fatalf("partial = %s", part)
	}
}

func TestUI_RecoveriesPage_RowAndTimeline(t *testing.T) {
	f := newFixture(t, nil, false)
	_, body := f.get(t, PathRecoveries)
	mustContain(t, body, `id="recovery-node-a-20260102-030000"`, "<strong>4.21s</strong>", `<svg xmlns="http://www.w3.org/2000/svg" class="timeline"`,
		"Recovery of node node-a: recovered in 4.21s", "Fenced (1)", "at +0.35s", ">Node<", ">back and clean<", "at +1m11.2s", ">reaping 1.9s<")
	code, one := f.get(t, PathRecoveries+"/node-a-20260102-030000")
	if code != http.StatusOK {
		t.Fatalf("one = %d", code)
	}
	mustContain(t, one, "db/pg-0 of StatefulSet/pg", "<code>vol-1</code> (pv-db-0) → epoch 8")
	if code, _ := f.get(t, PathRecoveries+"/nope"); code != http.StatusNotFound {
		t.Errorf("unknown recovery = %d", code)
	}
	code, svg := f.get(t, PathRecoveries+"/node-a-20260102-030000/timeline.svg")
	if code != http.StatusOK || !strings.HasPrefix(svg, "<?xml") || strings.Count(svg, "<circle") != 6 {
		t.Fatalf("svg = %d %s", code, svg)
	}
}

func TestUI_Pages_NeedTheTokenBeyondLoopback(t *testing.T) {
	f := newFixture(t, nil, true)
	for _, p := range []string{"/", PathNodes, PathRecoveries} {
		code, body := f.get(t, p)
		if code != http.StatusUnauthorized || !strings.Contains(body, `id="token-form"`) || strings.Contains(body, "node-a") {
			t.Errorf("GET %s without a token = %d", p, code)
		}
		code, _, body = f.post(t, p, url.Values{fieldToken: {testToken}})
		if code != http.StatusOK || strings.Contains(body, `id="token-form"`) {
			t.Errorf("POST %s with the token = %d", p, code)
		}
		code, _, body = f.post(t, p, url.Values{fieldToken: {"nope"}})
		if code != http.StatusUnauthorized || !strings.Contains(body, "Wrong token") {
			t.Errorf("POST %s with a wrong token = %d", p, code)
		}
	}
}

func TestUI_Static_NoInlineScript(t *testing.T) {
	f := newFixture(t, nil, false)
	for _, p := range []string{"/", PathNodes, PathRecoveries, PathRecoveries + "/node-a-20260102-030000"} {
		_, body := f.get(t, p)
		if strings.Contains(body, "<script>") || strings.Contains(body, " style=") || strings.Contains(body, "onclick") {
			t.Errorf("%s has inline script or style", p)
		}
	}
	for _, p := range []string{"/static/app.js", "/static/app.css", "/static/icon.svg"} {
		if code, _ := f.get(t, p); code != http.StatusOK {
			t.Errorf("%s = %d", p, code)
		}
	}
}
