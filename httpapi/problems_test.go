package httpapi

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/settings"
)

// A managed value refused at startup blocks acting: GET /v1/settings says so,
// naming the file, the value and what is allowed; fixing the file clears it,
// tells open streams with a "problems" event, and changes the list's ETag so a
// conditional GET does not keep the old banner.
func TestAPI_GetSettings_NamesWhatBlocksActing(t *testing.T) {
	f := newFixture(t, map[string]string{settings.NameDryRun: "ture"}, nil)
	events := openStream(t, f)
	next(t, events, EventHello)

	r := f.do(t, http.MethodGet, PathSettings, "")
	list := decode[SettingsList](t, r)
	path := ""
	for _, v := range list.Settings {
		if v.Name == settings.NameDryRun {
			path = v.ManagedPath
		}
	}
	if list.ActBlocked == "" || !strings.Contains(list.ActBlocked, "ture") || !strings.Contains(list.ActBlocked, settings.NameDryRun) {
		t.Fatalf("actBlocked = %q, want the refused value named", list.ActBlocked)
	}
	if len(list.Problems) != 1 {
		t.Fatalf("problems = %+v", list.Problems)
	}
	p := list.Problems[0]
	if !p.Blocking || p.Value != "ture" || p.Setting != settings.NameDryRun || p.Path == "" || p.Path != path || !strings.Contains(p.Allowed, "true") {
		t.Fatalf("problem = %+v, want dry-run's file %s, the value and what is allowed", p, path)
	}
	if !strings.Contains(list.ETag, problemsMark) || r.header.Get("ETag") != list.ETag {
		t.Errorf("ETag %q (header %q): want the problems' mark", list.ETag, r.header.Get("ETag"))
	}
	// The ETag with the problems' mark is a good If-Match: problems never make it stale.
	if r := f.do(t, http.MethodPatch, PathSettings, `{"values": {"node-down-grace-period": "3s"}}`, append(auth, "If-Match", list.ETag)...); r.code != http.StatusOK {
		t.Fatalf("PATCH with the ETag of a list with problems = %d %s", r.code, r.body)
	}
	etag := decode[SettingsList](t, f.do(t, http.MethodGet, PathSettings, "")).ETag

	must(t, os.WriteFile(path, []byte("true\n"), 0o600))
	ev := next(t, events, EventProblems)
	var pv ProblemsView
	if err := json.Unmarshal([]byte(ev.data), &pv); err != nil || pv.ActBlocked != "" || len(pv.Problems) != 0 {
		t.Fatalf("problems event = %s (%v), want none left", ev.data, err)
	}
	r = f.do(t, http.MethodGet, PathSettings, "", "If-None-Match", etag)
	if r.code != http.StatusOK || decode[SettingsList](t, r).ActBlocked != "" {
		t.Fatalf("conditional GET after the fix = %d %s", r.code, r.body)
	}
}

// A file in the overlay that names no setting blocks acting too, and is named.
func TestAPI_GetSettings_NamesAnOverlayFileOfNoSetting(t *testing.T) {
	f := newFixture(t, map[string]string{"dry-runn": "true"}, nil)
	list := decode[SettingsList](t, f.do(t, http.MethodGet, PathSettings, ""))
	if len(list.Problems) != 1 || list.Problems[0].Setting != "" || !strings.HasSuffix(list.Problems[0].Path, string(filepath.Separator)+"dry-runn") ||
		!strings.Contains(list.ActBlocked, "dry-runn") {
		t.Fatalf("problems %+v, actBlocked %q", list.Problems, list.ActBlocked)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
