package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/httpapi"
)

// testUIRecovery is the recoveries and nodes pages in a real browser,
// showing a recovery the closed loop makes on real nodes (TestLoop's
// sandbox: Vigil's whole stack and `vigil-manager run --datapath` acting,
// delete-both, the fast trigger, immediate attachment recovery), a
// StatefulSet whose writer container writes to its volume, and a power cut
// of its node. Nothing in the test writes a NodeRecovery, fences or reaps:
// the open recoveries page shows the manager's record as it happens (a new
// row, beside those of the cases before), its timeline complete once the
// node is back and clean; the nodes page shows the node down, fenced and
// tainted with its heartbeat age and its fenced row's epoch.
func (e *loopEnv) testUIRecovery(t *testing.T) {
	base := "http://" + e.mgr.addr
	b := newBrowser(t)
	ctx := context.Background()

	app := e.newLoopApp(t, "ui", "node-1")
	pod := e.waitAppPod(t, app, "", "", 60*time.Second)
	victim := pod.Spec.NodeName
	epoch := waitAttached(t, ctx, e.s, app.pv, victim)
	waitPublished(t, ctx, e.s, victim, pod, app.pv)
	waitVolumesAttached(t, ctx, e.s, victim, app.handle)
	e.waitVolumesInUse(t, victim, app.handle)

	row := "#node-" + victim
	t.Run("the nodes page shows the grant and the heartbeat", func(t *testing.T) {
		var cell, heartbeat string
		b.run(t, "load /nodes", chromedp.Navigate(base+"/nodes"),
			chromedp.Poll(fmt.Sprintf(`document.querySelector(%q)?.textContent.includes(%q) === true`, row, app.handle+" ("+app.pv+") epoch "+fmt.Sprint(epoch)+" granted"), nil,
				chromedp.WithPollingTimeout(20*time.Second)),
			textOf(row+" [data-role=verdict]", &cell), textOf(row+" [data-role=heartbeat]", &heartbeat))
		if cell != httpapi.VerdictUp || !strings.HasSuffix(heartbeat, "ago") {
			t.Errorf("%s: verdict %q, heartbeat %q; want up and an age", victim, cell, heartbeat)
		}
		var source string
		b.run(t, "the source line", textOf("#nodes-source", &source))
		if !strings.Contains(source, "the manager's controllers") || !strings.Contains(source, "the datapath") {
			t.Errorf("source line %q", source)
		}
	})

	var name string
	t.Run("a power cut appears on the open recoveries page", func(t *testing.T) {
		b.run(t, "load /recoveries", chromedp.Navigate(base+"/recoveries"), chromedp.WaitVisible("#live", chromedp.ByQuery))
		// The rows of the cases before this one are on the page too: the
		// one to wait for is new.
		recs, err := e.rc.List(ctx, metav1.ListOptions{})
		must(t, err)
		known := []string{}
		for _, r := range recs.Items {
			known = append(known, "recovery-"+r.Name)
		}
		knownJSON, err := json.Marshal(known)
		must(t, err)
		start := time.Now()
		must(t, e.s.Stop(victim))
		// The page shows it through the event stream: no reload.
		newRow := fmt.Sprintf(`Array.from(document.querySelectorAll('[id^="recovery-%s-"]')).find(el => !%s.includes(el.id) && el.querySelector(".ttr strong")?.textContent.length > 0)`,
			victim, knownJSON)
		b.run(t, "the recovery appears and recovers", chromedp.Poll(newRow+` !== undefined`, nil,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(90*time.Second)))
		shown := time.Since(start)
		var id, ttr string
		b.run(t, "read the row", chromedp.Evaluate(newRow+`.id`, &id))
		b.run(t, "read its time to recover", textOf("#"+id+" .ttr", &ttr))
		name = strings.TrimPrefix(id, "recovery-")
		t.Logf("power cut of %s → the open recoveries page shows NodeRecovery %s recovered in %s: %.2fs (time to recover on the record: %s)",
			victim, name, ttr, shown.Seconds(), ttr)
	})
	if name == "" {
		t.Fatal("no recovery to look at")
	}

	t.Run("the nodes page shows the node down, fenced and tainted", func(t *testing.T) {
		var verdict, fenced, heartbeat, vols string
		b.run(t, "load /nodes", chromedp.Navigate(base+"/nodes"),
			// The taint and the volume's fenced grant arrive in separate
			// live updates; wait for both.
			chromedp.Poll(fmt.Sprintf(`document.querySelector(%q)?.textContent.includes("vigil.io/fenced") === true && `+
				`document.querySelector(%q)?.textContent.includes("fenced") === true`, row, row+" .vols"), nil,
				chromedp.WithPollingTimeout(30*time.Second)),
			textOf(row+" [data-role=verdict]", &verdict), textOf(row+" [data-role=fenced]", &fenced),
			textOf(row+" [data-role=heartbeat]", &heartbeat), textOf(row+" .vols", &vols))
		if verdict != httpapi.VerdictDown || !strings.HasPrefix(fenced, "fenced") || !strings.HasSuffix(heartbeat, "ago") ||
			!strings.Contains(vols, app.handle) || !strings.Contains(vols, "fenced") {
			t.Errorf("%s: verdict %q fenced %q heartbeat %q volumes %q", victim, verdict, fenced, heartbeat, vols)
		}
		b.screenshot(t, "nodes")
		var rep httpapi.NodesReport
		getJSON(t, base+httpapi.PathNodes, &rep)
		for _, n := range rep.Nodes {
			if n.Name == victim && (n.Verdict != httpapi.VerdictDown || !n.Fenced || !n.Tainted || n.HeartbeatAgeSeconds == nil || n.FencedAt == nil) {
				t.Errorf("GET %s: %s = %+v", httpapi.PathNodes, victim, n)
			}
		}
		if rep.Verdicts != httpapi.VerdictsController || rep.Datapath != httpapi.DatapathConnected {
			t.Errorf("GET %s: verdicts %q datapath %q", httpapi.PathNodes, rep.Verdicts, rep.Datapath)
		}
	})

	t.Run("the node returns and the timeline completes", func(t *testing.T) {
		b.run(t, "load /recoveries", chromedp.Navigate(base+"/recoveries"), chromedp.WaitVisible("#recovery-"+name, chromedp.ByQuery))
		must(t, e.s.Start(victim))
		e.waitNodeClean(t, victim, nil)
		done := fmt.Sprintf(`document.querySelectorAll('#recovery-%s + .timeline-row svg circle[fill="#1a7f37"]').length === 6`, name)
		b.run(t, "all six steps done on the open page", chromedp.Poll(done, nil, chromedp.WithPollingTimeout(60*time.Second)))
		var v httpapi.RecoveryView
		getJSON(t, base+httpapi.PathRecoveries+"/"+name, &v)
		for _, s := range v.Steps {
			if s.At == nil || s.AfterSeconds == nil {
				t.Errorf("GET %s/%s: step %s not done", httpapi.PathRecoveries, name, s.Step)
			}
		}
		b.screenshot(t, "recoveries")
		var steps string
		b.run(t, "the recovery's page", chromedp.Navigate(base+"/recoveries/"+name), chromedp.WaitVisible("svg.timeline", chromedp.ByQuery),
			textOf("main", &steps))
		for _, want := range []string{"Recovery of " + victim, "Pods reaped", loopNS + "/" + pod.Name + " of StatefulSet/" + app.name,
			app.handle, "Node back and clean"} {
			if !strings.Contains(steps, want) {
				t.Errorf("recovery page lacks %q", want)
			}
		}
		b.screenshot(t, "recovery")
	})
}

// getJSON GETs url (reads are open on loopback) and decodes the body.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	res, err := http.Get(url)
	must(t, err)
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d", url, res.StatusCode)
	}
	must(t, json.NewDecoder(res.Body).Decode(v))
}
