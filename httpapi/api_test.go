package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/settings"
)

type resp struct {
	code   int
	header http.Header
	body   string
}

// do sends a request; hdr holds header pairs ("Authorization", "Bearer x", ...).
func (f *fixture) do(t testing.TB, method, path, body string, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, string(b)}
}

var auth = []string{"Authorization", "Bearer " + testToken}

func decode[T any](t testing.TB, r resp) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatalf("decode %q: %v", r.body, err)
	}
	return v
}

func errorOf(t testing.TB, r resp) ErrorBody {
	t.Helper()
	return decode[struct{ Error ErrorBody }](t, r).Error
}

func TestAPI_GetSettings_EveryDefinitionWithItsRegistryEntry(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := f.do(t, http.MethodGet, PathSettings, "")
	if r.code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", PathSettings, r.code, r.body)
	}
	list := decode[SettingsList](t, r)
	defs := settings.Definitions()
	if len(list.Settings) != len(defs) {
		t.Fatalf("%d settings, want %d", len(list.Settings), len(defs))
	}
	if r.header.Get("ETag") != list.ETag || !strings.HasPrefix(list.ETag, `"c1.`) {
		t.Errorf("ETag header %q, body %q", r.header.Get("ETag"), list.ETag)
	}
	for i, v := range list.Settings {
		d := defs[i]
		if v.Name != d.Name || v.Value != d.Default || v.Source != settings.SourceDefault ||
			v.Definition.DisplayName != d.DisplayName || v.Definition.Category != d.Category ||
			v.Definition.Description != d.Description || v.Definition.Allowed != d.Allowed() {
			t.Errorf("setting %d = %+v, want the registry's %s", i, v, d.Name)
		}
		if len(v.Definition.Choices) != len(d.Choices) {
			t.Errorf("%s: %d choices, want %d", d.Name, len(v.Definition.Choices), len(d.Choices))
		}
		for j, c := range d.Choices {
			if j < len(v.Definition.Choices) && v.Definition.Choices[j] != (ChoiceView{c.Value, c.Description}) {
				t.Errorf("%s choice %d = %+v", d.Name, j, v.Definition.Choices[j])
			}
		}
	}
	byName := map[string]SettingView{}
	for _, v := range list.Settings {
		byName[v.Name] = v
	}
	if rg := byName[settings.NameCrashLoopRestartLimit].Definition.Range; rg == nil || *rg != (RangeView{"1", "1000"}) {
		t.Errorf("int range = %+v", rg)
	}
	d := byName[settings.NameNodeDownGracePeriod].Definition
	if d.Range == nil || *d.Range != (RangeView{"0s", "10m"}) || len(d.Examples) == 0 {
		t.Errorf("duration range = %+v, examples %v", d.Range, d.Examples)
	}
	// A conditional GET with the current ETag is not sent again.
	if r2 := f.do(t, http.MethodGet, PathSettings, "", "If-None-Match", list.ETag); r2.code != http.StatusNotModified {
		t.Errorf("If-None-Match current: %d", r2.code)
	}
}

func TestAPI_GetSetting_OneWithItsETag(t *testing.T) {
	f := newFixture(t, map[string]string{settings.NameDryRun: "true"}, nil)
	r := f.do(t, http.MethodGet, PathSettings+"/"+settings.NameDryRun, "")
	v := decode[SettingView](t, r)
	if r.code != http.StatusOK || v.Value != "true" || v.Source != settings.SourceManaged || !strings.HasSuffix(v.ManagedPath, "/"+settings.NameDryRun) {
		t.Fatalf("GET dry-run = %d %+v", r.code, v)
	}
	if r.header.Get("ETag") != v.ETag {
		t.Errorf("ETag header %q, body %q", r.header.Get("ETag"), v.ETag)
	}
}

func TestAPI_GetSetting_UnknownIs404WithTheClosestName(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := f.do(t, http.MethodGet, PathSettings+"/dry-runn", "")
	e := errorOf(t, r)
	if r.code != http.StatusNotFound || e.Code != CodeUnknownSetting || e.Setting != "dry-runn" || e.Suggestion != settings.NameDryRun {
		t.Fatalf("= %d %+v", r.code, e)
	}
}

func TestAPI_PutSetting_ChangesTheValueAndRecordsWhoDidIt(t *testing.T) {
	f := newFixture(t, nil, nil)
	path := PathSettings + "/" + settings.NameNodeDownGracePeriod
	etag := decode[SettingView](t, f.do(t, http.MethodGet, path, "")).ETag
	r := f.do(t, http.MethodPut, path, `{"value": "1500ms"}`, append(auth, "If-Match", etag)...)
	v := decode[SettingView](t, r)
	if r.code != http.StatusOK || v.Value != "1.5s" || v.Source != settings.SourceStore {
		t.Fatalf("PUT = %d %s", r.code, r.body)
	}
	if got := f.set.NodeDownGracePeriod().String(); got != "1.5s" {
		t.Errorf("in force: %s", got)
	}
	if v.ETag == etag {
		t.Error("the ETag did not change with the value")
	}
	h := decode[struct{ Changes []HistoryEntry }](t, f.do(t, http.MethodGet, PathHistory, "")).Changes
	sum := sha256.Sum256([]byte(testToken))
	identity := "token:" + hex.EncodeToString(sum[:])[:8] + " from 127.0.0.1"
	if len(h) != 1 || h[0].Setting != settings.NameNodeDownGracePeriod || h[0].Old != "2s" || h[0].New != "1.5s" ||
		h[0].Source != SourceAPI || h[0].Identity != identity || h[0].OldSource != settings.SourceDefault {
		t.Fatalf("history = %+v, want the change by %s", h, identity)
	}
	// The record is the store's own: the CLI's `settings history` reads the same.
	recs, err := f.set.History(t.Context(), 1)
	if err != nil || len(recs) != 1 || recs[0].Actor != (settings.Actor{Source: settings.ActorAPI, Identity: identity}) {
		t.Fatalf("store history = %+v, %v", recs, err)
	}
	// The UI's script marks its changes.
	f.do(t, http.MethodPut, path, `{"value": "3s"}`, append(auth, HeaderClient, SourceUI)...)
	h = decode[struct{ Changes []HistoryEntry }](t, f.do(t, http.MethodGet, PathHistory+"?limit=1", "")).Changes
	if len(h) != 1 || h[0].Source != SourceUI || h[0].New != "3s" {
		t.Fatalf("history after a UI change = %+v", h)
	}
}

func TestAPI_DeleteSetting_ResetsToTheDefault(t *testing.T) {
	f := newFixture(t, nil, nil)
	path := PathSettings + "/" + settings.NameCrashLoopRestartLimit
	f.do(t, http.MethodPut, path, `{"value": "9"}`, auth...)
	r := f.do(t, http.MethodDelete, path, "", auth...)
	v := decode[SettingView](t, r)
	if r.code != http.StatusOK || v.Value != "5" || v.Source != settings.SourceDefault {
		t.Fatalf("DELETE = %d %s", r.code, r.body)
	}
}

func TestAPI_PatchSettings_AppliesEveryValueAtOnce(t *testing.T) {
	f := newFixture(t, nil, nil)
	etag := decode[SettingsList](t, f.do(t, http.MethodGet, PathSettings, "")).ETag
	r := f.do(t, http.MethodPatch, PathSettings,
		`{"values": {"node-down-pod-deletion-policy": "delete-both-statefulset-and-deployment-pod", "fast-fenced-trigger": "true"}}`,
		append(auth, "If-Match", etag)...)
	if r.code != http.StatusOK {
		t.Fatalf("PATCH = %d %s", r.code, r.body)
	}
	if f.set.NodeDownPodDeletionPolicy() != settings.PolicyDeleteBoth || !f.set.FastFencedTrigger() {
		t.Fatalf("not in force: %s %t", f.set.NodeDownPodDeletionPolicy(), f.set.FastFencedTrigger())
	}
	if got := decode[SettingsList](t, r).ETag; got == etag || got != r.header.Get("ETag") {
		t.Errorf("ETag after PATCH %q (before %q, header %q)", got, etag, r.header.Get("ETag"))
	}
	// One record per setting, in one transaction, by the API's caller.
	h := decode[struct{ Changes []HistoryEntry }](t, f.do(t, http.MethodGet, PathHistory, "")).Changes
	got := map[string]string{}
	for _, c := range h {
		if c.Source != SourceAPI || !strings.HasPrefix(c.Identity, TokenIdentityPrefix) {
			t.Errorf("record %+v: want source api and a token identity", c)
		}
		got[c.Setting] = c.New
	}
	if len(h) != 2 || got[settings.NameFastFencedTrigger] != "true" || got[settings.NameNodeDownPodDeletionPolicy] != string(settings.PolicyDeleteBoth) {
		t.Errorf("history = %+v", h)
	}
}

func TestAPI_PatchSettings_OneBadValueChangesNothing(t *testing.T) {
	f := newFixture(t, map[string]string{settings.NameDryRun: "false"}, nil)
	before := f.set.Values()
	r := f.do(t, http.MethodPatch, PathSettings,
		`{"values": {"fast-fenced-trigger": "true", "node-down-grace-period": "soon", "dry-run": "true", "no-such": "1"}}`, auth...)
	e := errorOf(t, r)
	if r.code != http.StatusNotFound || len(e.Errors) != 3 {
		t.Fatalf("= %d %s", r.code, r.body)
	}
	want := map[string]string{settings.NameDryRun: CodeManaged, settings.NameNodeDownGracePeriod: CodeInvalidValue, "no-such": CodeUnknownSetting}
	for _, sub := range e.Errors {
		if want[sub.Setting] != sub.Code {
			t.Errorf("error for %s: %s, want %s", sub.Setting, sub.Code, want[sub.Setting])
		}
	}
	if !reflect.DeepEqual(f.set.Values(), before) || historyLen(t, f.set) != 0 {
		t.Fatalf("a refused PATCH changed something: %v", f.set.Values())
	}
}

func TestAPI_PatchSettings_StaleETagNamesWhatChanged(t *testing.T) {
	f := newFixture(t, nil, nil)
	etag := decode[SettingsList](t, f.do(t, http.MethodGet, PathSettings, "")).ETag
	// Another tab (or the CLI) changes a setting in between.
	f.do(t, http.MethodPut, PathSettings+"/"+settings.NameVolumeAttachmentRecoveryPolicy, `{"value": "immediate"}`, auth...)
	before := f.set.Values()
	r := f.do(t, http.MethodPatch, PathSettings, `{"values": {"dry-run": "true"}}`, append(auth, "If-Match", etag)...)
	e := errorOf(t, r)
	if r.code != http.StatusPreconditionFailed || e.Code != CodeStale || len(e.Changed) != 1 ||
		e.Changed[0] != (ChangedSetting{settings.NameVolumeAttachmentRecoveryPolicy, "immediate", settings.SourceStore}) ||
		!strings.Contains(e.Message, "volume-attachment-recovery-policy is now immediate") {
		t.Fatalf("= %d %s", r.code, r.body)
	}
	if !reflect.DeepEqual(f.set.Values(), before) {
		t.Fatal("a stale PATCH changed something")
	}
}

func TestAPI_Reads_NeedTheTokenBeyondLoopback(t *testing.T) {
	f := newFixture(t, nil, func(c *Config) { c.TokenForReads = true })
	for _, path := range []string{PathSettings, PathSettings + "/dry-run", PathHistory, PathNodes, PathRecoveries, PathEvents} {
		if r := f.do(t, http.MethodGet, path, ""); r.code != http.StatusUnauthorized || errorOf(t, r).Code != CodeUnauthorized {
			t.Errorf("GET %s without a token = %d", path, r.code)
		}
		if r := f.do(t, http.MethodGet, path, "", "Authorization", "Bearer nope"); r.code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token = %d", path, r.code)
		}
	}
	if r := f.do(t, http.MethodGet, PathSettings, "", auth...); r.code != http.StatusOK {
		t.Errorf("GET with the token = %d", r.code)
	}
}

func TestAPI_Nodes_ListsTheSourceReport(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := f.do(t, http.MethodGet, PathNodes, "")
	rep := decode[NodesReport](t, r)
	nodes := rep.Nodes
	if r.code != http.StatusOK || len(nodes) != 2 || !nodes[0].Fenced || nodes[0].Volumes[0].Epoch != 7 ||
		*nodes[1].HeartbeatAgeSeconds != 1.5 || !strings.Contains(r.body, `"since": "2026-01-02T03:04:05Z"`) ||
		!strings.Contains(r.body, `"fencedAt": "2026-01-02T03:04:05Z"`) {
		t.Fatalf("= %d %s", r.code, r.body)
	}
	if rep.Verdicts != VerdictsController || rep.Datapath != DatapathConnected {
		t.Errorf("verdicts %q datapath %q", rep.Verdicts, rep.Datapath)
	}
}

func TestAPI_Nodes_UnavailableSourceIs503(t *testing.T) {
	f := newFixture(t, nil, func(c *Config) { c.Nodes = fakeNodes{err: ErrUnavailable}; c.Recoveries = nil })
	if r := f.do(t, http.MethodGet, PathNodes, ""); r.code != http.StatusServiceUnavailable {
		t.Errorf("nodes = %d %s", r.code, r.body)
	}
	if r := f.do(t, http.MethodGet, PathRecoveries, ""); r.code != http.StatusServiceUnavailable {
		t.Errorf("recoveries without a source = %d %s", r.code, r.body)
	}
}

func TestAPI_Recoveries_ListAndOne(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := f.do(t, http.MethodGet, PathRecoveries, "")
	list := decode[struct{ Recoveries []RecoveryView }](t, r).Recoveries
	if r.code != http.StatusOK || len(list) != 1 || list[0].TimeToRecover != "4.2s" || list[0].Record != nil || len(list[0].Steps) != 6 {
		t.Fatalf("list = %d %s", r.code, r.body)
	}
	r = f.do(t, http.MethodGet, PathRecoveries+"/node-a-1", "")
	one := decode[RecoveryView](t, r)
	if r.code != http.StatusOK || one.Record == nil || one.Record.Spec.NodeName != "node-a" {
		t.Fatalf("one = %d %s", r.code, r.body)
	}
	r = f.do(t, http.MethodGet, PathRecoveries+"/node-z-9", "")
	if r.code != http.StatusNotFound || errorOf(t, r).Code != CodeNotFound {
		t.Fatalf("unknown = %d %s", r.code, r.body)
	}
}

func TestAPI_UnknownPath_IsAJSON404(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := f.do(t, http.MethodGet, "/v1/volumes", "")
	if r.code != http.StatusNotFound || errorOf(t, r).Code != CodeNotFound {
		t.Fatalf("= %d %s", r.code, r.body)
	}
}

func TestNew_RefusesAMissingTokenOrSettings(t *testing.T) {
	if _, err := New(Config{Settings: newSettings(t, nil)}); err != ErrNoToken {
		t.Errorf("no token: %v", err)
	}
	if _, err := New(Config{Token: "x"}); err != ErrNoSettings {
		t.Errorf("no settings: %v", err)
	}
}
