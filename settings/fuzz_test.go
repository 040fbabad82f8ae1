package settings_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/settings"
)

// FuzzParseValue checks value parsing and validation across every setting: no
// panic; an accepted value is in its type's range or choices and its canonical
// form parses back to itself; a refused one is a ValueError naming the setting,
// the value and what is allowed. The checked-in corpus is in
// testdata/fuzz/FuzzParseValue.
func FuzzParseValue(f *testing.F) {
	for _, d := range settings.Definitions() {
		f.Add(d.Name, d.Default)
		for _, c := range d.Choices {
			f.Add(d.Name, c.Value)
		}
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		v, err := settings.ParseValue(name, value)
		d, lookupErr := settings.Lookup(name)
		if lookupErr != nil {
			if !errors.Is(err, settings.ErrUnknownSetting) {
				t.Fatalf("ParseValue(%q) on an unknown name = %v", name, err)
			}
			return
		}
		if err != nil {
			checkRefusal(t, d, value, err)
			return
		}
		checkAccepted(t, d, v)
	})
}

func checkRefusal(t *testing.T, d *settings.Definition, value string, err error) {
	var ve *settings.ValueError
	if !errors.As(err, &ve) || !errors.Is(err, settings.ErrInvalidValue) {
		t.Fatalf("ParseValue(%s, %q) = %v, want a *ValueError", d.Name, value, err)
	}
	if ve.Setting != d.Name || ve.Value != value || ve.Allowed != d.Allowed() ||
		!strings.Contains(err.Error(), d.Allowed()) {
		t.Fatalf("ParseValue(%s, %q): error %q does not name the setting, value and what is allowed", d.Name, value, err)
	}
}

func checkAccepted(t *testing.T, d *settings.Definition, v any) {
	switch d.Type {
	case settings.TypeEnum, settings.TypeBool:
		if !slices.ContainsFunc(d.Choices, func(c settings.Choice) bool { return c.Value == settings.Format(v) }) {
			t.Fatalf("%s accepted %v, not a choice", d.Name, v)
		}
	case settings.TypeInt:
		if n := int64(v.(int)); n < d.MinInt || n > d.MaxInt {
			t.Fatalf("%s accepted %d, out of range", d.Name, n)
		}
	case settings.TypeDuration:
		if x := v.(time.Duration); x < d.MinDuration || x > d.MaxDuration {
			t.Fatalf("%s accepted %s, out of range", d.Name, x)
		}
	case settings.TypeStringList:
		for _, item := range v.([]string) {
			if item == "" || strings.ContainsAny(item, ", \t\n") {
				t.Fatalf("%s accepted item %q", d.Name, item)
			}
		}
	}
	canon := settings.Format(v)
	again, err := d.Parse(canon)
	if err != nil {
		t.Fatalf("%s: canonical form %q of an accepted value is refused: %v", d.Name, canon, err)
	}
	if settings.Format(again) != canon {
		t.Fatalf("%s: canonical form %q is not stable (%q)", d.Name, canon, settings.Format(again))
	}
}
