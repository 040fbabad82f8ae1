package httpapi

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/settings"
)

// Every refused write answers with the right status and a message that names
// what was wrong, and changes nothing: neither the values nor the history.
func TestAPI_Writes_BadInputChangesNothing(t *testing.T) {
	grace := PathSettings + "/" + settings.NameNodeDownGracePeriod
	big := `{"value": "` + strings.Repeat("x", DefaultMaxBodyBytes) + `"}`
	cases := []struct {
		name         string
		method, path string
		body         string
		hdr          []string
		noJSONType   bool
		status       int
		code, want   string
		setting      string
	}{
		{"wrong JSON type", http.MethodPut, grace, `{"value": 5}`, auth, false, 400, CodeBadRequest, "value is a JSON number, want a string", ""},
		{"not a duration", http.MethodPut, grace, `{"value": "soon"}`, auth, false, 400, CodeInvalidValue, "allowed: a duration from 0s to 10m", settings.NameNodeDownGracePeriod},
		{"out of range", http.MethodPut, PathSettings + "/crash-loop-restart-limit", `{"value": "0"}`, auth, false, 400, CodeInvalidValue, "an integer from 1 to 1000", settings.NameCrashLoopRestartLimit},
		{"not a choice", http.MethodPut, PathSettings + "/node-down-pod-deletion-policy", `{"value": "delete-all"}`, auth, false, 400, CodeInvalidValue, "one of do-nothing", settings.NameNodeDownPodDeletionPolicy},
		{"unknown name", http.MethodPut, PathSettings + "/dryrun", `{"value": "true"}`, auth, false, 404, CodeUnknownSetting, "did you mean dry-run", "dryrun"},
		{"managed", http.MethodPut, PathSettings + "/dry-run", `{"value": "true"}`, auth, false, 409, CodeManaged, "managed by the overlay file", settings.NameDryRun},
		{"managed reset", http.MethodDelete, PathSettings + "/dry-run", ``, auth, false, 409, CodeManaged, "overlay file", settings.NameDryRun},
		{"unknown reset", http.MethodDelete, PathSettings + "/nope", ``, auth, false, 404, CodeUnknownSetting, "unknown setting", "nope"},
		{"stale ETag", http.MethodPut, grace, `{"value": "3s"}`, append(auth, "If-Match", `"00000000"`), false, 412, CodeStale, "node-down-grace-period is now 2s", settings.NameNodeDownGracePeriod},
		{"foreign ETag", http.MethodPut, grace, `{"value": "3s"}`, append(auth, "If-Match", `"abc"`), false, 400, CodeBadETag, "not an ETag of these settings", ""},
		{"no token", http.MethodPut, grace, `{"value": "3s"}`, nil, false, 401, CodeUnauthorized, "no token", ""},
		{"wrong token", http.MethodPut, grace, `{"value": "3s"}`, []string{"Authorization", "Bearer guess"}, false, 401, CodeUnauthorized, "wrong token", ""},
		{"token in a cookie", http.MethodPut, grace, `{"value": "3s"}`, []string{"Cookie", "token=" + testToken}, false, 401, CodeUnauthorized, "no token", ""},
		{"oversized body", http.MethodPut, grace, big, auth, false, 413, CodeTooLarge, "larger than", ""},
		{"unknown field", http.MethodPut, grace, `{"value": "3s", "force": true}`, auth, false, 400, CodeBadRequest, `unknown field "force"`, ""},
		{"missing value", http.MethodPut, grace, `{}`, auth, false, 400, CodeBadRequest, `"value" is missing`, ""},
		{"trailing data", http.MethodPut, grace, `{"value": "3s"} {"value": "4s"}`, auth, false, 400, CodeBadRequest, "trailing data", ""},
		{"malformed JSON", http.MethodPut, grace, `{"value": `, auth, false, 400, CodeBadRequest, "JSON", ""},
		{"not JSON", http.MethodPut, grace, `value=3s`, auth, true, 415, CodeUnsupportedMedia, "application/json", ""},
		{"wrong method", http.MethodPost, grace, `{"value": "3s"}`, auth, false, 405, CodeMethod, "allowed: GET, HEAD, PUT, DELETE", ""},
		{"wrong method on the list", http.MethodPost, PathSettings, `{}`, auth, false, 405, CodeMethod, "allowed: GET, HEAD, PATCH", ""},
		{"PATCH empty", http.MethodPatch, PathSettings, `{"values": {}}`, auth, false, 400, CodeBadRequest, "no settings given", ""},
		{"PATCH null", http.MethodPatch, PathSettings, `{"values": {"dry-run": null}}`, auth, false, 400, CodeBadRequest, "is null", ""},
		{"PATCH flat", http.MethodPatch, PathSettings, `{"dry-run": "true"}`, auth, false, 400, CodeBadRequest, `unknown field "dry-run"`, ""},
		{"PATCH wrong type", http.MethodPatch, PathSettings, `{"values": {"crash-loop-restart-limit": 3}}`, auth, false, 400, CodeBadRequest, "JSON number", ""},
		{"PATCH no token", http.MethodPatch, PathSettings, `{"values": {"fast-fenced-trigger": "true"}}`, nil, false, 401, CodeUnauthorized, "no token", ""},
		{"PATCH oversized", http.MethodPatch, PathSettings, `{"values": {"x": "` + strings.Repeat("y", DefaultMaxBodyBytes) + `"}}`, auth, false, 413, CodeTooLarge, "larger than", ""},
		{"history bad limit", http.MethodGet, PathHistory + "?limit=0", ``, nil, false, 400, CodeBadRequest, "want an integer from 1 to 500", ""},
		{"history POST", http.MethodPost, PathHistory, `{}`, auth, false, 405, CodeMethod, "allowed: GET", ""},
		{"events POST", http.MethodPost, PathEvents, `{}`, auth, false, 405, CodeMethod, "allowed: GET", ""},
		{"nodes DELETE", http.MethodDelete, PathNodes, ``, auth, false, 405, CodeMethod, "allowed: GET", ""},
		{"recovery PUT", http.MethodPut, PathRecoveries + "/x", `{}`, auth, false, 405, CodeMethod, "allowed: GET", ""},
		{"check without value", http.MethodGet, PathSettings + "/dry-run/check", ``, nil, false, 400, CodeBadRequest, "missing ?value=", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]string{settings.NameDryRun: "false"}, nil)
			before := f.set.Values()
			hdr := tc.hdr
			if tc.noJSONType {
				hdr = append(append([]string{}, hdr...), "Content-Type", "application/x-www-form-urlencoded")
			}
			r := f.do(t, tc.method, tc.path, tc.body, hdr...)
			e := errorOf(t, r)
			if r.code != tc.status || e.Status != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.want) || e.Setting != tc.setting {
				t.Fatalf("= %d %+v\nwant %d %s mentioning %q (setting %q)", r.code, e, tc.status, tc.code, tc.want, tc.setting)
			}
			if r.header.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Errorf("Content-Type %q", r.header.Get("Content-Type"))
			}
			if !reflect.DeepEqual(f.set.Values(), before) || historyLen(t, f.set) != 0 {
				t.Fatalf("a refused request changed something: %v", f.set.Values())
			}
		})
	}
}

// A value error carries the value given and what is allowed, so the UI can put
// it next to the field.
func TestAPI_PutSetting_InvalidNamesValueAndAllowed(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := f.do(t, http.MethodPut, PathSettings+"/"+settings.NameDatapathConnectivityLossThreshold, `{"value": "10ms"}`, auth...)
	e := errorOf(t, r)
	if e.Value != "10ms" || e.Allowed != "a duration from 1s to 5m (e.g. 500ms, 15s, 2m)" || e.Setting != settings.NameDatapathConnectivityLossThreshold {
		t.Fatalf("%+v", e)
	}
}

func TestAPI_Check_ValidatesWithoutWriting(t *testing.T) {
	f := newFixture(t, nil, nil)
	r := f.do(t, http.MethodGet, PathSettings+"/node-down-grace-period/check?value=120s", "")
	if c := decode[CheckResult](t, r); r.code != 200 || c.Canonical != "2m" {
		t.Fatalf("= %d %s", r.code, r.body)
	}
	r = f.do(t, http.MethodGet, PathSettings+"/node-down-grace-period/check?value=11m", "")
	if e := errorOf(t, r); r.code != 400 || e.Code != CodeInvalidValue || !strings.Contains(e.Message, "out of range") {
		t.Fatalf("= %d %s", r.code, r.body)
	}
	if historyLen(t, f.set) != 0 || f.set.NodeDownGracePeriod().String() != "2s" {
		t.Fatal("check wrote something")
	}
}
