package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/vigil-storage/vigil/settings"
)

// Error codes of ErrorBody.Code: stable words for programs.
const (
	CodeInvalidValue     = "invalid-value"
	CodeUnknownSetting   = "unknown-setting"
	CodeManaged          = "managed"
	CodeStale            = "stale-etag"
	CodeBadETag          = "bad-etag"
	CodeUnauthorized     = "unauthorized"
	CodeBadRequest       = "bad-request"
	CodeTooLarge         = "body-too-large"
	CodeUnsupportedMedia = "unsupported-media-type"
	CodeMethod           = "method-not-allowed"
	CodeNotFound         = "not-found"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
)

// ErrorBody is every error response: {"error": {...}}. Message is a sentence
// for people; the other fields let a program (or the UI, to put the message next
// to the right field) act on it.
type ErrorBody struct {
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Setting, Value and Allowed: the setting concerned, the value given and what
	// it accepts.
	Setting string `json:"setting,omitempty"`
	Value   string `json:"value,omitempty"`
	Allowed string `json:"allowed,omitempty"`
	// Suggestion is the closest known setting name (unknown setting).
	Suggestion string `json:"suggestion,omitempty"`
	// ManagedPath is the overlay file that locks the setting (managed).
	ManagedPath string `json:"managedPath,omitempty"`
	// Changed names the settings changed since the client's ETag (stale).
	Changed []ChangedSetting `json:"changed,omitempty"`
	// Errors holds one error per setting when a PATCH refused several.
	Errors []ErrorBody `json:"errors,omitempty"`
}

// ChangedSetting is a setting that changed since the client read it: its value
// and source now.
type ChangedSetting struct {
	Name   string          `json:"name"`
	Value  string          `json:"value"`
	Source settings.Source `json:"source"`
}

// Error is an ErrorBody as a Go error (what Service returns).
type Error struct{ Body ErrorBody }

func (e *Error) Error() string { return e.Body.Message }

func apiError(status int, code, format string, args ...any) *Error {
	return &Error{ErrorBody{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}}
}

// fromSettings maps an error of package settings; value is the value given.
func fromSettings(err error, name, value string) *Error {
	var (
		ve *settings.ValueError
		ue *settings.UnknownSettingError
		me *settings.ManagedError
		ae *Error
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ve):
		return &Error{ErrorBody{Status: http.StatusBadRequest, Code: CodeInvalidValue, Message: ve.Error(),
			Setting: ve.Setting, Value: ve.Value, Allowed: ve.Allowed}}
	case errors.As(err, &ue):
		return &Error{ErrorBody{Status: http.StatusNotFound, Code: CodeUnknownSetting, Message: ue.Error(),
			Setting: ue.Name, Value: value, Suggestion: ue.Suggestion}}
	case errors.As(err, &me):
		return &Error{ErrorBody{Status: http.StatusConflict, Code: CodeManaged, Message: me.Error(),
			Setting: me.Setting, Value: value, ManagedPath: me.Path}}
	case errors.Is(err, settings.ErrStoreUnavailable):
		return &Error{ErrorBody{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error(), Setting: name}}
	}
	return &Error{ErrorBody{Status: http.StatusInternalServerError, Code: CodeInternal,
		Message: fmt.Sprintf("change %s: %v", name, err), Setting: name}}
}

// severity orders the statuses of several refusals: the response carries the
// most specific one (unknown before managed before invalid).
var severity = map[int]int{http.StatusNotFound: 3, http.StatusConflict: 2, http.StatusBadRequest: 1}

// combine turns several per-setting refusals into one error whose status is the
// most severe one and whose Errors list each, in name order.
func combine(errs []*Error) *Error {
	if len(errs) == 1 {
		return errs[0]
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Body.Setting < errs[j].Body.Setting })
	top := errs[0].Body.Status
	body := ErrorBody{Code: errs[0].Body.Code}
	for _, e := range errs {
		if severity[e.Body.Status] > severity[top] {
			top, body.Code = e.Body.Status, e.Body.Code
		}
		body.Errors = append(body.Errors, e.Body)
	}
	body.Status = top
	body.Message = fmt.Sprintf("%d settings refused, nothing changed: ", len(errs))
	for i, e := range errs {
		if i > 0 {
			body.Message += "; "
		}
		body.Message += e.Body.Message
	}
	return &Error{body}
}
