package httpapi

import (
	"github.com/vigil-storage/vigil/settings"
)

// SettingView is one setting as GET /v1/settings[/{name}] returns it: the value
// in force and where it comes from, and its whole definition from the registry.
type SettingView struct {
	Name    string          `json:"name"`
	Value   string          `json:"value"`
	Default string          `json:"default"`
	Source  settings.Source `json:"source"`
	// ManagedPath is the overlay file that locks the setting ("" if not managed).
	ManagedPath string `json:"managedPath,omitempty"`
	// Problem is the last value refused from the overlay or the store.
	Problem string `json:"problem,omitempty"`
	// ETag is the setting's own entity tag, for If-Match on PUT and DELETE.
	ETag       string         `json:"etag"`
	Definition DefinitionView `json:"definition"`
}

// DefinitionView is a setting's definition, straight from package settings.
type DefinitionView struct {
	DisplayName string        `json:"displayName"`
	Category    string        `json:"category"`
	Type        settings.Type `json:"type"`
	Description string        `json:"description"` // markdown
	// Allowed says in words what the setting accepts.
	Allowed string       `json:"allowed"`
	Choices []ChoiceView `json:"choices,omitempty"`
	// Range bounds int and duration settings (inclusive), in canonical text.
	Range *RangeView `json:"range,omitempty"`
	// Examples are sample values (durations).
	Examples []string `json:"examples,omitempty"`
	// ItemDescription says what each item of a string list must be.
	ItemDescription string `json:"itemDescription,omitempty"`
}

// ChoiceView is one allowed value with its description.
type ChoiceView struct {
	Value       string `json:"value"`
	Description string `json:"description"`
}

// RangeView is an inclusive range.
type RangeView struct {
	Min string `json:"min"`
	Max string `json:"max"`
}

// durationExamples are shown next to every duration setting.
var durationExamples = []string{"500ms", "15s", "2m"}

// DefinitionOf converts a registry definition.
func DefinitionOf(d *settings.Definition) DefinitionView {
	v := DefinitionView{
		DisplayName: d.DisplayName, Category: d.Category, Type: d.Type,
		Description: d.Description, Allowed: d.Allowed(), ItemDescription: d.ItemDescription,
	}
	for _, c := range d.Choices {
		v.Choices = append(v.Choices, ChoiceView{Value: c.Value, Description: c.Description})
	}
	switch d.Type {
	case settings.TypeInt:
		v.Range = &RangeView{Min: settings.Format(int(d.MinInt)), Max: settings.Format(int(d.MaxInt))}
	case settings.TypeDuration:
		v.Range = &RangeView{Min: settings.FormatDuration(d.MinDuration), Max: settings.FormatDuration(d.MaxDuration)}
		v.Examples = durationExamples
	}
	return v
}

// ViewOf converts a settings entry.
func ViewOf(e settings.Entry) SettingView {
	return SettingView{
		Name: e.Name, Value: e.Value, Default: e.Default, Source: e.Source,
		ManagedPath: e.ManagedPath, Problem: e.Problem, ETag: settingETag(e),
		Definition: DefinitionOf(e.Definition),
	}
}

// SettingsList is GET /v1/settings: every setting in display order, the
// collection's ETag (for If-Match on PATCH), and the refused values that are
// still there.
type SettingsList struct {
	ETag     string        `json:"etag"`
	Settings []SettingView `json:"settings"`
	ProblemsView
}

// ProblemsView is what Vigil refused from the overlay or the store: part of
// GET /v1/settings, and the data of the "problems" event.
type ProblemsView struct {
	// ActBlocked is set while a refused value keeps the manager from acting
	// (the value in force is not the one given and nothing good stands in for
	// it): the reason, naming each file, value and what is allowed. The pages
	// show it as a banner.
	ActBlocked string `json:"actBlocked,omitempty"`
	// Problems lists every refused value still there, blocking or not.
	Problems []settings.Problem `json:"problems"`
}

// ProblemsOf reads the problems of s.
func ProblemsOf(s SettingsService) ProblemsView {
	v := ProblemsView{Problems: s.Problems()}
	if v.Problems == nil {
		v.Problems = []settings.Problem{}
	}
	if err := s.ActBlocked(); err != nil {
		v.ActBlocked = err.Error()
	}
	return v
}

// Blocking returns the problems that block acting.
func (v ProblemsView) Blocking() []settings.Problem {
	var out []settings.Problem
	for _, p := range v.Problems {
		if p.Blocking {
			out = append(out, p)
		}
	}
	return out
}

// ListOf converts every entry; its ETag covers the values only (see
// Service.Settings for the one that covers the problems too).
func ListOf(entries []settings.Entry) SettingsList {
	out := SettingsList{ETag: collectionETag(entries), Settings: make([]SettingView, len(entries)),
		ProblemsView: ProblemsView{Problems: []settings.Problem{}}}
	for i, e := range entries {
		out.Settings[i] = ViewOf(e)
	}
	return out
}

// HistoryEntry is one recorded change as GET /v1/settings/history returns it.
type HistoryEntry struct {
	Time      string          `json:"time"` // RFC 3339, UTC
	Setting   string          `json:"setting"`
	Old       string          `json:"old"`
	New       string          `json:"new"`
	OldSource settings.Source `json:"oldSource"`
	NewSource settings.Source `json:"newSource"`
	Source    string          `json:"source"`             // ui, api, cli, configmap, store
	Identity  string          `json:"identity,omitempty"` // the caller, where known
}
