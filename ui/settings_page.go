package ui

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/vigil-storage/vigil/httpapi"
	"github.com/vigil-storage/vigil/settings"
)

// historyRows is how many changes the history panel shows.
const historyRows = 20

// field is one setting on the page.
type field struct {
	httpapi.SettingView
	Control string // select, toggle, number, duration, list
	Input   string // what the control shows: the value in force, or what was submitted
	Error   string // the server's refusal, shown next to the control
	Changed string // another writer changed it meanwhile (a stale save)
	Locked  bool   // managed: read-only, names its file
	// HTML is the field already rendered (from the cache) when it shows the value
	// in force without an error; empty otherwise.
	HTML template.HTML
}

// ListLines is a list setting's items one per line (the textarea's content).
func (f field) ListLines() string { return strings.ReplaceAll(f.Input, ",", "\n") }

type group struct {
	ID, Title, Intro string
	Danger           bool
	Fields           []field
}

type settingsData struct {
	layout
	ETag       string
	DryRun     bool
	DryRunText string
	Groups     []group
	History    []httpapi.HistoryEntry
	HistoryErr string
	Saved      string // success banner
	Error      string // failure banner
	TokenError string
}

// controlOf chooses the control a setting's type calls for.
func controlOf(t settings.Type) string {
	switch t {
	case settings.TypeEnum:
		return "select"
	case settings.TypeBool:
		return "toggle"
	case settings.TypeInt:
		return "number"
	case settings.TypeDuration:
		return "duration"
	}
	return "list"
}

// groupsOf puts the danger settings first, then every category in registry order.
func groupsOf(list []httpapi.SettingView) []group {
	danger := group{ID: "danger", Title: dangerTitle, Intro: dangerIntro, Danger: true}
	var groups []group
	index := map[string]int{}
	for _, v := range list {
		f := field{SettingView: v, Control: controlOf(v.Definition.Type), Input: v.Value, Locked: v.ManagedPath != ""}
		if slices.Contains(dangerSettings, v.Name) {
			danger.Fields = append(danger.Fields, f)
			continue
		}
		c := v.Definition.Category
		i, ok := index[c]
		if !ok {
			i = len(groups)
			index[c] = i
			groups = append(groups, group{ID: slug(c), Title: c})
		}
		groups[i].Fields = append(groups[i].Fields, f)
	}
	slices.SortStableFunc(danger.Fields, func(a, b field) int {
		return slices.Index(dangerSettings, a.Name) - slices.Index(dangerSettings, b.Name)
	})
	return append([]group{danger}, groups...)
}

func slug(s string) string {
	return strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, s), "-")
}

func (u *UI) settingsData(r *http.Request) settingsData {
	list := u.api.Service().Settings()
	d := settingsData{layout: u.layout(r, "Settings", "settings"), ETag: list.ETag, Groups: groupsOf(list.Settings), DryRunText: dryRunBanner}
	for _, v := range list.Settings {
		if v.Name == settings.NameDryRun {
			d.DryRun = v.Value == "true"
		}
	}
	h, err := u.api.Service().History(r.Context(), historyRows)
	if err != nil {
		d.HistoryErr = err.Error()
	}
	d.History = h
	if n := r.URL.Query().Get("saved"); n != "" {
		d.Saved = "Saved: " + n + "."
	}
	return d
}

// fieldCacheMax bounds the rendered-field cache; it is emptied when full.
const fieldCacheMax = 256

// cachedFields fills in the HTML of every field that shows its value in force
// without an error, from a cache keyed by what the field shows (its ETag and its
// problem). A field's rendering is most of a page's cost.
func (u *UI) cachedFields(groups []group) {
	u.cacheMu.Lock()
	defer u.cacheMu.Unlock()
	if u.fieldCache == nil || len(u.fieldCache) > fieldCacheMax {
		u.fieldCache = make(map[string]template.HTML)
	}
	for gi := range groups {
		for fi := range groups[gi].Fields {
			f := &groups[gi].Fields[fi]
			if f.Error != "" || f.Changed != "" || f.Input != f.Value {
				continue
			}
			key := f.ETag + "\x00" + f.Problem
			h, ok := u.fieldCache[key]
			if !ok {
				var buf bytes.Buffer
				if err := u.pages["settings"].ExecuteTemplate(&buf, "field", *f); err != nil {
					continue // rendered in the page, where the error is reported
				}
				h = template.HTML(buf.String()) // rendered by html/template
				u.fieldCache[key] = h
			}
			f.HTML = h
		}
	}
}

func (u *UI) settingsPage(w http.ResponseWriter, r *http.Request) {
	d := u.settingsData(r)
	u.cachedFields(d.Groups)
	switch r.URL.Query().Get("partial") {
	case "history":
		u.renderTemplate(w, http.StatusOK, "settings", "history", d)
		return
	}
	u.render(w, http.StatusOK, "settings", d)
}

// saveSettings is the settings form without JavaScript: the changed values are
// applied all at once (or a single reset), with the token from the form and the
// ETag the page was rendered with. A refusal re-renders the page with the
// submitted values kept and each error next to its field.
func (u *UI) saveSettings(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, httpapi.DefaultMaxBodyBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return
	}
	token := r.PostFormValue(fieldToken)
	if token == "" {
		token = httpapi.BearerToken(r)
	}
	d := u.settingsData(r)
	submitted := submittedValues(r.PostForm, d.Groups)
	keep := func() { keepInput(d.Groups, submitted) }
	if !u.api.ValidToken(token) {
		keep()
		d.TokenError = "Saving needs the API token the manager was started with (--api-token-file, or the generated file named in its log)."
		if token != "" {
			d.TokenError = "Wrong token. " + d.TokenError
		}
		d.Error = "Nothing was saved: the API token is missing or wrong."
		u.render(w, http.StatusUnauthorized, "settings", d)
		return
	}
	r.Header.Set("Authorization", "Bearer "+token) // so the history names the token
	who := httpapi.ActorOf(r, httpapi.SourceUI)
	ifMatch := r.PostFormValue(fieldETag)
	var err error
	saved := ""
	if name := r.PostFormValue(fieldReset); name != "" {
		_, err = u.api.Service().Reset(r.Context(), name, ifMatch, who)
		saved = name + " reset to its default"
	} else {
		changed := changedValues(r.PostForm, submitted)
		if len(changed) == 0 {
			http.Redirect(w, r, PathSettings+"?saved="+url.QueryEscape("nothing had changed"), http.StatusSeeOther)
			return
		}
		_, err = u.api.Service().SetMany(r.Context(), changed, ifMatch, who)
		saved = strconv.Itoa(len(changed)) + " setting(s) changed"
	}
	if err == nil {
		http.Redirect(w, r, PathSettings+"?saved="+url.QueryEscape(saved), http.StatusSeeOther)
		return
	}
	keep()
	status := placeErrors(&d, err)
	u.render(w, status, "settings", d)
}

// submittedValues reads each unlocked setting's control from the form: the last
// value of the name (a toggle posts "false" from a hidden input, then "true" when
// checked); a list's lines become a comma-separated list.
func submittedValues(form url.Values, groups []group) map[string]string {
	out := map[string]string{}
	for _, g := range groups {
		for _, f := range g.Fields {
			vs, ok := form[f.Name]
			if !ok || f.Locked || len(vs) == 0 {
				continue
			}
			v := vs[len(vs)-1]
			if f.Control == "list" {
				var items []string
				for _, line := range strings.Split(v, "\n") {
					if s := strings.TrimSpace(line); s != "" {
						items = append(items, s)
					}
				}
				v = strings.Join(items, ",")
			}
			out[f.Name] = v
		}
	}
	return out
}

// changedValues keeps the submitted values that differ from the value the page
// was rendered with (its hidden orig.NAME field).
func changedValues(form url.Values, submitted map[string]string) map[string]string {
	out := map[string]string{}
	for name, v := range submitted {
		if orig, ok := form[origPrefix+name]; !ok || orig[0] != v {
			out[name] = v
		}
	}
	return out
}

func keepInput(groups []group, submitted map[string]string) {
	for gi := range groups {
		for fi := range groups[gi].Fields {
			f := &groups[gi].Fields[fi]
			if v, ok := submitted[f.Name]; ok {
				f.Input = v
			}
		}
	}
}

// placeErrors puts each refusal next to its field and returns the status.
func placeErrors(d *settingsData, err error) int {
	var e *httpapi.Error
	if !errors.As(err, &e) {
		d.Error = "Nothing was saved: " + err.Error()
		return http.StatusInternalServerError
	}
	bodies := e.Body.Errors
	if len(bodies) == 0 {
		bodies = []httpapi.ErrorBody{e.Body}
	}
	byName := map[string]*field{}
	for gi := range d.Groups {
		for fi := range d.Groups[gi].Fields {
			byName[d.Groups[gi].Fields[fi].Name] = &d.Groups[gi].Fields[fi]
		}
	}
	for _, b := range bodies {
		if f, ok := byName[b.Setting]; ok {
			f.Error = b.Message
		}
	}
	for _, c := range e.Body.Changed {
		if f, ok := byName[c.Name]; ok {
			f.Changed = fmt.Sprintf("Changed elsewhere while you edited: now %q (%s).", c.Value, c.Source)
		}
	}
	d.Error = "Nothing was saved: " + e.Body.Message
	return e.Body.Status
}
