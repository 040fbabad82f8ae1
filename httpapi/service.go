package httpapi

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/settings"
)

// History limits: the default and the largest limit a caller may ask for (all
// the store keeps).
const (
	DefaultHistoryLimit = 50
	MaxHistoryLimit     = settings.HistoryLimit
)

// Service is the settings logic of the API, shared by the JSON handlers and the
// UI's form posts: validation of every value before anything is written, ETag
// preconditions, and the mapping of refusals to ErrorBody. Writes through one
// Service are serialized, so two tabs cannot interleave a check and a write.
type Service struct {
	settings SettingsService
	mu       sync.Mutex
}

// NewService wraps the live settings.
func NewService(s SettingsService) *Service { return &Service{settings: s} }

// Settings returns every setting, the refused values still there and the
// collection's ETag. The ETag covers the problems too (see withProblems), so a
// conditional GET never keeps a banner that is gone, or misses a new one.
func (s *Service) Settings() SettingsList {
	list := ListOf(s.settings.List())
	list.ProblemsView = ProblemsOf(s.settings)
	list.ETag = withProblems(list.ETag, list.Problems)
	return list
}

// Problems returns the refused values still there and whether acting is blocked.
func (s *Service) Problems() ProblemsView { return ProblemsOf(s.settings) }

// Setting returns one setting (404 with a suggestion when unknown).
func (s *Service) Setting(name string) (SettingView, error) {
	e, err := s.settings.Get(name)
	if err != nil {
		return SettingView{}, fromSettings(err, name, "")
	}
	return ViewOf(e), nil
}

// Check validates value for name without writing: the canonical form, or the
// error a write would return.
func (s *Service) Check(name, value string) (string, error) {
	d, err := settings.Lookup(name)
	if err != nil {
		return "", fromSettings(err, name, value)
	}
	c, err := d.Canonical(value)
	if err != nil {
		return "", fromSettings(err, name, value)
	}
	return c, nil
}

// Set changes one setting; ifMatch ("" for none) is the setting's or the
// collection's ETag.
func (s *Service) Set(ctx context.Context, name, value, ifMatch string, who Actor) (SettingView, error) {
	if err := s.precheck(name, value); err != nil {
		return SettingView{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkETag(ifMatch, map[string]bool{name: true}); err != nil {
		return SettingView{}, err
	}
	if err := s.settings.SetAs(ctx, name, value, who); err != nil {
		return SettingView{}, fromSettings(err, name, value)
	}
	return s.Setting(name)
}

// Reset removes the stored value of one setting so its default is in force.
func (s *Service) Reset(ctx context.Context, name, ifMatch string, who Actor) (SettingView, error) {
	e, err := s.settings.Get(name)
	if err != nil {
		return SettingView{}, fromSettings(err, name, "")
	}
	if e.ManagedPath != "" {
		return SettingView{}, fromSettings(&settings.ManagedError{Setting: name, Path: e.ManagedPath}, name, "")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkETag(ifMatch, map[string]bool{name: true}); err != nil {
		return SettingView{}, err
	}
	if err := s.settings.ResetAs(ctx, name, who); err != nil {
		return SettingView{}, fromSettings(err, name, "")
	}
	return s.Setting(name)
}

// SetMany changes several settings all or nothing: every name and value is
// checked first and any refusal changes nothing. ifMatch ("" for none) is the
// collection's ETag; any setting changed since makes it stale.
func (s *Service) SetMany(ctx context.Context, values map[string]string, ifMatch string, who Actor) (SettingsList, error) {
	if len(values) == 0 {
		return SettingsList{}, apiError(http.StatusBadRequest, CodeBadRequest,
			`no settings given: send {"values": {"NAME": "VALUE", ...}} with at least one setting`)
	}
	var refused []*Error
	for name, value := range values {
		if err := s.precheck(name, value); err != nil {
			refused = append(refused, err.(*Error))
		}
	}
	if len(refused) > 0 {
		return SettingsList{}, combine(refused)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkETag(ifMatch, nil); err != nil {
		return SettingsList{}, err
	}
	if err := s.settings.SetMany(ctx, values, who); err != nil {
		return SettingsList{}, fromMany(err, values)
	}
	return s.Settings(), nil
}

// precheck refuses an unknown name, a managed setting or an invalid value.
func (s *Service) precheck(name, value string) error {
	e, err := s.settings.Get(name)
	if err != nil {
		return fromSettings(err, name, value)
	}
	if e.ManagedPath != "" {
		return fromSettings(&settings.ManagedError{Setting: name, Path: e.ManagedPath}, name, value)
	}
	if _, err := e.Definition.Parse(value); err != nil {
		return fromSettings(err, name, value)
	}
	return nil
}

// checkETag returns a 412 naming what changed when ifMatch is stale, a 400 when
// it is not an ETag of this server, nil when it matches or is empty.
func (s *Service) checkETag(ifMatch string, scope map[string]bool) error {
	if ifMatch == "" {
		return nil
	}
	entries := s.settings.List()
	changed, ok := staleSettings(ifMatch, entries, scope)
	if !ok {
		return apiError(http.StatusBadRequest, CodeBadETag,
			"If-Match %s is not an ETag of these settings: send the etag of GET /v1/settings (or of the setting itself for PUT and DELETE), or * for any", ifMatch)
	}
	if len(changed) == 0 {
		return nil
	}
	byName := make(map[string]settings.Entry, len(entries))
	for _, e := range entries {
		byName[e.Name] = e
	}
	err := apiError(http.StatusPreconditionFailed, CodeStale, "")
	msg := "changed since you loaded them, nothing was written; reload and apply your change again:"
	for _, name := range changed {
		e := byName[name]
		err.Body.Changed = append(err.Body.Changed, ChangedSetting{Name: name, Value: e.Value, Source: e.Source})
		msg += " " + name + " is now " + quoteEmpty(e.Value) + " (" + string(e.Source) + ")"
	}
	err.Body.Message = msg
	if len(changed) == 1 {
		err.Body.Setting = changed[0]
	}
	return err
}

func quoteEmpty(s string) string {
	if s == "" {
		return `""`
	}
	return s
}

// fromMany maps an error of SetMany: one refusal or several joined.
func fromMany(err error, values map[string]string) error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var out []*Error
		for _, e := range joined.Unwrap() {
			out = append(out, fromSettings(e, settingOf(e), ""))
		}
		if len(out) > 0 {
			return combine(out)
		}
	}
	name := settingOf(err)
	return fromSettings(err, name, values[name])
}

// settingOf names the setting an error of package settings is about.
func settingOf(err error) string {
	var (
		ve *settings.ValueError
		ue *settings.UnknownSettingError
		me *settings.ManagedError
	)
	switch {
	case errors.As(err, &ve):
		return ve.Setting
	case errors.As(err, &ue):
		return ue.Name
	case errors.As(err, &me):
		return me.Setting
	}
	return ""
}

// History returns the recorded changes, newest first.
func (s *Service) History(ctx context.Context, limit int) ([]HistoryEntry, error) {
	if limit < 1 || limit > MaxHistoryLimit {
		return nil, apiError(http.StatusBadRequest, CodeBadRequest, "limit %d: want 1 to %d", limit, MaxHistoryLimit)
	}
	recs, err := s.settings.History(ctx, limit)
	if err != nil {
		return nil, apiError(http.StatusServiceUnavailable, CodeUnavailable, "read the settings history: %v", err)
	}
	out := make([]HistoryEntry, len(recs))
	for i, r := range recs {
		out[i] = HistoryEntry{
			Time: r.Time.UTC().Format(time.RFC3339Nano), Setting: r.Setting, Old: r.Old, New: r.New,
			OldSource: r.OldSource, NewSource: r.NewSource, Source: r.Actor.Source, Identity: r.Actor.Identity,
		}
	}
	return out, nil
}
