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

// SettingsList is GET /v1/settings: every setting in display order and the
// collection's ETag (for If-Match on PATCH).
type SettingsList struct {
	ETag     string        `json:"etag"`
	Settings []SettingView `json:"settings"`
}

// ListOf converts every entry.
func ListOf(entries []settings.Entry) SettingsList {
	out := SettingsList{ETag: collectionETag(entries), Settings: make([]SettingView, len(entries))}
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
