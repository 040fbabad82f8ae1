package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/deploy"
	"github.com/vigil-storage/vigil/httpapi"
)

// uiRun is the real `vigil-manager run` the browser tests drive: a bolt store in
// a temp dir (dry run on, so the policies the test sets never act on the shared
// sandbox), a managed overlay directory that locks crash-loop-restart-limit, and
// the API token in a file.
type uiRun struct {
	m       *manager
	store   string
	token   string
	overlay string
	base    string
}

const uiToken = "e2e-ui-token-0123456789abcdef"

func startUIManager(t *testing.T) *uiRun {
	t.Helper()
	dir := t.TempDir()
	r := &uiRun{store: filepath.Join(dir, "settings.db"), token: uiToken, overlay: filepath.Join(dir, "overlay")}
	must(t, os.MkdirAll(r.overlay, 0o755))
	must(t, os.WriteFile(filepath.Join(r.overlay, "crash-loop-restart-limit"), []byte("7\n"), 0o644))
	tokenFile := filepath.Join(dir, "token")
	must(t, os.WriteFile(tokenFile, []byte(r.token+"\n"), 0o600))
	setSetting(t, r.store, "dry-run", "true")
	// Under the manager's identity of deploy/, which may hold only its own Lease.
	r.m = startManager(t, "ui", managerOpts{store: r.store, leaseNamespace: vigil.Namespace, leaseName: vigil.ManagerLeaseName,
		extra: []string{"--api-token-file", tokenFile, "--settings-dir", r.overlay}})
	r.base = "http://" + r.m.addr
	return r
}

// getSetting runs `vigil-manager settings get NAME -o value` on the store.
func (r *uiRun) getSetting(t *testing.T, name string) string {
	t.Helper()
	return strings.TrimSpace(r.settingsCmd(t, "get", "-o", "value", name))
}

// settingsCmd runs `vigil-manager settings CMD --store bolt:STORE ARGS...`.
func (r *uiRun) settingsCmd(t *testing.T, cmd string, args ...string) string {
	t.Helper()
	bin, err := filepath.Abs(managerBin)
	must(t, err)
	out, err := exec.Command(bin, append([]string{"settings", cmd, "--store", "bolt:" + r.store}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("settings %s %v: %v\n%s", cmd, args, err, out)
	}
	return string(out)
}

// identity is who the history names for a change made with the test's token
// from loopback: the token's fingerprint (the first 8 hex digits of its
// SHA-256) and the address.
func (r *uiRun) identity() string {
	sum := sha256.Sum256([]byte(r.token))
	return httpapi.TokenIdentityPrefix + hex.EncodeToString(sum[:])[:8] + " from 127.0.0.1"
}

// installCRD applies the NodeRecovery CRD (embedded in package deploy) and waits
// until it is served.
func installCRD(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	raw, err := deploy.CRDs.ReadFile("crds/vigil.io_noderecoveries.yaml")
	must(t, err)
	obj := &unstructured.Unstructured{}
	must(t, yaml.Unmarshal(raw, &obj.Object))
	dyn, err := dynamic.NewForConfig(sb.RESTConfig())
	must(t, err)
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the NodeRecovery CRD: %v", err)
	}
	c, err := v1alpha1.NewForConfig(sb.RESTConfig())
	must(t, err)
	for {
		if _, err := c.List(ctx, metav1.ListOptions{}); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the NodeRecovery CRD is not served after 60 s")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// setControl sets a form control's value as a person's choice does, with the
// input and change events the page listens to.
func setControl(sel, value string) chromedp.Action {
	return chromedp.Evaluate(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q;
		e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`, sel, value), nil)
}

// textOf reads the visible text of sel into out. It reads it in the page, in one step, once the element is there and
// rendered: the live pages re-render their rows as Events arrive, and a node
// looked up first and read afterwards may be gone by then ("No node with given
// id found").
func textOf(sel string, out *string) chromedp.Action {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e && e.getClientRects().length ? e.innerText : null })()`, sel)
	return chromedp.ActionFunc(func(ctx context.Context) error {
		for {
			var v *string
			if err := chromedp.Evaluate(js, &v).Do(ctx); err != nil {
				return fmt.Errorf("text of %s: %w", sel, err)
			}
			if v != nil {
				*out = *v
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("text of %s: no visible element: %w", sel, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

// The settings page in a real browser against the real binary: policies changed
// through the controls are in force for `vigil-manager settings get`, an invalid
// duration shows its error inline and changes nothing, a managed setting is
// locked, two settings are saved at once, a CLI change reaches the open page
// through the event stream, the history panel and `vigil-manager settings
// history` name the UI's changes and who made them, the nodes page shows the
// cluster (without a datapath, and says so), and an overlay file that blocks
// acting brings the banner to the open page and takes it away when removed.
// TestLoop/UIRecovery shows a recovery the closed loop makes.
func TestUI_Browser(t *testing.T) {
	installCRD(t)
	r := startUIManager(t)
	b := newBrowser(t)

	t.Run("load the settings page", func(t *testing.T) {
		var title string
		b.run(t, "load /", chromedp.Navigate(r.base+"/"), chromedp.WaitVisible("#settings-form", chromedp.ByQuery), chromedp.Title(&title))
		if title != "Settings · Vigil" {
			t.Errorf("title %q", title)
		}
		fcp, resp := b.paintTiming(t)
		t.Logf("settings page, first load in a new browser: first contentful paint %.1f ms, response end %.1f ms (navigation timing)", fcp, resp)
		for i := range 3 {
			b.run(t, "load / again", chromedp.Navigate(r.base+"/"), chromedp.WaitVisible("#settings-form", chromedp.ByQuery))
			fcp, resp = b.paintTiming(t)
			t.Logf("settings page, load %d: first contentful paint %.1f ms, response end %.1f ms", i+2, fcp, resp)
		}
		var banner string
		b.run(t, "dry-run banner", textOf("#dry-run-banner", &banner), chromedp.WaitVisible(`#live-status.on`, chromedp.ByQuery))
		if !strings.Contains(banner, "Dry run.") {
			t.Errorf("dry-run banner %q", banner)
		}
		b.screenshot(t, "settings-loaded")
	})

	t.Run("a managed setting is locked", func(t *testing.T) {
		var disabled, note string
		var ok bool
		b.run(t, "locked control", chromedp.AttributeValue("#in-crash-loop-restart-limit", "disabled", &disabled, &ok, chromedp.ByQuery),
			textOf("#setting-crash-loop-restart-limit .locked-note", &note))
		if !ok || !strings.Contains(note, filepath.Join(r.overlay, "crash-loop-restart-limit")) {
			t.Errorf("disabled=%t note %q", ok, note)
		}
	})

	t.Run("change a policy through the controls", func(t *testing.T) {
		var saved string
		b.run(t, "choose and save",
			chromedp.SendKeys("#token", r.token, chromedp.ByQuery),
			setControl("#in-node-down-pod-deletion-policy", "delete-statefulset-pod"),
			chromedp.WaitVisible("#setting-node-down-pod-deletion-policy.dirty", chromedp.ByQuery),
			chromedp.Click("#save", chromedp.ByQuery),
			chromedp.WaitVisible("#saved-banner", chromedp.ByQuery), textOf("#saved-banner", &saved))
		if got := r.getSetting(t, "node-down-pod-deletion-policy"); got != "delete-statefulset-pod" {
			t.Fatalf("settings get after saving in the UI: %q (banner %q)", got, saved)
		}
		var kept bool
		b.run(t, "token kept for the tab", chromedp.Evaluate(`sessionStorage.getItem("vigil-api-token") !== null`, &kept))
		if !kept {
			t.Error("the token was not kept for the tab")
		}
	})

	t.Run("an invalid duration shows an inline error and changes nothing", func(t *testing.T) {
		var inline, banner string
		b.run(t, "type an invalid duration",
			chromedp.Evaluate(`document.querySelector("#in-node-down-grace-period").value = ""`, nil),
			chromedp.SendKeys("#in-node-down-grace-period", "5 minutes", chromedp.ByQuery),
			chromedp.WaitVisible("#err-node-down-grace-period", chromedp.ByQuery),
			textOf("#err-node-down-grace-period", &inline),
			chromedp.Click("#save", chromedp.ByQuery),
			chromedp.WaitVisible("#error-banner", chromedp.ByQuery), textOf("#error-banner", &banner))
		if !strings.Contains(inline, `setting node-down-grace-period: invalid value "5 minutes"`) || !strings.Contains(inline, "allowed: a duration") {
			t.Errorf("inline error %q", inline)
		}
		if !strings.Contains(banner, "Nothing was saved") {
			t.Errorf("banner %q", banner)
		}
		b.screenshot(t, "settings-invalid")
		if got := r.getSetting(t, "node-down-grace-period"); got != "2s" {
			t.Fatalf("the store changed: node-down-grace-period = %q", got)
		}
		// Leaving with the unsaved change asks first (the guard); the test accepts.
		before := b.dialogCount()
		b.run(t, "reload", chromedp.Reload(), chromedp.WaitVisible("#settings-form", chromedp.ByQuery))
		if b.dialogCount() != before+1 {
			t.Errorf("no unsaved-changes dialog on leaving (%d dialogs)", b.dialogCount())
		}
	})

	t.Run("save two settings at once", func(t *testing.T) {
		b.run(t, "two changes, one save",
			chromedp.WaitVisible("#token-kept", chromedp.ByQuery),
			chromedp.Click("#in-fast-fenced-trigger", chromedp.ByQuery),
			setControl("#in-volume-attachment-recovery-policy", "immediate"),
			chromedp.WaitVisible("#setting-volume-attachment-recovery-policy.dirty", chromedp.ByQuery),
			chromedp.Click("#save", chromedp.ByQuery),
			chromedp.Poll(`document.querySelector("#saved-banner")?.textContent.includes("2 setting(s) changed") === true`, nil,
				chromedp.WithPollingTimeout(20*time.Second)))
		if a, v := r.getSetting(t, "fast-fenced-trigger"), r.getSetting(t, "volume-attachment-recovery-policy"); a != "true" || v != "immediate" {
			t.Fatalf("after one save: fast-fenced-trigger=%q volume-attachment-recovery-policy=%q", a, v)
		}
		b.screenshot(t, "settings-saved")
	})

	t.Run("a CLI change appears in the open page", func(t *testing.T) {
		t0 := time.Now()
		setSetting(t, r.store, "node-not-ready-debounce", "42s")
		b.run(t, "wait for the value", chromedp.Poll(
			`document.querySelector("#setting-node-not-ready-debounce [data-role=value]").textContent === "42s"`, nil,
			chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
		t.Logf("CLI change → open page: %s (from starting `vigil-manager settings set` to the page showing the value)", time.Since(t0).Round(time.Millisecond))
		var history string
		b.run(t, "the history panel", chromedp.Poll(`document.querySelector("#history")?.textContent.includes("node-not-ready-debounce") === true`, nil,
			chromedp.WithPollingTimeout(20*time.Second)), textOf("#history", &history))
		if !strings.Contains(history, "volume-attachment-recovery-policy") || !strings.Contains(history, r.identity()) {
			t.Errorf("history panel %q: want the UI's changes by %s", history, r.identity())
		}
		b.screenshot(t, "settings")
	})

	t.Run("settings history shows the changes made in the UI", func(t *testing.T) {
		out := r.settingsCmd(t, "history")
		for _, want := range []string{"node-down-pod-deletion-policy", "delete-statefulset-pod", "ui (" + r.identity() + ")",
			"fast-fenced-trigger", "cli ("} {
			if !strings.Contains(out, want) {
				t.Errorf("`vigil-manager settings history` lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("the nodes page shows the sandbox's nodes", func(t *testing.T) {
		var heartbeat, source string
		b.run(t, "load /nodes", chromedp.Navigate(r.base+"/nodes"), chromedp.WaitVisible("#node-node-1", chromedp.ByQuery),
			chromedp.WaitVisible("#node-node-3", chromedp.ByQuery),
			textOf("#node-node-1 [data-role=heartbeat]", &heartbeat), textOf("#nodes-source", &source))
		// This manager runs without --datapath: the page says so instead of showing empty columns.
		if heartbeat != "no datapath" || !strings.Contains(source, "without --datapath") {
			t.Errorf("heartbeat cell %q, source %q", heartbeat, source)
		}
		b.screenshot(t, "nodes-without-datapath")
	})

	t.Run("a refused overlay file shows the blocked banner live", func(t *testing.T) {
		bad := filepath.Join(r.overlay, "dry-runn")
		b.run(t, "load /nodes", chromedp.Navigate(r.base+"/nodes"), chromedp.WaitVisible(`#live-status.on`, chromedp.ByQuery))
		must(t, os.WriteFile(bad, []byte("true\n"), 0o644))
		var banner string
		b.run(t, "the banner appears", chromedp.WaitVisible("#blocked-banner", chromedp.ByQuery), textOf("#blocked-banner", &banner))
		for _, want := range []string{"Vigil is not acting.", bad, "names no setting", "allowed: a file named after a setting"} {
			if !strings.Contains(banner, want) {
				t.Errorf("banner %q lacks %q", banner, want)
			}
		}
		b.screenshot(t, "blocked")
		// Every page has it, rendered by the server too.
		b.run(t, "on the settings page", chromedp.Navigate(r.base+"/"), chromedp.WaitVisible("#blocked-banner", chromedp.ByQuery))
		must(t, os.Remove(bad))
		b.run(t, "the banner goes", chromedp.WaitNotVisible("#blocked-banner", chromedp.ByQuery))
	})

	t.Run("the recoveries page reads the API server", func(t *testing.T) {
		var text string
		b.run(t, "load /recoveries", chromedp.Navigate(r.base+"/recoveries"), chromedp.WaitVisible("#live", chromedp.ByQuery), textOf("#live", &text))
		if strings.Contains(text, "cannot be shown") {
			t.Errorf("recoveries page: %q", text)
		}
		// TestLoop/UIRecovery shows one the closed loop made.
	})
}
