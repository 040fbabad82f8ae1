package manager

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vigil-storage/vigil/internal/cliflags"
	"github.com/vigil-storage/vigil/settings"
)

// runSettingsCLI runs the app in-process with args after the program name.
func runSettingsCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := App()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err := cliflags.Run(app, append([]string{"vigil-manager"}, args...))
	return out.String(), err
}

// isolate points the default store and VIGIL_SETTINGS_STORE at a fresh bolt file
// and returns its spec.
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	spec := "bolt:" + filepath.Join(dir, "settings.db")
	t.Setenv(settings.StoreEnv, spec)
	return spec
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runSettingsCLI(t, args...)
	if err != nil {
		t.Fatalf("vigil-manager %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func TestSettingsCmd_SetGetReset(t *testing.T) {
	isolate(t)
	out := mustRun(t, "settings", "set", "node-down-pod-deletion-policy", "delete-statefulset-pod")
	if !strings.Contains(out, "delete-statefulset-pod (was do-nothing") {
		t.Errorf("set output %q", out)
	}
	if got := mustRun(t, "settings", "get", "-o", "value", "node-down-pod-deletion-policy"); got != "delete-statefulset-pod\n" {
		t.Fatalf("get = %q", got)
	}
	mustRun(t, "settings", "set", "node-down-grace-period", "90s")
	if got := mustRun(t, "settings", "get", "node-down-grace-period"); !strings.Contains(got, "1m30s") || !strings.Contains(got, "store") {
		t.Fatalf("get table = %q, want the canonical value and its source", got)
	}
	mustRun(t, "settings", "reset", "node-down-pod-deletion-policy")
	if got := mustRun(t, "settings", "get", "-o", "value", "node-down-pod-deletion-policy"); got != "do-nothing\n" {
		t.Fatalf("get after reset = %q", got)
	}
}

func TestSettingsCmd_Set_InvalidValueWritesNothing(t *testing.T) {
	isolate(t)
	mustRun(t, "settings", "set", "node-down-pod-deletion-policy", "delete-deployment-pod")
	_, err := runSettingsCLI(t, "settings", "set", "node-down-pod-deletion-policy", "delete-everything")
	if !errors.Is(err, settings.ErrInvalidValue) {
		t.Fatalf("set invalid = %v, want ErrInvalidValue", err)
	}
	for _, choice := range []string{"do-nothing", "delete-statefulset-pod", "delete-deployment-pod", "delete-both-statefulset-and-deployment-pod", "delete-everything"} {
		if !strings.Contains(err.Error(), choice) {
			t.Errorf("error %q does not name %s", err, choice)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error is not one line: %q", err)
	}
	if got := mustRun(t, "settings", "get", "-o", "value", "node-down-pod-deletion-policy"); got != "delete-deployment-pod\n" {
		t.Fatalf("value after a refused set = %q", got)
	}
	// A refused value does not even create the store file.
	fresh := filepath.Join(t.TempDir(), "fresh.db")
	if _, err := runSettingsCLI(t, "settings", "set", "--store", "bolt:"+fresh, "crash-loop-restart-limit", "0"); err == nil {
		t.Fatal("out-of-range set succeeded")
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused set created %s (%v)", fresh, err)
	}
}

func TestSettingsCmd_UnknownSetting(t *testing.T) {
	isolate(t)
	for _, args := range [][]string{
		{"settings", "set", "dryrun", "true"}, {"settings", "get", "dryrun"}, {"settings", "reset", "dryrun"},
	} {
		_, err := runSettingsCLI(t, args...)
		if !errors.Is(err, settings.ErrUnknownSetting) || !strings.Contains(err.Error(), "did you mean dry-run") {
			t.Errorf("%v = %v, want an unknown setting suggesting dry-run", args, err)
		}
	}
}

func TestSettingsCmd_ManagedRefused(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "node-down-pod-deletion-policy")
	if err := os.WriteFile(path, []byte("delete-both-statefulset-and-deployment-pod\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"settings", "--settings-dir", dir, "set", "node-down-pod-deletion-policy", "do-nothing"},
		{"settings", "reset", "--settings-dir", dir, "node-down-pod-deletion-policy"},
	} {
		_, err := runSettingsCLI(t, args...)
		if !errors.Is(err, settings.ErrManaged) || !strings.Contains(err.Error(), path) {
			t.Errorf("%v = %v, want refused naming %s", args, err, path)
		}
	}
	out := mustRun(t, "settings", "list", "--settings-dir", dir, "-o", "json")
	var entries []map[string]string
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		t.Fatal(err)
	}
	if e := entries[0]; e["source"] != "managed" || e["managedPath"] != path || e["value"] != "delete-both-statefulset-and-deployment-pod" {
		t.Fatalf("list entry %v", e)
	}
	if got := mustRun(t, "settings", "get", "-o", "value", "node-down-pod-deletion-policy"); got != "do-nothing\n" {
		t.Fatalf("the store was written: %q", got)
	}
}

func TestSettingsCmd_List_Formats(t *testing.T) {
	isolate(t)
	mustRun(t, "settings", "set", "dry-run", "true")
	var fromJSON, fromYAML []map[string]string
	if err := json.Unmarshal([]byte(mustRun(t, "settings", "list", "-o", "json")), &fromJSON); err != nil {
		t.Fatalf("list -o json: %v", err)
	}
	if err := yaml.Unmarshal([]byte(mustRun(t, "settings", "list", "-o", "yaml")), &fromYAML); err != nil {
		t.Fatalf("list -o yaml: %v", err)
	}
	for _, entries := range [][]map[string]string{fromJSON, fromYAML} {
		if len(entries) != len(settings.Definitions()) {
			t.Fatalf("%d entries, want every setting (%d)", len(entries), len(settings.Definitions()))
		}
		for i, d := range settings.Definitions() {
			e := entries[i]
			if e["name"] != d.Name || e["default"] != d.Default || e["source"] == "" {
				t.Errorf("entry %v for %s", e, d.Name)
			}
			if d.Name == "dry-run" && (e["value"] != "true" || e["source"] != "store") {
				t.Errorf("dry-run entry %v, want true from the store", e)
			}
		}
	}
	table := mustRun(t, "settings", "list")
	if !strings.HasPrefix(table, "NAME") || strings.Count(table, "\n") != len(settings.Definitions())+1 {
		t.Errorf("table output:\n%s", table)
	}
	if _, err := runSettingsCLI(t, "settings", "list", "-o", "xml"); err == nil || !strings.Contains(err.Error(), "table, json, yaml") {
		t.Errorf("list -o xml = %v", err)
	}
}

func TestSettingsCmd_StoreChoice(t *testing.T) {
	isolate(t)
	other := "bolt:" + filepath.Join(t.TempDir(), "other.db")
	mustRun(t, "settings", "--store", other, "set", "dry-run", "true")
	if got := mustRun(t, "settings", "get", "--store", other, "-o", "value", "dry-run"); got != "true\n" {
		t.Fatalf("--store after the subcommand: %q", got)
	}
	if got := mustRun(t, "settings", "get", "-o", "value", "dry-run"); got != "false\n" {
		t.Fatalf("VIGIL_SETTINGS_STORE store was written: %q", got)
	}
	t.Setenv(settings.StoreEnv, "")
	mustRun(t, "settings", "set", "crash-loop-restart-limit", "9")
	if _, err := os.Stat(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "vigil", "settings.db")); err != nil {
		t.Fatalf("default store not at $XDG_CONFIG_HOME/vigil/settings.db: %v", err)
	}
}

func TestSettingsCmd_BadStore(t *testing.T) {
	isolate(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want error
	}{
		{[]string{"settings", "--store", "etcd:x", "list"}, settings.ErrInvalidStoreSpec},
		{[]string{"settings", "--store", "configmap:vigil-system/vigil-settings", "--kubeconfig", kubeconfig, "set", "dry-run", "true"}, settings.ErrStoreUnavailable},
	}
	for _, tc := range tests {
		_, err := runSettingsCLI(t, tc.args...)
		if !errors.Is(err, tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v = %v, want one line wrapping %v", tc.args, err, tc.want)
		}
	}
}

func TestSettingsCmd_Args(t *testing.T) {
	isolate(t)
	for _, args := range [][]string{
		{"settings", "set", "dry-run"}, {"settings", "get"}, {"settings", "list", "extra"},
		{"settings", "set", "dry-run", "true", "extra"},
	} {
		if _, err := runSettingsCLI(t, args...); err == nil || !strings.Contains(err.Error(), "settings ") {
			t.Errorf("%v = %v, want a usage error", args, err)
		}
	}
}

func TestSettingsCmd_SetHelpListsSettings(t *testing.T) {
	app := App()
	var out bytes.Buffer
	app.Writer = &out
	if err := app.Run([]string{"vigil-manager", "settings", "set", "--help"}); err != nil {
		t.Fatal(err)
	}
	for _, d := range settings.Definitions() {
		if !strings.Contains(out.String(), d.Name) {
			t.Errorf("settings set --help does not list %s", d.Name)
		}
	}
}

// TestSettingsCmd_AcrossProcesses builds the real binary and runs it as separate
// processes against one bolt file, as a user would.
func TestSettingsCmd_AcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "vigil-manager")
	// The flags of `make build`, so the build cache it filled is reused.
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "../cmd/vigil-manager")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	store := "bolt:" + filepath.Join(t.TempDir(), "settings.db")
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), settings.StoreEnv+"="+store)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	if _, stderr, err := run("settings", "set", "node-down-pod-deletion-policy", "delete-statefulset-pod"); err != nil {
		t.Fatalf("set: %v: %s", err, stderr)
	}
	_, stderr, err := run("settings", "set", "node-down-pod-deletion-policy", "delete-everything")
	if err == nil {
		t.Fatal("invalid set exited 0")
	}
	if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "vigil-manager: ") ||
		!strings.Contains(stderr, "delete-both-statefulset-and-deployment-pod") {
		t.Fatalf("stderr %q, want one line naming the choices", stderr)
	}
	out, stderr, err := run("settings", "get", "-o", "value", "node-down-pod-deletion-policy")
	if err != nil || out != "delete-statefulset-pod\n" {
		t.Fatalf("get in a new process = %q, %v (%s)", out, err, stderr)
	}
	// The change was recorded, by the CLI, and the refused one was not.
	out, stderr, err = run("settings", "history", "-o", "json")
	var records []settings.ChangeRecord
	if err != nil || json.Unmarshal([]byte(out), &records) != nil || len(records) != 1 ||
		records[0].New != "delete-statefulset-pod" || records[0].Actor.Source != settings.ActorCLI {
		t.Fatalf("history in a new process = %q, %v (%s); want the one change, by the CLI", out, err, stderr)
	}
}

func TestSettingsCmd_UnknownSubcommand(t *testing.T) {
	isolate(t)
	if _, err := runSettingsCLI(t, "settings", "frob"); err == nil || !strings.Contains(err.Error(), "list, get, set, reset or history") {
		t.Fatalf("settings frob = %v", err)
	}
	if _, err := runSettingsCLI(t, "settings"); err != nil {
		t.Fatalf("settings alone (help) = %v", err)
	}
}

// TestSettingsCmd_SettingsInputFromOutside reproduces inputs as a new
// user tried it: an emptied overlay file, an unknown name in capitals and a
// 10 KB value.
func TestSettingsCmd_SettingsInputFromOutside(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	t.Run("EmptyOverlayFile", func(t *testing.T) {
		mustRun(t, "settings", "set", "node-down-grace-period", "4s")
		path := filepath.Join(dir, "node-down-grace-period")
		if err := os.WriteFile(path, nil, 0o644); err != nil { // `: > DIR/node-down-grace-period`
			t.Fatal(err)
		}
		var entries []struct {
			Name, Problem, ManagedPath string
			Blocking                   bool
		}
		if err := json.Unmarshal([]byte(mustRun(t, "settings", "--settings-dir", dir, "list", "-o", "json")), &entries); err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			// Blocking: a process starting now never saw a good value in the file.
			if e.Name == "node-down-grace-period" && (!strings.Contains(e.Problem, path) ||
				!strings.Contains(e.Problem, `invalid value ""`) || e.ManagedPath != path || !e.Blocking) {
				t.Fatalf("entry %+v: want the empty file reported as a blocking problem naming %s", e, path)
			}
		}
		table := mustRun(t, "settings", "--settings-dir", dir, "list")
		if !strings.Contains(table, "! node-down-grace-period: ") {
			t.Fatalf("table lacks the problem line:\n%s", table)
		}
	})
	t.Run("UnknownNameInCapitals", func(t *testing.T) {
		for _, args := range [][]string{
			{"settings", "set", "DRY-RUN", "true"}, {"settings", "get", "DRY-RUN"}, {"settings", "reset", "DRY-RUN"},
		} {
			_, err := runSettingsCLI(t, args...)
			if !errors.Is(err, settings.ErrUnknownSetting) || !strings.Contains(err.Error(), "did you mean dry-run") {
				t.Errorf("%v = %v, want an unknown setting suggesting dry-run", args, err)
			}
		}
		_, err := runSettingsCLI(t, "settings", "set", "volume-attachment-recovery-policy", "IMMEDIATE")
		if !errors.Is(err, settings.ErrInvalidValue) || !strings.Contains(err.Error(), "did you mean immediate") {
			t.Errorf("set IMMEDIATE = %v, want a refusal suggesting immediate", err)
		}
	})
	t.Run("TenKilobyteValue", func(t *testing.T) {
		long := strings.Repeat("x", 10*1024)
		_, err := runSettingsCLI(t, "settings", "set", "node-down-grace-period", long)
		if !errors.Is(err, settings.ErrInvalidValue) {
			t.Fatalf("set of a 10 KB value = %v", err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "setting node-down-grace-period: ") || len(msg) > 300 || strings.Contains(msg, "\n") {
			t.Fatalf("error of %d bytes: %.300q; want one short line that names the setting first", len(msg), msg)
		}
	})
}

func TestSettingsCmd_History(t *testing.T) {
	isolate(t)
	if out := mustRun(t, "settings", "history"); out != "no changes recorded\n" {
		t.Fatalf("history of a new store = %q", out)
	}
	if out := mustRun(t, "settings", "history", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("history -o json of a new store = %q, want []", out)
	}
	mustRun(t, "settings", "set", "node-down-grace-period", "90s")
	mustRun(t, "settings", "set", "dry-run", "true")
	mustRun(t, "settings", "reset", "node-down-grace-period")
	var records []settings.ChangeRecord
	if err := json.Unmarshal([]byte(mustRun(t, "settings", "history", "-o", "json")), &records); err != nil {
		t.Fatal(err)
	}
	who := settings.Actor{Source: settings.ActorCLI, Identity: osUser()}
	want := []struct{ setting, old, new string }{
		{"node-down-grace-period", "1m30s", "2s"}, {"dry-run", "false", "true"}, {"node-down-grace-period", "2s", "1m30s"},
	}
	if len(records) != len(want) {
		t.Fatalf("history %+v, want %d records", records, len(want))
	}
	for i, w := range want {
		r := records[i]
		if r.Setting != w.setting || r.Old != w.old || r.New != w.new || r.Actor != who || r.Time.IsZero() {
			t.Errorf("record %d = %+v, want %s %s -> %s by %+v", i, r, w.setting, w.old, w.new, who)
		}
	}
	if who.Identity == "" {
		t.Error("the OS user is unknown")
	}
	var fromYAML []settings.ChangeRecord
	if err := yaml.Unmarshal([]byte(mustRun(t, "settings", "history", "-o", "yaml", "--limit", "1")), &fromYAML); err != nil ||
		len(fromYAML) != 1 || fromYAML[0].Setting != "node-down-grace-period" {
		t.Fatalf("history -o yaml --limit 1 = %+v, %v", fromYAML, err)
	}
	table := mustRun(t, "settings", "history")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "TIME") ||
		!strings.Contains(lines[2], "false (default)") || !strings.Contains(lines[2], "true (store)") ||
		!strings.Contains(lines[2], "cli ("+osUser()+")") {
		t.Fatalf("history table:\n%s", table)
	}
	for _, args := range [][]string{
		{"settings", "history", "--limit", "0"}, {"settings", "history", "--limit", "501"},
		{"settings", "history", "-o", "xml"}, {"settings", "history", "extra"},
	} {
		if _, err := runSettingsCLI(t, args...); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v = %v, want a one-line refusal", args, err)
		}
	}
	_, err := runSettingsCLI(t, "settings", "history", "--limit", "0")
	if err == nil || !strings.Contains(err.Error(), "from 1 to 500") {
		t.Errorf("--limit 0 = %v, want what is allowed", err)
	}
}

// TestSettingsCmd_FlagsAfterArguments: kubectl habits work, in every command.
func TestSettingsCmd_FlagsAfterArguments(t *testing.T) {
	isolate(t)
	mustRun(t, "settings", "set", "node-down-pod-deletion-policy", "delete-statefulset-pod")
	if got := mustRun(t, "settings", "get", "node-down-pod-deletion-policy", "-o", "value"); got != "delete-statefulset-pod\n" {
		t.Errorf("settings get NAME -o value = %q", got)
	}
	if got := mustRun(t, "settings", "get", "node-down-pod-deletion-policy", "--output=json"); !strings.Contains(got, `"value": "delete-statefulset-pod"`) && !strings.Contains(got, `"value":"delete-statefulset-pod"`) {
		t.Errorf("settings get NAME --output=json = %q", got)
	}
	if _, err := runSettingsCLI(t, "settings", "get", "node-down-pod-deletion-policy", "-o", "xml"); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Errorf("settings get NAME -o xml = %v, want the bad format refused by name", err)
	}
	// A parent command's flag after the subcommand's arguments.
	other := "bolt:" + filepath.Join(t.TempDir(), "other.db")
	mustRun(t, "settings", "set", "dry-run", "true", "--store", other)
	if got := mustRun(t, "settings", "get", "dry-run", "-o", "value", "--store", other); got != "true\n" {
		t.Errorf("settings get dry-run --store OTHER = %q, want true", got)
	}
	if got := mustRun(t, "settings", "get", "dry-run", "-o", "value"); got != "false\n" {
		t.Errorf("the default store changed: dry-run = %q", got)
	}
	if err := cliflags.Check(App()); err != nil {
		t.Fatal(err)
	}
}
