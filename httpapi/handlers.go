package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
)

// Request bodies, for the error messages that show what to send.
const (
	shapePut   = `{"value": "VALUE"}`
	shapePatch = `{"values": {"NAME": "VALUE", ...}}`
)

type putBody struct {
	Value *string `json:"value"`
}

type patchBody struct {
	Values map[string]*string `json:"values"`
}

// serveSettings is /v1/settings: GET lists, PATCH changes several all or nothing.
func (a *API) serveSettings(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if !a.authorize(w, r, false) {
			return
		}
		list := a.svc.Settings()
		if notModified(w, r, list.ETag) {
			return
		}
		a.writeList(w, list)
	case http.MethodPatch:
		if !a.authorize(w, r, true) {
			return
		}
		var body patchBody
		if err := decodeStrict(w, r, a.cfg.MaxBodyBytes, &body, shapePatch); err != nil {
			writeError(w, err)
			return
		}
		values := make(map[string]string, len(body.Values))
		for name, v := range body.Values {
			if v == nil {
				writeError(w, apiError(http.StatusBadRequest, CodeBadRequest,
					"the value of %s is null: values are strings; to reset a setting to its default, DELETE %s/%s", name, PathSettings, name))
				return
			}
			values[name] = *v
		}
		list, err := a.svc.SetMany(r.Context(), values, r.Header.Get("If-Match"), ActorOf(r, sourceOf(r)))
		if err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set("ETag", list.ETag)
		writeJSON(w, http.StatusOK, list)
	default:
		methodNotAllowed(w, r, http.MethodGet, http.MethodHead, http.MethodPatch)
	}
}

// serveSetting is /v1/settings/{name}: GET, PUT (change), DELETE (reset).
func (a *API) serveSetting(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var (
		v   SettingView
		err error
	)
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if !a.authorize(w, r, false) {
			return
		}
		if v, err = a.svc.Setting(name); err == nil && notModified(w, r, v.ETag) {
			return
		}
	case http.MethodPut:
		if !a.authorize(w, r, true) {
			return
		}
		var body putBody
		if derr := decodeStrict(w, r, a.cfg.MaxBodyBytes, &body, shapePut); derr != nil {
			writeError(w, derr)
			return
		}
		if body.Value == nil {
			writeError(w, apiError(http.StatusBadRequest, CodeBadRequest, `"value" is missing: send %s`, shapePut))
			return
		}
		v, err = a.svc.Set(r.Context(), name, *body.Value, r.Header.Get("If-Match"), ActorOf(r, sourceOf(r)))
	case http.MethodDelete:
		if !a.authorize(w, r, true) {
			return
		}
		v, err = a.svc.Reset(r.Context(), name, r.Header.Get("If-Match"), ActorOf(r, sourceOf(r)))
	default:
		methodNotAllowed(w, r, http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete)
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("ETag", v.ETag)
	writeJSON(w, http.StatusOK, v)
}

// CheckResult is GET /v1/settings/{name}/check?value=V for a valid value.
type CheckResult struct {
	Setting   string `json:"setting"`
	Value     string `json:"value"`
	Canonical string `json:"canonical"`
}

// serveCheck validates a value without writing it (the pages' inline validation
// asks here, so the rules exist once, in package settings).
func (a *API) serveCheck(w http.ResponseWriter, r *http.Request) {
	if !a.readable(w, r) {
		return
	}
	name := r.PathValue("name")
	q := r.URL.Query()
	if !q.Has("value") {
		writeError(w, apiError(http.StatusBadRequest, CodeBadRequest, "missing ?value=: GET %s/%s/check?value=VALUE", PathSettings, name))
		return
	}
	c, err := a.svc.Check(name, q.Get("value"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, CheckResult{Setting: name, Value: q.Get("value"), Canonical: c})
}

// serveHistory is GET /v1/settings/history?limit=N.
func (a *API) serveHistory(w http.ResponseWriter, r *http.Request) {
	if !a.readable(w, r) {
		return
	}
	limit, err := parseLimit(r)
	if err != nil {
		writeError(w, err)
		return
	}
	h, err := a.svc.History(r.Context(), limit)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Changes []HistoryEntry `json:"changes"`
	}{h})
}

// serveNodes is GET /v1/nodes.
func (a *API) serveNodes(w http.ResponseWriter, r *http.Request) {
	if !a.readable(w, r) {
		return
	}
	rep, err := a.Nodes(r.Context())
	if err != nil {
		writeError(w, sourceError("nodes", err))
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// serveRecoveries is GET /v1/recoveries.
func (a *API) serveRecoveries(w http.ResponseWriter, r *http.Request) {
	if !a.readable(w, r) {
		return
	}
	rs, err := a.Recoveries(r.Context())
	if err != nil {
		writeError(w, sourceError("recoveries", err))
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Recoveries []RecoveryView `json:"recoveries"`
	}{rs})
}

// serveRecovery is GET /v1/recoveries/{name}.
func (a *API) serveRecovery(w http.ResponseWriter, r *http.Request) {
	if !a.readable(w, r) {
		return
	}
	v, err := a.Recovery(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, sourceError("recovery "+r.PathValue("name"), err))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// sourceError maps a source's error: ErrNotFound 404, ErrUnavailable 503.
func sourceError(what string, err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return apiError(http.StatusNotFound, CodeNotFound, "%s: %v", what, err)
	case errors.Is(err, ErrUnavailable):
		return apiError(http.StatusServiceUnavailable, CodeUnavailable, "%s: %v", what, err)
	}
	return apiError(http.StatusInternalServerError, CodeInternal, "%s: %v", what, err)
}

// notModified answers a GET whose If-None-Match names the current ETag.
func notModified(w http.ResponseWriter, r *http.Request, etag string) bool {
	w.Header().Set("ETag", etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && (inm == etag || inm == "W/"+etag) {
		w.WriteHeader(http.StatusNotModified)
		return true
	}
	return false
}

// writeList writes the settings list, encoded once per ETag (the list is the
// largest and most read body).
func (a *API) writeList(w http.ResponseWriter, list SettingsList) {
	a.listMu.Lock()
	body := a.listBody
	if a.listETag != list.ETag {
		body = nil
	}
	a.listMu.Unlock()
	if body == nil {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(list); err != nil {
			writeError(w, err)
			return
		}
		body = buf.Bytes()
		a.listMu.Lock()
		a.listETag, a.listBody = list.ETag, body
		a.listMu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// readable admits a read-only request: GET only, with the token when reads
// need one. It has answered the request when it returns false.
func (a *API) readable(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet {
		methodNotAllowed(w, r, http.MethodGet)
		return false
	}
	return a.authorize(w, r, false)
}
