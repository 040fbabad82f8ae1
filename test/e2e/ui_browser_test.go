package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// screenshotsEnv names a directory; when set, the browser tests save a PNG of
// every page they look at there.
const screenshotsEnv = "VIGIL_SCREENSHOTS"

// chromiumFlags keep headless Chromium off the network (the machine has only
// loopback) and out of the user's profile.
var chromiumFlags = []string{"no-sandbox", "disable-gpu", "disable-quic", "no-first-run",
	"disable-background-networking", "disable-component-update", "disable-sync"}

// browser is one headless Chromium (Debian's chromium package) driven through
// the DevTools protocol, with a fresh profile.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	dialogs []string // the JavaScript dialogs the pages opened (type: message)
}

// newBrowser starts Chromium for the test. A missing browser fails the test
// (never a skip): `apt-get install chromium` (.ci/run does) provides it.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found (install Debian's chromium package, as .ci/run does): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900), chromedp.NoDefaultBrowserCheck,
	}
	for _, f := range chromiumFlags {
		opts = append(opts, chromedp.Flag(f, true))
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx}
	// Accept every dialog (the unsaved-changes guard), remembering it.
	chromedp.ListenTarget(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			b.mu.Lock()
			b.dialogs = append(b.dialogs, string(d.Type)+": "+d.Message)
			b.mu.Unlock()
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return b
}

// run runs actions with a deadline; a failure fails the test with what was tried.
func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	err := chromedp.Run(ctx, actions...)
	if err != nil && lostContext(err) && startsWithNavigate(actions) {
		// The page's script context went away under an action right
		// after the navigation (chromedp kept the id of the context the
		// load replaced): every step of a list that starts by loading the
		// page can run again from the load.
		t.Logf("%s: %v; loading the page again", what, err)
		err = chromedp.Run(ctx, actions...)
	}
	if err != nil {
		b.screenshot(t, "failed-"+filepath.Base(t.Name()))
		t.Fatalf("%s: %v", what, err)
	}
}

// lostContext is the DevTools error of a script run in an execution context
// that no longer exists.
func lostContext(err error) bool {
	return strings.Contains(err.Error(), "Cannot find context with specified id")
}

func startsWithNavigate(actions []chromedp.Action) bool {
	if len(actions) == 0 {
		return false
	}
	_, ok := actions[0].(chromedp.NavigateAction)
	return ok
}

func (b *browser) dialogCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.dialogs)
}

// screenshot saves the whole page as NAME.png into $VIGIL_SCREENSHOTS, if set.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return
	}
	var png []byte
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	// The viewport grows to the whole page first, so the sticky save bar sits at
	// the bottom of the picture instead of over the middle of it.
	var height int64
	err := chromedp.Run(ctx,
		chromedp.Evaluate(`document.documentElement.scrollHeight`, &height),
		chromedp.ActionFunc(func(ctx context.Context) error {
			return chromedp.EmulateViewport(1360, max(height, 600)).Do(ctx)
		}),
		chromedp.Sleep(100*time.Millisecond), // the layout settles
		chromedp.CaptureScreenshot(&png),
		chromedp.EmulateViewport(1360, 900))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// paintTiming reads the browser's own figures for the page just loaded:
// first-contentful-paint and the navigation's responseEnd, in ms since the
// navigation started.
func (b *browser) paintTiming(t *testing.T) (fcp, responseEnd float64) {
	var res struct {
		FCP, ResponseEnd float64
	}
	b.run(t, "read the paint timing", chromedp.Poll(`(() => {
		const p = performance.getEntriesByName("first-contentful-paint")[0];
		const n = performance.getEntriesByType("navigation")[0];
		return p && n ? {FCP: p.startTime, ResponseEnd: n.responseEnd} : null;
	})()`, &res, chromedp.WithPollingTimeout(10*time.Second)))
	return res.FCP, res.ResponseEnd
}
