package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/ledger"
	"github.com/vigil-storage/vigil/settings"
)

// apiOutage is one run of runAPIServerOutage: its sandbox, how long
// kube-apiserver stays stopped, and the datapath's TokenReview outage grace.
type apiOutage struct {
	name, subnet, workDir string
	stop                  time.Duration
	grace                 time.Duration // 0: the datapath's default
}

// TestAPIServerOutage_IOContinues stops kube-apiserver for 75 s, almost four
// times the datapath's TokenReview outage grace (20 s here), with the engines
// proving their nodes by ServiceAccount tokens checked with TokenReview:
// running nodes' I/O and heartbeats must not depend on the API server, so
// every writer keeps writing, nothing is fenced or reaped. `make
// bench-apiserver-outage` is the same with a 5-minute stop and the default
// grace.
func TestAPIServerOutage_IOContinues(t *testing.T) {
	runAPIServerOutage(t, apiOutage{name: "e2e-apistop", subnet: "10.213.232.0/24", workDir: "vigil-e2e-apistop",
		stop: 75 * time.Second, grace: 20 * time.Second})
}

// outageWriter is one StatefulSet pod with a ledger writer on its volume.
type outageWriter struct {
	app    loopApp
	pod    corev1.Pod
	node   string
	epoch  uint64
	target string
	proc   string // the writer's process name on node
	ledger string // its ledger on the host
}

// runAPIServerOutage: a closed-loop sandbox (the manager acting, delete-both,
// the fast trigger), a StatefulSet pod on every node with a ledger writer on
// its Vigil volume; kube-apiserver is stopped for o.stop, then started again.
// During the stop the datapath must go on answering every engine's heartbeat
// (never silent for datapath-connectivity-loss-threshold) and every writer's
// I/O. After it: no writer saw an error (its ledger's sequence has no gap, its
// log no failure), every acknowledged record is on its volume, the datapath
// fenced nothing (each volume one live grant, on the same node at the same
// epoch), no pod was deleted, no NodeRecovery was opened, no node tainted.
func runAPIServerOutage(t *testing.T, o apiOutage) {
	e := upLoopWith(t, loopSpec{name: o.name, subnet: o.subnet, workDir: o.workDir, outageGrace: o.grace})
	ctx := context.Background()
	nodes := []string{"node-1", "node-2", "node-3"}
	ws := e.startOutageWriters(t, nodes)
	if e.mgr.exited() || !e.mgr.isLeader() {
		t.Fatalf("before the outage the manager is not running as the leader:\n%s", e.mgr.tail())
	}

	start := time.Now()
	tl := newTimeline(start)
	hb := watchHeartbeats(e, nodes, start)
	running := false
	defer func() {
		if !running {
			_ = e.s.StartAPIServer(ctx, 2*time.Minute)
		}
	}()
	tl.mark(fmt.Sprintf("kube-apiserver sent SIGTERM (datapath TokenReview outage grace %s)", graceName(o.grace)), start)
	must(t, e.s.StopAPIServer())
	stoppedAt := time.Now()
	tl.mark("kube-apiserver gone", stoppedAt)
	for time.Since(stoppedAt) < o.stop {
		if at := hb.managerExit(); !at.IsZero() {
			tl.mark("the manager exited: "+lastLine(e.mgr.tail()), at)
		}
		time.Sleep(500 * time.Millisecond)
	}
	startAt := time.Now()
	must(t, e.s.StartAPIServer(ctx, 2*time.Minute))
	running = true
	backAt := time.Now()
	apiServerStarting(e.s, startAt, backAt)
	tl.mark(fmt.Sprintf("kube-apiserver started again, /readyz OK (%.0f s after it was gone)", backAt.Sub(stoppedAt).Seconds()), backAt)
	if at := hb.managerExit(); !at.IsZero() {
		tl.mark("the manager exited: "+lastLine(e.mgr.tail()), at)
	}
	e.waitAllReady(t, nodes, corev1.ConditionTrue, 60*time.Second)
	tl.mark("every node Ready", time.Now())
	e.leadAgain(t, tl)
	// Long enough for a leader that would fence or reap on what it sees after
	// the outage to do it: node-down-grace-period and the connectivity window
	// are seconds.
	time.Sleep(8 * time.Second)
	hbs := hb.stop()
	end := time.Now()
	tl.mark("8 s later: writers stopped, ledgers checked", end)
	for _, w := range ws {
		must(t, e.s.KillProcess(w.node, w.proc))
	}

	hbs.check(t)
	stall := e.checkOutageWriters(t, ws, start, backAt, end)
	e.checkOutageUnchanged(t, ws, start)
	t.Log(tl.table(fmt.Sprintf("kube-apiserver stopped for %s → I/O and heartbeats go on, nothing fenced or reaped", o.stop)))
	t.Logf("figures: API server away %.0f s (SIGTERM to /readyz OK; %.0f s with no process), datapath TokenReview outage grace %s: longest writer stall %s; longest heartbeat gap the datapath showed %s",
		backAt.Sub(start).Seconds(), backAt.Sub(stoppedAt).Seconds(), graceName(o.grace), stall, hbs.longest())
}

// startOutageWriters creates a StatefulSet of one pod with a claim on each
// of nodes, starts a ledger writer on each pod's volume and waits until
// every writer has acknowledged records.
func (e *loopEnv) startOutageWriters(t *testing.T, nodes []string) []*outageWriter {
	t.Helper()
	ctx := context.Background()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", sandbox.BinVigilSandbox))
	must(t, err)
	ws := make([]*outageWriter, len(nodes))
	for i, n := range nodes {
		ws[i] = &outageWriter{app: e.newLoopAppWith(t, fmt.Sprintf("io%d", i+1), n, tolerateUnreachable)}
	}
	ledgers := t.TempDir()
	for _, w := range ws {
		w.pod = e.waitAppPod(t, w.app, "", "", 60*time.Second)
		w.node = w.pod.Spec.NodeName
		w.epoch = waitAttached(t, ctx, e.s, w.app.pv, w.node)
		w.target = waitPublished(t, ctx, e.s, w.node, w.pod, w.app.pv)
		w.proc, w.ledger = "writer-"+w.app.name, filepath.Join(ledgers, w.app.name+".ledger")
		must(t, e.s.RunOnNode(w.node, sandbox.ProcessSpec{Name: w.proc, Args: []string{bin, "writer",
			"--dir", w.target, "--pod-uid", string(w.pod.UID), "--ledger", w.ledger, "--own-mount-namespace"}}))
	}
	waitAcked(t, ws, 10, 30*time.Second)
	return ws
}

// leadAgain starts a new manager if the one before the outage exited, as its
// Deployment would, and waits until the manager leads: a new process leads
// once the old Lease has run out by its own clock.
func (e *loopEnv) leadAgain(t *testing.T, tl *timeline) {
	t.Helper()
	if e.mgr.exited() {
		e.mgr = startManager(t, "after-outage", e.mgrOpts)
		tl.mark("a new manager started (as its Deployment would start it)", time.Now())
	}
	must(t, sandbox.Poll(context.Background(), 45*time.Second, "the manager leads", func(context.Context) (bool, string, error) {
		return e.mgr.isLeader(), "", nil
	}, e.describe))
	tl.mark("the manager leads", time.Now())
}

func graceName(g time.Duration) string {
	if g == 0 {
		return "default (2m0s)"
	}
	return g.String()
}

// waitAcked waits until every writer has acknowledged at least n records.
func waitAcked(t *testing.T, ws []*outageWriter, n int, timeout time.Duration) {
	t.Helper()
	must(t, sandbox.Poll(context.Background(), timeout, fmt.Sprintf("every writer has %d records acknowledged", n), func(context.Context) (bool, string, error) {
		var short []string
		for _, w := range ws {
			acks, _ := ledger.ReadLedger(w.ledger)
			if len(acks) < n {
				short = append(short, fmt.Sprintf("%s: %d", w.app.name, len(acks)))
			}
		}
		return len(short) == 0, strings.Join(short, " "), nil
	}, nil))
}

// heartbeatWatch polls the datapath's node report twice a second and keeps,
// per node, the longest time since its last heartbeat that it showed.
// It also notes when the manager exited.
type heartbeatWatch struct {
	done     chan struct{}
	finished chan struct{}
	mu       sync.Mutex
	maxAge   map[string]time.Duration
	maxAt    map[string]time.Duration // when maxAge was seen, after start
	errs     int
	firstErr error
	mgrExit  time.Time
}

func watchHeartbeats(e *loopEnv, nodes []string, start time.Time) *heartbeatWatch {
	h := &heartbeatWatch{done: make(chan struct{}), finished: make(chan struct{}),
		maxAge: map[string]time.Duration{}, maxAt: map[string]time.Duration{}}
	for _, n := range nodes {
		h.maxAge[n] = 0
	}
	mgr := e.mgr
	go func() {
		defer close(h.finished)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			r, err := e.dp.Nodes(ctx)
			cancel()
			h.mu.Lock()
			if h.mgrExit.IsZero() && mgr.exited() {
				h.mgrExit = time.Now()
			}
			if err != nil {
				h.errs++
				if h.firstErr == nil {
					h.firstErr = fmt.Errorf("%.1fs after the stop: %w", time.Since(start).Seconds(), err)
				}
			}
			for _, n := range r.Nodes {
				if age := r.Now.Sub(n.LastHeartbeat); age > h.maxAge[n.Node] {
					h.maxAge[n.Node], h.maxAt[n.Node] = age, time.Since(start)
				}
			}
			h.mu.Unlock()
			select {
			case <-h.done:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

// managerExit is when the watch first saw the manager exited; zero if not.
func (h *heartbeatWatch) managerExit() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mgrExit
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// check fails t if a node's heartbeat was older than the manager's
// datapath-connectivity-loss-threshold (its default) or the report failed.
func (h *heartbeatWatch) check(t *testing.T) {
	t.Helper()
	def, err := settings.Lookup(settings.NameDatapathConnectivityLossThreshold)
	must(t, err)
	threshold, err := time.ParseDuration(def.Default)
	must(t, err)
	for n, age := range h.maxAge {
		if age >= threshold {
			t.Errorf("the datapath saw no heartbeat of %s for %.1fs, %.1fs after the SIGTERM (%s %s): the manager would call it storage-isolated",
				n, age.Seconds(), h.maxAt[n].Seconds(), settings.NameDatapathConnectivityLossThreshold, threshold)
		}
	}
	if h.errs > 0 {
		t.Errorf("the datapath's node report failed %d times during the outage, first: %v", h.errs, h.firstErr)
	}
}

// stop ends the polling and returns what it saw.
func (h *heartbeatWatch) stop() *heartbeatWatch {
	close(h.done)
	<-h.finished
	return h
}

// longest is the longest heartbeat age seen, with its node and when.
func (h *heartbeatWatch) longest() string {
	var node string
	var max time.Duration
	for n, a := range h.maxAge {
		if a >= max {
			node, max = n, a
		}
	}
	return fmt.Sprintf("%.1fs (%s, %.1fs after the SIGTERM)", max.Seconds(), node, h.maxAt[node].Seconds())
}

// checkOutageWriters checks every writer: no failure (its ledger gapless,
// its log no failed record), acknowledged records while the API server was
// away (from, to), and every acknowledged record on its volume. It returns
// the longest time a writer went without an acknowledged record from from
// to end, with its writer.
func (e *loopEnv) checkOutageWriters(t *testing.T, ws []*outageWriter, from, to, end time.Time) string {
	t.Helper()
	var worst time.Duration
	var worstAt string
	for _, w := range ws {
		a, err := ledger.CheckFile(w.ledger, from, end)
		must(t, err)
		if !a.Gapless() {
			t.Errorf("writer of %s on %s: a write or fsync returned an error: %s", w.app.name, w.node, a)
		}
		during := a.AckedBetween(from, to)
		if during == 0 {
			t.Errorf("writer of %s on %s acknowledged no record while the API server was away", w.app.name, w.node)
		}
		if a.Stall > worst {
			worst, worstAt = a.Stall, fmt.Sprintf("%s on %s, from %.1fs after the SIGTERM", w.app.name, w.node, a.StallFrom.Sub(from).Seconds())
		}
		if log, err := os.ReadFile(filepath.Join(e.s.NodeDir(w.node), w.proc+".log")); err == nil && strings.Contains(string(log), "not acknowledged") {
			t.Errorf("writer of %s on %s logged a failure:\n%s", w.app.name, w.node, log)
		}
		found, err := ledger.ReadRecords(filepath.Join(w.target, ledger.RecordsFile(string(w.pod.UID))))
		must(t, err)
		res := ledger.Verify(ledger.Pod{UID: string(w.pod.UID), Node: w.node, Acks: a.Acks, Found: found})
		if !res.OK() {
			t.Errorf("writer of %s: %s", w.app.name, res)
		}
		t.Logf("writer of %s on %s: %d acknowledged while the API server was away; %s; %s", w.app.name, w.node, during, a, res)
	}
	if worst > 10*time.Second {
		t.Errorf("a writer went %.1fs without an acknowledged record (%s): its I/O waited for the API server", worst.Seconds(), worstAt)
	}
	return fmt.Sprintf("%.2fs (%s)", worst.Seconds(), worstAt)
}

// checkOutageUnchanged checks that nothing acted: each pod the same and not
// deleted, each volume one live grant on the same node at the same epoch (no
// fence), no node tainted, no NodeRecovery opened since start.
func (e *loopEnv) checkOutageUnchanged(t *testing.T, ws []*outageWriter, start time.Time) {
	t.Helper()
	ctx := context.Background()
	c := e.s.Client()
	for _, w := range ws {
		pod, err := c.CoreV1().Pods(loopNS).Get(ctx, w.pod.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("pod %s: %v", w.pod.Name, err)
		case pod.UID != w.pod.UID || pod.DeletionTimestamp != nil:
			t.Errorf("pod %s is uid %s, deleting %v; want the same pod %s, not deleted; its Events:%s",
				pod.Name, pod.UID, pod.DeletionTimestamp, w.pod.UID, e.podEvents(pod.Name))
		}
		rows := e.grants(t, w.app.handle)
		if g := rows[w.node]; len(rows) != 1 || !g.Live() || g.Epoch != w.epoch {
			t.Errorf("datapath rows of %s: %+v; want one live grant on %s at epoch %d (no fence, epoch unchanged)", w.app.pv, rows, w.node, w.epoch)
		}
		if n, err := c.CoreV1().Nodes().Get(ctx, w.node, metav1.GetOptions{}); err == nil && fencedTaintOn(n) {
			t.Errorf("%s carries the fenced taint", w.node)
		}
	}
	if v := e.mgr.metricValue(t, `vigil_fences_total{outcome="done"}`); v != 0 {
		t.Errorf("manager %s: vigil_fences_total{outcome=\"done\"} = %v, want 0", e.mgr.name, v)
	}
	recs, err := e.rc.List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, r := range recs.Items {
		if !r.CreationTimestamp.Time.Before(start.Add(-time.Second)) {
			t.Errorf("NodeRecovery %s of %s opened (reason %s, phase %s, fenced %v, %d pods reaped): %s",
				r.Name, r.Spec.NodeName, r.Status.Reason, r.Status.Phase, r.Status.FencedAt, len(r.Status.Pods), r.Status.Message)
		}
	}
}
