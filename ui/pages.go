package ui

import (
	"errors"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"regexp"
	"time"

	"github.com/vigil-storage/vigil/httpapi"
)

type nodesData struct {
	layout
	httpapi.NodesReport
	Error string
}

// NoDatapath: the manager runs without a datapath, so the storage columns are empty.
func (d nodesData) NoDatapath() bool { return d.Datapath == httpapi.DatapathNone }

func (u *UI) nodesPage(w http.ResponseWriter, r *http.Request) {
	d := nodesData{layout: u.layout(r, "Nodes", "nodes")}
	rep, err := u.api.Nodes(r.Context())
	if err != nil {
		d.Error = "The nodes cannot be shown yet: " + err.Error()
	}
	d.NodesReport = rep
	if partial(r) {
		u.renderPartial(w, "nodes", d)
		return
	}
	u.render(w, http.StatusOK, "nodes", d)
}

type recoveryRow struct {
	httpapi.RecoveryView
	SVG template.HTML
}

type recoveriesData struct {
	layout
	Recoveries []recoveryRow
	Error      string
}

func (u *UI) recoveriesPage(w http.ResponseWriter, r *http.Request) {
	d := recoveriesData{layout: u.layout(r, "Recoveries", "recoveries")}
	rs, err := u.api.Recoveries(r.Context())
	if err != nil {
		d.Error = "The recoveries cannot be shown yet: " + err.Error()
	}
	for _, v := range rs {
		d.Recoveries = append(d.Recoveries, recoveryRow{RecoveryView: v, SVG: TimelineSVG(v)})
	}
	if partial(r) {
		u.renderPartial(w, "recoveries", d)
		return
	}
	u.render(w, http.StatusOK, "recoveries", d)
}

type recoveryData struct {
	layout
	R     recoveryRow
	Error string
}

func (u *UI) recoveryPage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	d := recoveryData{layout: u.layout(r, "Recovery "+name, "recoveries")}
	v, err := u.api.Recovery(r.Context(), name)
	status := http.StatusOK
	switch {
	case errors.Is(err, httpapi.ErrNotFound):
		status, d.Error = http.StatusNotFound, fmt.Sprintf("There is no recovery named %q.", name)
	case err != nil:
		status, d.Error = http.StatusServiceUnavailable, "The recovery cannot be shown yet: "+err.Error()
	default:
		d.R = recoveryRow{RecoveryView: v, SVG: TimelineSVG(v)}
	}
	if partial(r) && err == nil {
		u.renderPartial(w, "recovery", d)
		return
	}
	u.render(w, status, "recovery", d)
}

func (u *UI) timelineSVG(w http.ResponseWriter, r *http.Request) {
	v, err := u.api.Recovery(r.Context(), r.PathValue("name"))
	if err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, httpapi.ErrNotFound) {
			status = http.StatusNotFound
		}
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" + string(TimelineSVG(v))))
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"age": func(now time.Time, t *time.Time) string {
		if t == nil {
			return "—"
		}
		return short(now.Sub(*t).Truncate(100*time.Millisecond)) + " ago"
	},
	"secs": func(f *float64) string {
		if f == nil {
			return "—"
		}
		return short(seconds(*f))
	},
	"clock": func(t *time.Time) string {
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"rfc3339": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"summary": summary,
	"md":      markdown,
	"when": func(rfc string) string {
		t, err := time.Parse(time.RFC3339Nano, rfc)
		if err != nil {
			return rfc
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"roleClass": func(role string) string {
		switch role {
		case httpapi.ServerLeader:
			return "ok"
		case httpapi.ServerFollower:
			return "info"
		case httpapi.ServerUnreachable:
			return "bad"
		}
		return "warn"
	},
	"verdictClass": func(v string) string {
		switch v {
		case httpapi.VerdictUp, httpapi.VerdictReady:
			return "ok"
		case httpapi.VerdictLeaving:
			return "info"
		case httpapi.VerdictSuspect:
			return "warn"
		}
		return "bad"
	},
}

var (
	mdCode   = regexp.MustCompile("`([^`]+)`")
	mdStrong = regexp.MustCompile(`\*\*([^*]+)\*\*`)
)

// markdown renders the subset of markdown the settings' descriptions use (code
// spans and bold) after escaping everything else.
func markdown(s string) template.HTML {
	out := html.EscapeString(s)
	out = mdCode.ReplaceAllString(out, "<code>$1</code>")
	out = mdStrong.ReplaceAllString(out, "<strong>$1</strong>")
	return template.HTML(out) // escaped above; only the two tags are added
}
