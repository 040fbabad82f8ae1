package ui

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/httpapi"
	"github.com/vigil-storage/vigil/settings"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures New.
type Config struct {
	API *httpapi.API // required: the settings service, sources and token check
	Log *slog.Logger
	// Now is the clock (time.Now when nil), so pages render ages reproducibly in tests.
	Now func() time.Time
}

// UI serves the pages.
type UI struct {
	api   *httpapi.API
	log   *slog.Logger
	now   func() time.Time
	pages map[string]*template.Template

	cacheMu    sync.Mutex
	fieldCache map[string]template.HTML // see cachedFields
}

// ErrNoAPI is returned by New without Config.API.
var ErrNoAPI = errors.New("ui: Config.API is required")

// New parses the embedded templates.
func New(cfg Config) (*UI, error) {
	if cfg.API == nil {
		return nil, ErrNoAPI
	}
	u := &UI{api: cfg.API, log: cfg.Log, now: cfg.Now, pages: make(map[string]*template.Template)}
	if u.log == nil {
		u.log = slog.Default()
	}
	if u.now == nil {
		u.now = time.Now
	}
	for _, page := range []string{"settings", "nodes", "recoveries", "recovery", "token"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", page, err)
		}
		u.pages[page] = t
	}
	return u, nil
}

// Register adds the pages and static files to mux.
func (u *UI) Register(mux *http.ServeMux) {
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix(PathStatic, http.FileServer(http.FS(static)))
	mux.Handle("GET "+PathStatic, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /{$}", u.readPage(u.settingsPage))
	mux.HandleFunc("POST /{$}", u.readPage(u.settingsPage)) // the token form when reads need it
	mux.HandleFunc("POST "+pathSave, u.saveSettings)
	mux.HandleFunc("GET "+PathNodes, u.readPage(u.nodesPage))
	mux.HandleFunc("POST "+PathNodes, u.readPage(u.nodesPage))
	mux.HandleFunc("GET "+PathRecoveries, u.readPage(u.recoveriesPage))
	mux.HandleFunc("POST "+PathRecoveries, u.readPage(u.recoveriesPage))
	mux.HandleFunc("GET "+PathRecoveries+"/{name}", u.readPage(u.recoveryPage))
	mux.HandleFunc("POST "+PathRecoveries+"/{name}", u.readPage(u.recoveryPage))
	mux.HandleFunc("GET "+PathRecoveries+"/{name}/timeline.svg", u.readPage(u.timelineSVG))
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, PathStatic+"icon.svg", http.StatusMovedPermanently)
	})
}

// layout is what every page shows around its content.
type layout struct {
	Title   string
	Nav     string // settings, nodes, recoveries
	Version string
	// TokenForReads: the pages need the token too (the manager listens beyond
	// loopback); the script then sends it with every request.
	TokenForReads bool
	// Token is echoed into the pages' forms only when it was posted (reads that
	// need the token, without JavaScript).
	Token string
	Now   time.Time
	// ActBlocked is set while a refused settings value keeps the manager from
	// acting; Blocking lists those values. Every page shows them in a banner.
	ActBlocked string
	Blocking   []settings.Problem
}

// BlockedIntro is the blocked banner's explanation.
func (layout) BlockedIntro() string { return blockedIntro }

func (u *UI) layout(r *http.Request, title, nav string) layout {
	l := layout{Title: title, Nav: nav, Version: vigil.Version, TokenForReads: u.api.TokenForReads(), Now: u.now()}
	if p := u.api.Service().Problems(); p.ActBlocked != "" {
		l.ActBlocked, l.Blocking = p.ActBlocked, p.Blocking()
	}
	if l.TokenForReads {
		l.Token = r.PostFormValue(fieldToken)
	}
	return l
}

// readPage guards a page: when reads need the token, a request without a valid
// one (in the Authorization header, or posted by the token form) gets the token
// form instead.
func (u *UI) readPage(page http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, httpapi.DefaultMaxBodyBytes)
			if err := r.ParseForm(); err != nil {
				http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
				return
			}
		}
		if u.api.TokenForReads() && !u.api.ValidToken(httpapi.BearerToken(r)) && !u.api.ValidToken(r.PostFormValue(fieldToken)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="vigil-manager"`)
			data := struct {
				layout
				Error string
			}{u.layout(r, "API token needed", ""), ""}
			if r.PostFormValue(fieldToken) != "" {
				data.Error = "Wrong token: use the token the manager was started with (--api-token-file, or the generated file named in its log)."
			}
			u.render(w, http.StatusUnauthorized, "token", data)
			return
		}
		page(w, r)
	}
}

// render executes a page into a buffer first, so a template error is a clean 500.
func (u *UI) render(w http.ResponseWriter, status int, page string, data any) {
	u.renderTemplate(w, status, page, "layout.html", data)
}

// renderPartial renders only the live region of a page (the script swaps it in).
func (u *UI) renderPartial(w http.ResponseWriter, page string, data any) {
	u.renderTemplate(w, http.StatusOK, page, "live", data)
}

func (u *UI) renderTemplate(w http.ResponseWriter, status int, page, name string, data any) {
	var buf bytes.Buffer
	if err := u.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		u.log.Error("ui: render", "page", page, "err", err)
		http.Error(w, "internal error rendering the page; see the manager's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func partial(r *http.Request) bool { return r.URL.Query().Get("partial") == "1" }
