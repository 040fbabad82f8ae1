package settings

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Sentinel errors. Every error this package returns for a caller's mistake wraps one
// of them, so callers (the CLI, the REST API) can map it with errors.Is while the
// message itself names the setting, the value and what is allowed.
var (
	// ErrUnknownSetting: the name is not a defined setting. The error is an
	// *UnknownSettingError that suggests the closest known name.
	ErrUnknownSetting = errors.New("unknown setting")
	// ErrInvalidValue: the value does not parse or is out of range. The error is a
	// *ValueError naming the setting, the value and what is allowed.
	ErrInvalidValue = errors.New("invalid value")
	// ErrManaged: the setting is locked by the managed overlay directory and cannot
	// be written through the store. The error is a *ManagedError naming the file.
	ErrManaged = errors.New("setting is managed")
	// ErrClosed: the Settings or Store was closed.
	ErrClosed = errors.New("closed")
	// ErrInvalidStoreSpec: a store spec is neither bolt:PATH nor configmap:NS/NAME.
	ErrInvalidStoreSpec = errors.New("invalid settings store")
	// ErrStoreUnavailable: the store could not be reached (file locked too long,
	// API server unreachable). The wrapped error says why.
	ErrStoreUnavailable = errors.New("settings store unavailable")
)

// UnknownSettingError reports a name that is not defined, with the closest
// defined name as a suggestion when one is near enough.
type UnknownSettingError struct {
	Name       string
	Suggestion string // "" when nothing is close
}

func (e *UnknownSettingError) Error() string {
	if e.Suggestion != "" {
		return fmt.Sprintf("unknown setting %s (did you mean %s?)", Echo(e.Name), e.Suggestion)
	}
	return fmt.Sprintf("unknown setting %s (see `vigil-manager settings list`)", Echo(e.Name))
}

// Is makes errors.Is(err, ErrUnknownSetting) true.
func (e *UnknownSettingError) Is(target error) bool { return target == ErrUnknownSetting }

// ValueError reports a value that a setting refuses.
type ValueError struct {
	Setting string // the setting's name
	Value   string // the value as given
	Reason  string // why it was refused, e.g. "not a duration"
	Allowed string // what is allowed, e.g. "one of: never, wait, immediate"
}

// Error names the setting first, then the value (shortened by Echo when long),
// why it was refused and what is allowed.
func (e *ValueError) Error() string {
	msg := fmt.Sprintf("setting %s: invalid value %s", e.Setting, Echo(e.Value))
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg + "; allowed: " + e.Allowed
}

// Is makes errors.Is(err, ErrInvalidValue) true.
func (e *ValueError) Is(target error) bool { return target == ErrInvalidValue }

// ManagedError reports a write to a setting that the overlay directory manages.
type ManagedError struct {
	Setting string
	Path    string // the overlay file that holds the value
}

func (e *ManagedError) Error() string {
	return fmt.Sprintf("setting %s is managed by the overlay file %s (usually a mounted ConfigMap): change it there, not through the store", e.Setting, e.Path)
}

// Is makes errors.Is(err, ErrManaged) true.
func (e *ManagedError) Is(target error) bool { return target == ErrManaged }

// maxEcho is the longest text, in bytes, that an error message repeats whole.
const maxEcho = 64

// Echo quotes s for an error message. Text longer than 64 bytes is cut after its
// first 48 bytes (at a character boundary) and followed by its full length, so a
// 10 KB value never floods a one-line error: "xxx…"… (10240 bytes). The error
// types keep the full text in their fields.
func Echo(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho - 16
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}
