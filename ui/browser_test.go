package ui

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// screenshotsEnv names a directory; when set, the browser test saves a PNG
// of the page it looks at there (as the end-to-end browser tests do).
const screenshotsEnv = "VIGIL_SCREENSHOTS"

// TestUI_Browser_NodesPageShowsTheDatapathServers: the nodes page in
// Debian's headless Chromium shows, per node, the datapath server it runs
// and its role: the leader, a follower with its last contact, one that does
// not answer (its volumes unavailable, in the colour of a failure), and
// none on a node without one. The end-to-end suite drives the real binary;
// this one needs only the browser.
func TestUI_Browser_NodesPageShowsTheDatapathServers(t *testing.T) {
	testenv.RequireTool(t, "chromium", "Debian's chromium package")
	f := newFixture(t, nil, false)
	path, _ := exec.LookPath("chromium")
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.Headless, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 700), chromedp.NoDefaultBrowserCheck}
	for _, fl := range []string{"no-sandbox", "disable-gpu", "disable-quic", "no-first-run", "disable-background-networking",
		"disable-component-update", "disable-sync"} {
		opts = append(opts, chromedp.Flag(fl, true))
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	ctx, cancelRun := context.WithTimeout(ctx, 60*time.Second)
	defer cancelRun()

	var a, b, c, d, leaderBg, downBg string
	var png []byte
	err := chromedp.Run(ctx,
		chromedp.Navigate(f.srv.URL+PathNodes),
		chromedp.WaitVisible(`#node-node-d`, chromedp.ByQuery),
		chromedp.Text(`#node-node-a [data-role=server]`, &a, chromedp.ByQuery),
		chromedp.Text(`#node-node-b [data-role=server]`, &b, chromedp.ByQuery),
		chromedp.Text(`#node-node-c [data-role=server]`, &c, chromedp.ByQuery),
		chromedp.Text(`#node-node-d [data-role=server]`, &d, chromedp.ByQuery),
		chromedp.Evaluate(`getComputedStyle(document.querySelector("#node-node-b [data-role=server-role]")).backgroundColor`, &leaderBg),
		chromedp.Evaluate(`getComputedStyle(document.querySelector("#node-node-a [data-role=server-role]")).backgroundColor`, &downBg),
		chromedp.FullScreenshot(&png, 100),
	)
	if err != nil {
		t.Fatalf("load the nodes page in chromium: %v", err)
	}
	for _, tc := range []struct{ node, got, want string }{
		{"node-a", a, "unreachable dp-a 10.0.0.1:9600\ndoes not answer: the volumes it holds are unavailable"},
		{"node-b", b, "leader dp-b 10.0.0.2:9600"},
		{"node-c", c, "follower dp-c 10.0.0.3:9600\nleader heard 1.0s ago"},
		{"node-d", d, "none"},
	} {
		if strings.TrimSpace(tc.got) != tc.want {
			t.Errorf("%s's datapath server cell reads %q; want %q", tc.node, tc.got, tc.want)
		}
	}
	if leaderBg == "" || leaderBg == downBg || leaderBg == "rgba(0, 0, 0, 0)" {
		t.Errorf("the leader's pill background %q, the unreachable one's %q: want two colours (is the style sheet served?)", leaderBg, downBg)
	}
	if dir := os.Getenv(screenshotsEnv); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "nodes-datapath-servers.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
