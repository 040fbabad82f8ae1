package settings_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/settings"
)

func TestDefinitions_WellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range settings.Definitions() {
		if seen[d.Name] {
			t.Errorf("%s defined twice", d.Name)
		}
		seen[d.Name] = true
		if d.DisplayName == "" || d.Category == "" || d.Description == "" {
			t.Errorf("%s: display name, category and description are required", d.Name)
		}
		if _, err := d.Parse(d.Default); err != nil {
			t.Errorf("%s: default %q invalid: %v", d.Name, d.Default, err)
		}
		if c, _ := d.Canonical(d.Default); c != d.Default {
			t.Errorf("%s: default %q is not canonical (%q)", d.Name, d.Default, c)
		}
		if d.Type == settings.TypeEnum || d.Type == settings.TypeBool {
			if len(d.Choices) == 0 && d.Type == settings.TypeEnum {
				t.Errorf("%s: enum without choices", d.Name)
			}
			for _, c := range d.Choices {
				if c.Description == "" {
					t.Errorf("%s: choice %s has no description", d.Name, c.Value)
				}
				if _, err := d.Parse(c.Value); err != nil {
					t.Errorf("%s: choice %s does not parse: %v", d.Name, c.Value, err)
				}
			}
		}
	}
	for _, name := range []string{
		"node-down-pod-deletion-policy", "volume-attachment-recovery-policy", "fast-fenced-trigger",
		"node-down-grace-period", "node-not-ready-debounce", "extra-protected-provisioners",
		"crash-loop-pod-deletion", "crash-loop-restart-limit", "datapath-connectivity-loss-threshold", "dry-run",
	} {
		if !seen[name] {
			t.Errorf("setting %s is not defined", name)
		}
	}
}

func TestParseValue_Valid(t *testing.T) {
	tests := []struct {
		name, value string
		want        any
	}{
		{"node-down-pod-deletion-policy", "delete-both-statefulset-and-deployment-pod", settings.PolicyDeleteBoth},
		{"node-down-pod-deletion-policy", " do-nothing\n", settings.PolicyDoNothing},
		{"volume-attachment-recovery-policy", "immediate", settings.RecoveryImmediate},
		{"fast-fenced-trigger", "TRUE", true},
		{"node-down-grace-period", "0s", time.Duration(0)},
		{"node-down-grace-period", "10m", 10 * time.Minute},
		{"node-not-ready-debounce", "1500ms", 1500 * time.Millisecond},
		{"crash-loop-restart-limit", "1000", 1000},
		{"datapath-connectivity-loss-threshold", "1s", time.Second},
		{"control-plane-outage-threshold", "1", 1},
		{"control-plane-outage-threshold", " 100 ", 100},
	}
	for _, tc := range tests {
		got, err := settings.ParseValue(tc.name, tc.value)
		if err != nil || got != tc.want {
			t.Errorf("ParseValue(%s, %q) = %v, %v; want %v", tc.name, tc.value, got, err, tc.want)
		}
	}
	got, err := settings.ParseValue("extra-protected-provisioners", " ebs.csi.aws.com , rook-ceph.rbd.csi.ceph.com,")
	if err != nil || strings.Join(got.([]string), "|") != "ebs.csi.aws.com|rook-ceph.rbd.csi.ceph.com" {
		t.Errorf("ParseValue(extra-protected-provisioners) = %v, %v", got, err)
	}
}

func TestParseValue_Invalid(t *testing.T) {
	tests := []struct {
		name, value string
		mentions    []string // beyond the name and the value
	}{
		{"node-down-pod-deletion-policy", "delete-everything", []string{"do-nothing", "delete-statefulset-pod", "delete-deployment-pod", "delete-both-statefulset-and-deployment-pod"}},
		{"node-down-pod-deletion-policy", "Do-Nothing", []string{"lower case", "did you mean do-nothing"}},
		{"volume-attachment-recovery-policy", "wiat", []string{"never, wait, immediate", "did you mean wait"}},
		{"fast-fenced-trigger", "yes", []string{"false, true"}},
		{"fast-fenced-trigger", "ture", []string{"did you mean true"}},
		{"volume-attachment-recovery-policy", "IMMEDIATE", []string{"did you mean immediate"}},
		{"volume-attachment-recovery-policy", "WIAT", []string{"did you mean wait"}},
		{"node-down-grace-period", "11m", []string{"out of range", "from 0s to 10m"}},
		{"node-down-grace-period", "-1s", []string{"from 0s to 10m"}},
		{"node-down-grace-period", "2", []string{"not a duration"}},
		{"datapath-connectivity-loss-threshold", "500ms", []string{"from 1s to 5m"}},
		{"crash-loop-restart-limit", "0", []string{"from 1 to 1000"}},
		{"crash-loop-restart-limit", "five", []string{"not a base-10 integer", "from 1 to 1000"}},
		{"control-plane-outage-threshold", "0", []string{"from 1 to 100"}},
		{"control-plane-outage-threshold", "101", []string{"from 1 to 100"}},
		{"control-plane-outage-threshold", "55%", []string{"not a base-10 integer", "from 1 to 100"}},
		{"control-plane-outage-threshold", "0.55", []string{"not a base-10 integer", "from 1 to 100"}},
		{"extra-protected-provisioners", "good.csi.io,-bad", []string{`"-bad" is not a valid CSI driver name`}},
		{"extra-protected-provisioners", "a.io,a.io", []string{"listed twice"}},
		{"extra-protected-provisioners", strings.Repeat("a", 64), []string{"not a valid CSI driver name"}},
	}
	for _, tc := range tests {
		_, err := settings.ParseValue(tc.name, tc.value)
		if !errors.Is(err, settings.ErrInvalidValue) {
			t.Errorf("ParseValue(%s, %q) = %v, want ErrInvalidValue", tc.name, tc.value, err)
			continue
		}
		var ve *settings.ValueError
		if !errors.As(err, &ve) || ve.Setting != tc.name || ve.Value != tc.value {
			t.Errorf("ParseValue(%s, %q): error %#v does not carry the setting and value", tc.name, tc.value, err)
		}
		for _, m := range append([]string{tc.name, tc.value}, tc.mentions...) {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("ParseValue(%s, %q): %q does not mention %q", tc.name, tc.value, err, m)
			}
		}
	}
}

func TestLookup_Unknown(t *testing.T) {
	tests := []struct{ name, suggestion string }{
		{"node-down-pod-delete-policy", "node-down-pod-deletion-policy"},
		{"dryrun", "dry-run"},
		{"DRY-RUN", "dry-run"},
		{"Dry-Run", "dry-run"},
		{"dry_run", "dry-run"},
		{"NODE-DOWN-GRACE-PERIOD", "node-down-grace-period"},
		{"crash-loop-restart-limt", "crash-loop-restart-limit"},
		{"something-else-entirely", ""},
	}
	for _, tc := range tests {
		_, err := settings.Lookup(tc.name)
		var ue *settings.UnknownSettingError
		if !errors.Is(err, settings.ErrUnknownSetting) || !errors.As(err, &ue) {
			t.Fatalf("Lookup(%q) = %v, want ErrUnknownSetting", tc.name, err)
		}
		if ue.Suggestion != tc.suggestion {
			t.Errorf("Lookup(%q) suggests %q, want %q", tc.name, ue.Suggestion, tc.suggestion)
		}
		if tc.suggestion != "" && !strings.Contains(err.Error(), "did you mean "+tc.suggestion) {
			t.Errorf("Lookup(%q) error %q lacks the suggestion", tc.name, err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 2 * time.Second: "2s", 2 * time.Minute: "2m", 90 * time.Second: "1m30s",
		time.Hour: "1h", 1500 * time.Millisecond: "1.5s", time.Hour + time.Second: "1h0m1s",
	} {
		if got := settings.FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestValueError_Error_LongValueNamesSettingFirstAndIsShortened: a 10 KB value
// is not echoed whole; the setting comes first and the length is given.
func TestValueError_Error_LongValueNamesSettingFirstAndIsShortened(t *testing.T) {
	long := strings.Repeat("x", 10*1024)
	for _, name := range []string{"node-down-grace-period", "extra-protected-provisioners", "node-down-pod-deletion-policy", "dry-run"} {
		_, err := settings.ParseValue(name, long)
		var ve *settings.ValueError
		if !errors.As(err, &ve) || ve.Value != long {
			t.Fatalf("%s: %v, want a *ValueError carrying the whole value", name, err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "setting "+name+": ") {
			t.Errorf("%s: message %q does not start with the setting", name, msg[:min(len(msg), 80)])
		}
		if len(msg) > 600 || !strings.Contains(msg, "(10240 bytes)") {
			t.Errorf("%s: message of %d bytes, want a shortened value and its length: %.200q", name, len(msg), msg)
		}
	}
	_, err := settings.Lookup(long)
	if msg := err.Error(); len(msg) > 200 || !strings.Contains(msg, "(10240 bytes)") {
		t.Errorf("unknown 10 KB name: message of %d bytes: %.200q", len(msg), msg)
	}
}

func TestEcho(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"wait", `"wait"`},
		{strings.Repeat("a", 64), `"` + strings.Repeat("a", 64) + `"`},
		{strings.Repeat("a", 65), `"` + strings.Repeat("a", 48) + `"… (65 bytes)`},
		// A cut never splits a character: 47 'a' then 'é' (2 bytes) straddles 48.
		{strings.Repeat("a", 47) + strings.Repeat("é", 20), `"` + strings.Repeat("a", 47) + `"… (87 bytes)`},
		{"a\nb", `"a\nb"`}, // a newline is escaped, never breaks the line
	}
	for _, tc := range tests {
		if got := settings.Echo(tc.in); got != tc.want {
			t.Errorf("Echo(%.20q…) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
