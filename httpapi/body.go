package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
)

// decodeStrict reads a JSON body into v: the media type must be JSON, the body
// at most max bytes, one object without unknown fields or trailing data.
func decodeStrict(w http.ResponseWriter, r *http.Request, max int64, v any, shape string) *Error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return apiError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia,
			"Content-Type %q: send application/json, a body like %s", r.Header.Get("Content-Type"), shape)
	}
	r.Body = http.MaxBytesReader(w, r.Body, max)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, max, shape)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return decodeError(err, max, shape)
		}
		return apiError(http.StatusBadRequest, CodeBadRequest, "trailing data after the JSON object: send exactly one object like %s", shape)
	}
	return nil
}

func decodeError(err error, max int64, shape string) *Error {
	var (
		mbe *http.MaxBytesError
		ute *json.UnmarshalTypeError
		se  *json.SyntaxError
	)
	switch {
	case errors.As(err, &mbe):
		return apiError(http.StatusRequestEntityTooLarge, CodeTooLarge, "body larger than %d bytes", max)
	case errors.As(err, &ute):
		field := ute.Field
		if field == "" {
			field = "the body"
		}
		return apiError(http.StatusBadRequest, CodeBadRequest, "%s is a JSON %s, want %s: send a body like %s",
			field, ute.Value, jsonKind(ute.Type.Kind().String()), shape)
	case errors.As(err, &se):
		return apiError(http.StatusBadRequest, CodeBadRequest, "malformed JSON at byte %d: %v; send a body like %s", se.Offset, err, shape)
	case errors.Is(err, io.EOF):
		return apiError(http.StatusBadRequest, CodeBadRequest, "empty body: send a body like %s", shape)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return apiError(http.StatusBadRequest, CodeBadRequest, "%s: a body like %s has no other fields",
			strings.TrimPrefix(err.Error(), "json: "), shape)
	}
	return apiError(http.StatusBadRequest, CodeBadRequest, "bad JSON body: %v; send a body like %s", err, shape)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string", "ptr":
		return "a string"
	case "map", "struct":
		return "an object"
	}
	return goKind
}

// writeJSON writes v with status; responses are never cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError writes an error as {"error": ErrorBody}.
func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = apiError(http.StatusInternalServerError, CodeInternal, "%v", err)
	}
	writeJSON(w, e.Body.Status, struct {
		Error ErrorBody `json:"error"`
	}{e.Body})
}

// methodNotAllowed is a JSON 405 naming the allowed methods.
func methodNotAllowed(w http.ResponseWriter, r *http.Request, allowed ...string) {
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeError(w, apiError(http.StatusMethodNotAllowed, CodeMethod, "%s %s: method not allowed; allowed: %s",
		r.Method, r.URL.Path, strings.Join(allowed, ", ")))
}
