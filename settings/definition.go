package settings

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Type is the kind of value a setting holds.
type Type string

// The setting types. Their string forms appear in the README and the API.
const (
	TypeEnum       Type = "enum"
	TypeBool       Type = "bool"
	TypeInt        Type = "int"
	TypeDuration   Type = "duration"
	TypeStringList Type = "string list"
)

// Choice is one allowed value of an enum (or bool) setting, with a markdown
// description the UI and README show next to it.
type Choice struct {
	Value       string
	Description string
}

// Definition is the single definition of a setting. The registry (Definitions)
// holds one per setting; nothing else repeats a setting's name, default or rules.
type Definition struct {
	Name        string // the key in every store and overlay, e.g. "dry-run"
	DisplayName string // for people, e.g. "Dry run"
	Category    string // groups settings in the UI and README
	Type        Type
	Default     string   // canonical form; always valid
	Description string   // markdown
	Choices     []Choice // enum and bool: every allowed value, described
	// MinInt/MaxInt bound TypeInt values (inclusive).
	MinInt, MaxInt int64
	// MinDuration/MaxDuration bound TypeDuration values (inclusive).
	MinDuration, MaxDuration time.Duration
	// ItemDescription says what each item of a TypeStringList must be.
	ItemDescription string
	// Validate, when set, checks a parsed value beyond its type and range (for a
	// string list: each item). It returns a reason; Parse wraps it in a ValueError.
	Validate func(v any) error
}

// Allowed describes, for people, which values the setting accepts.
func (d *Definition) Allowed() string {
	switch d.Type {
	case TypeEnum, TypeBool:
		vals := make([]string, len(d.Choices))
		for i, c := range d.Choices {
			vals[i] = c.Value
		}
		return "one of " + strings.Join(vals, ", ")
	case TypeInt:
		return fmt.Sprintf("an integer from %d to %d", d.MinInt, d.MaxInt)
	case TypeDuration:
		return fmt.Sprintf("a duration from %s to %s (e.g. 500ms, 15s, 2m)",
			FormatDuration(d.MinDuration), FormatDuration(d.MaxDuration))
	case TypeStringList:
		return "a comma-separated list (may be empty) of " + d.ItemDescription
	}
	return "nothing (undefined type " + string(d.Type) + ")"
}

// Parse turns a value as given (CLI, store, overlay file) into the typed value the
// accessors return: PodDeletionPolicy, AttachmentRecoveryPolicy or string for enums,
// bool, int, time.Duration or []string. Leading and trailing white space is
// ignored. A refused value yields a *ValueError.
func (d *Definition) Parse(value string) (any, error) {
	v := strings.TrimSpace(value)
	var (
		parsed any
		reason string
	)
	switch d.Type {
	case TypeEnum:
		parsed, reason = d.parseEnum(v)
	case TypeBool:
		parsed, reason = parseBool(v)
	case TypeInt:
		parsed, reason = d.parseInt(v)
	case TypeDuration:
		parsed, reason = d.parseDuration(v)
	case TypeStringList:
		parsed, reason = parseList(v)
	default:
		reason = "the setting has an undefined type " + string(d.Type)
	}
	if reason == "" && d.Validate != nil {
		if err := d.Validate(parsed); err != nil {
			reason = err.Error()
		}
	}
	if reason != "" {
		return nil, &ValueError{Setting: d.Name, Value: value, Reason: reason, Allowed: d.Allowed()}
	}
	return parsed, nil
}

// Canonical parses value and returns its canonical string form (what stores hold):
// "2m" for "120s", "a,b" for " a , b ".
func (d *Definition) Canonical(value string) (string, error) {
	v, err := d.Parse(value)
	if err != nil {
		return "", err
	}
	return Format(v), nil
}

// Format renders a parsed value in canonical form.
func Format(v any) string {
	switch x := v.(type) {
	case bool:
		return strconv.FormatBool(x)
	case int:
		return strconv.Itoa(x)
	case time.Duration:
		return FormatDuration(x)
	case []string:
		return strings.Join(x, ",")
	case fmt.Stringer:
		return x.String()
	}
	return fmt.Sprint(v)
}

// FormatDuration is time.Duration.String without the zero tails: "2m" not "2m0s",
// "1h" not "1h0m0s".
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func (d *Definition) parseEnum(v string) (any, string) {
	for _, c := range d.Choices {
		if c.Value == v {
			return enumValue(d.Name, v), ""
		}
	}
	for _, c := range d.Choices {
		if strings.EqualFold(c.Value, v) {
			return nil, fmt.Sprintf("not a choice (choices are lower case: did you mean %s?)", c.Value)
		}
	}
	if s := closest(v, d.choiceValues()); s != "" {
		return nil, fmt.Sprintf("not a choice (did you mean %s?)", s)
	}
	return nil, "not a choice"
}

func (d *Definition) choiceValues() []string {
	out := make([]string, len(d.Choices))
	for i, c := range d.Choices {
		out[i] = c.Value
	}
	return out
}

func parseBool(v string) (any, string) {
	switch strings.ToLower(v) {
	case "true":
		return true, ""
	case "false":
		return false, ""
	}
	if s := closest(v, []string{"true", "false"}); s != "" {
		return nil, fmt.Sprintf("not a boolean (did you mean %s?)", s)
	}
	return nil, "not a boolean"
}

func (d *Definition) parseInt(v string) (any, string) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil, "not a base-10 integer"
	}
	if n < d.MinInt || n > d.MaxInt {
		return nil, "out of range"
	}
	return int(n), ""
}

func (d *Definition) parseDuration(v string) (any, string) {
	dur, err := time.ParseDuration(v)
	if err != nil {
		return nil, "not a duration (a number with a unit: ms, s, m, h)"
	}
	if dur < d.MinDuration || dur > d.MaxDuration {
		return nil, "out of range"
	}
	return dur, ""
}

// parseList splits a comma-separated list; items are trimmed, empty items are
// skipped, a repeated item is refused.
func parseList(v string) (any, string) {
	out := []string{}
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if slices.Contains(out, item) {
			return nil, Echo(item) + " is listed twice"
		}
		out = append(out, item)
	}
	return out, ""
}

// enumValue returns the typed value of the enum settings the code switches on, so
// their accessors are a type assertion, and a plain string for any other enum.
func enumValue(name, v string) any {
	switch name {
	case NameNodeDownPodDeletionPolicy:
		return PodDeletionPolicy(v)
	case NameVolumeAttachmentRecoveryPolicy:
		return AttachmentRecoveryPolicy(v)
	}
	return v
}
