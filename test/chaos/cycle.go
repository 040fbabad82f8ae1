package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// CycleResult is what one cycle did and found.
type CycleResult struct {
	Fault Fault     `json:"fault"`
	Start time.Time `json:"start"`
	// FaultEnd is when the fault was over: healed, restarted, started again.
	FaultEnd time.Time `json:"faultEnd"`
	// Recovery: for a failover, from the fault's start until the last moved
	// claim's new writer acknowledged its first record; otherwise (a server's
	// node powered on again included) from FaultEnd until every writer
	// acknowledged a record again. Zero if it never did.
	Recovery time.Duration `json:"recovery"`
	// Stall: the longest time any writer went without an acknowledged record
	// during the cycle (the application's view of the fault).
	Stall time.Duration `json:"stall"`
	// Failover: some claim is served by another pod after the cycle.
	Failover bool `json:"failover"`
	// NodeReturn: for a failover fault, from the node's start (or heal) until it
	// was Ready, untainted and clean.
	NodeReturn time.Duration `json:"nodeReturn,omitempty"`
	Violations []string      `json:"violations,omitempty"`
	// Writers and Acked: the writers checked and the records they acknowledged
	// so far (all present unless a violation says otherwise).
	Writers int `json:"writers"`
	Acked   int `json:"acked"`
	// ManagerRestarts: managers started again during the cycle (a SIGKILL, or a
	// leader that exited after losing its Lease).
	ManagerRestarts int `json:"managerRestarts"`
	// GroupPolls: the status polls of the datapath's group with a leader
	// whose epochs were checked so far in the run (servers on nodes only).
	GroupPolls int `json:"groupPolls,omitempty"`
	// ReapTriggers: for partition-heals-after-fence, the trigger of each reap
	// of the node's pods (fenced-node-returned: the node was back first).
	ReapTriggers []string `json:"reapTriggers,omitempty"`
	// Group: for a fault of the datapath's servers, what the group did (the
	// leader before and after, the times to a new leader and back in the
	// group, the cut-off server's answers to the probe's fence and grant).
	Group []string      `json:"group,omitempty"`
	End   time.Time     `json:"end"`
	Data  []ledgerBrief `json:"data"`
}

// ledgerBrief is one writer's data check.
type ledgerBrief struct {
	Pod        string `json:"pod"`
	Node       string `json:"node"`
	Acked      int    `json:"acked"`
	Found      int    `json:"found"`
	Garbled    int    `json:"garbled"`
	Lost       int    `json:"lost"`
	AfterFence int    `json:"afterFence"`
}

// RunCycle injects f, waits for the recovery f expects and checks every
// invariant; each breach is a line of Violations.
func (h *Harness) RunCycle(ctx context.Context, f Fault) CycleResult {
	r := CycleResult{Fault: f, Start: time.Now()}
	before, fences, restarts := h.placement(), h.fenceCounts(), h.managerRestarts()
	var err error
	switch {
	case f.Kind.NeedsServers():
		err = h.runServerFault(ctx, f, &r, before)
	case f.Kind == PartitionHealsAfterFence:
		err = h.runHealAfterFence(ctx, f, &r, before)
	case f.Expect == Failover:
		err = h.runFailover(ctx, f, &r, before)
	default:
		err = h.runTransient(ctx, f, &r)
	}
	if err != nil {
		r.Violations = append(r.Violations, err.Error())
	}
	after := h.placement()
	for claim, was := range before {
		r.Failover = r.Failover || after[claim] != was
	}
	if f.Expect == NoFailover {
		r.Violations = append(r.Violations, h.checkNoFailover(before, fences)...)
	}
	r.Violations = append(r.Violations, h.checkNodes(ctx)...)
	h.awaitWriters(ctx, writersBound)
	// No pod is left with failing I/O once its node is back, whatever the
	// fault: every claim's pod writes again (the fault's own wait may have
	// looked at the claims of its node only).
	r.Violations = append(r.Violations, h.awaitIO(ctx, nil, time.Now(), ioBound, true)...)
	results, v := h.checkData()
	r.Violations = append(r.Violations, v...)
	for _, res := range results {
		r.Writers++
		r.Acked += res.Acked
		r.Data = append(r.Data, ledgerBrief{Pod: res.UID, Node: res.Node, Acked: res.Acked, Found: res.Found,
			Garbled: res.Garbled, Lost: res.LostCount, AfterFence: res.AfterFenceCount})
	}
	r.Violations = append(r.Violations, h.hist.takeViolations()...)
	if h.group != nil {
		// Epochs never go back, as every status poll of the cycle saw them.
		r.Violations = append(r.Violations, h.group.watch.takeViolations()...)
		r.GroupPolls = h.group.watch.pollCount()
	}
	r.Stall = h.longestStall(r.Start, time.Now())
	h.sampleMemory(f.Cycle)
	r.ManagerRestarts = h.managerRestarts() - restarts
	r.End = time.Now()
	return r
}

// runTransient injects a fault that needs no failover, then waits until every
// writer acknowledges records again.
func (h *Harness) runTransient(ctx context.Context, f Fault, r *CycleResult) error {
	var err error
	switch f.Kind {
	case ShortPartition:
		err = h.cutFor(f.Node, f.Target, f.Cut)
	case Flapping:
		for i := 0; i < f.Flaps && err == nil; i++ {
			if i > 0 {
				time.Sleep(f.Up)
			}
			err = h.cutFor(f.Node, f.Target, f.Cut)
		}
	case EngineKill:
		err = h.restartProcess(ctx, f.Node, sandbox.StackEngine, f.Down)
	case DatapathRestart:
		err = h.restartProcess(ctx, "", sandbox.StackDatapath, f.Down)
	case DatapathPowerCut:
		err = h.powerCutDatapath(ctx, f.Down)
	case APIServerRestart:
		err = h.sb.RestartAPIServer(ctx, 2*time.Minute)
	case ClusterAPIServerCut:
		err = h.cutAllFor(f.Target, f.Cut)
	default:
		err = fmt.Errorf("fault %s has no transient form", f.Kind)
	}
	r.FaultEnd = time.Now()
	if err != nil {
		return fmt.Errorf("inject %s: %w", f.Kind, err)
	}
	if err := h.awaitProgress(ctx, r.FaultEnd, progressBound); err != nil {
		return fmt.Errorf("writers did not write again within %s of the fault's end: %w", progressBound, err)
	}
	r.Recovery = h.firstAcksAfter(r.FaultEnd, nil)
	if f.Kind == APIServerRestart {
		if err := h.awaitControllersSeePods(ctx); err != nil {
			return err
		}
		h.Logf("chaos: the kube-controller-manager sees pods again %.1fs after the API server's restart", time.Since(r.FaultEnd).Seconds())
	}
	return nil
}

// longestStall is the longest time a writer went without an acknowledged
// record within [from, to] (the tail to to included; ledger.Check), over
// every writer that runs at to. A writer that started after from is measured
// from its start.
func (h *Harness) longestStall(from, to time.Time) time.Duration {
	var worst time.Duration
	for _, w := range h.current() {
		start := from
		if w.Started.After(from) {
			start = w.Started
		}
		a, _ := ledger.CheckFile(w.Ledger, start, to)
		worst = max(worst, a.Stall)
	}
	return worst
}

// cutFor partitions node from target for d, then heals it.
func (h *Harness) cutFor(node string, target sandbox.PartitionTarget, d time.Duration) error {
	h.setCut(node, target)
	if err := h.sb.Partition(node, target); err != nil {
		return err
	}
	time.Sleep(d)
	err := h.sb.Heal(node)
	h.setCut(node, "")
	return err
}

// cutAllFor partitions every node from target for d, then heals them all.
func (h *Harness) cutAllFor(target sandbox.PartitionTarget, d time.Duration) error {
	var errs []error
	nodes := make([]string, sandboxNodes)
	for i := range nodes {
		nodes[i] = sandbox.NodeName(i)
	}
	for _, n := range nodes {
		h.setCut(n, target)
		errs = append(errs, h.sb.Partition(n, target))
	}
	time.Sleep(d)
	for _, n := range nodes {
		errs = append(errs, h.sb.Heal(n))
		h.setCut(n, "")
	}
	return errors.Join(errs...)
}

func (h *Harness) setCut(node string, target sandbox.PartitionTarget) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if target == "" {
		delete(h.cut, node)
	} else {
		h.cut[node] = target
	}
}

func (h *Harness) setOff(node string, off bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.off[node] = off
}

// restartProcess SIGKILLs a process of node ("" for the host), starts it again
// after down, and for the datapath waits until it answers.
func (h *Harness) restartProcess(ctx context.Context, node, name string, down time.Duration) error {
	if err := h.sb.KillProcess(node, name); err != nil {
		return err
	}
	time.Sleep(down)
	if err := h.sb.StartProcess(node, name); err != nil {
		return err
	}
	if name != sandbox.StackDatapath {
		return nil
	}
	return h.awaitDatapath(ctx)
}

// powerCutDatapath cuts the power of the datapath's machine (the datapath
// and the power-loss layer under its data), keeps it off for down, brings it
// back and waits until the datapath answers.
func (h *Harness) powerCutDatapath(ctx context.Context, down time.Duration) error {
	if err := h.sb.CutDatapathPower(); err != nil {
		return err
	}
	time.Sleep(down)
	if err := h.sb.RestoreDatapathPower(ctx); err != nil {
		return err
	}
	return h.awaitDatapath(ctx)
}

// awaitDatapath waits until the datapath answers again after a restart.
func (h *Harness) awaitDatapath(ctx context.Context) error {
	return sandbox.Poll(ctx, 30*time.Second, "datapath answering again", func(ctx context.Context) (bool, string, error) {
		_, err := h.dp.ListVolumes(ctx)
		return err == nil, fmt.Sprint(err), nil
	}, nil)
}

// firstAcksAfter is how long after t the slowest of the current writers (of
// only the claims listed, if claims is not nil) acknowledged its first record.
func (h *Harness) firstAcksAfter(t time.Time, claims map[string]bool) time.Duration {
	var worst time.Duration
	for claim, w := range h.current() {
		if claims != nil && !claims[claim] {
			continue
		}
		acks, _ := ledger.ReadLedger(w.Ledger)
		for _, a := range acks {
			if a.Time.After(t) {
				worst = max(worst, a.Time.Sub(t))
				break
			}
		}
	}
	return worst
}

// runFailover fails f.Node (power cut or long partition, a manager SIGKILL on
// the way for the manager kinds), waits until its claims are served elsewhere,
// keeps it down f.Down longer, brings it back and waits for it to be clean.
func (h *Harness) runFailover(ctx context.Context, f Fault, r *CycleResult, before map[string]string) error {
	moved := map[string]bool{}
	for claim, at := range before {
		if strings.HasSuffix(at, "@"+f.Node) {
			moved[claim] = true
		}
	}
	var uncovered string
	if f.Kind == FenceUncoveredPod {
		claim, err := h.addUncovered(ctx, f.Node, f.Cycle)
		if err != nil {
			return fmt.Errorf("set up the uncovered pod: %w", err)
		}
		uncovered, r.Start = claim, time.Now()
	}
	fencesBefore := h.hist.fences(f.Node)
	if err := h.fail(f); err != nil {
		return fmt.Errorf("inject %s: %w", f.Kind, err)
	}
	var errs []string
	if f.Kind == ManagerKillFence || f.Kind == ManagerKillReap {
		if err := h.killLeaderAt(ctx, f, fencesBefore); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := h.awaitMoved(ctx, before, moved, r.Start, failoverBound); err != nil {
		errs = append(errs, fmt.Sprintf("covered pods of %s not running elsewhere within %s: %v", f.Node, failoverBound, err))
	} else {
		r.Recovery = h.firstAcksAfter(r.Start, moved)
	}
	time.Sleep(f.Down)
	if err := h.restore(f); err != nil {
		errs = append(errs, fmt.Sprintf("bring %s back: %v", f.Node, err))
	}
	r.FaultEnd = time.Now()
	returned := r.FaultEnd
	if uncovered != "" {
		// The node keeps its fenced taint while the uncovered pod is there:
		// its return is measured from that pod's removal.
		errs = append(errs, h.awaitUncoveredBack(ctx, f.Node, uncovered)...)
		returned = time.Now()
	}
	if err := sandbox.Poll(ctx, returnBound, f.Node+" back, Ready, untainted and clean", func(ctx context.Context) (bool, string, error) {
		p := h.nodeProblems(ctx, "")
		return len(p) == 0, strings.Join(p, "; "), nil
	}, nil); err != nil {
		errs = append(errs, err.Error())
	} else {
		r.NodeReturn = time.Since(returned)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// fail powers f.Node off or cuts it off from f.Target.
func (h *Harness) fail(f Fault) error {
	if f.Target != "" {
		h.setCut(f.Node, f.Target)
		return h.sb.Partition(f.Node, f.Target)
	}
	h.setOff(f.Node, true)
	return h.sb.Stop(f.Node)
}

// restore undoes fail.
func (h *Harness) restore(f Fault) error {
	if f.Target != "" {
		err := h.sb.Heal(f.Node)
		h.setCut(f.Node, "")
		return err
	}
	err := h.sb.Start(f.Node)
	h.setOff(f.Node, false)
	return err
}

// writersBound is how long the data check waits for every claim to have a
// running writer again.
const writersBound = time.Minute

// awaitWriters waits, within bound, until every claim has a running writer:
// a pod its StatefulSet or Deployment replaced a moment ago (after the
// recovery the cycle waited for, whoever deleted it) is not written through
// yet. A claim still without one is checkData's violation.
func (h *Harness) awaitWriters(ctx context.Context, bound time.Duration) {
	_ = sandbox.Poll(ctx, bound, "a running writer for every claim", func(context.Context) (bool, string, error) {
		cur := h.current()
		var waiting []string
		for claim := range h.claims {
			if cur[claim] == nil {
				waiting = append(waiting, claim)
			}
		}
		sort.Strings(waiting)
		return len(waiting) == 0, "waiting for " + strings.Join(waiting, ", "), nil
	}, nil)
}

// awaitMoved waits until every claim of moved is served by another pod than
// before, whose writer acknowledged a record after since.
func (h *Harness) awaitMoved(ctx context.Context, before map[string]string, moved map[string]bool, since time.Time, bound time.Duration) error {
	return sandbox.Poll(ctx, bound, "replacements writing", func(context.Context) (bool, string, error) {
		cur := h.current()
		var waiting []string
		for claim := range moved {
			w := cur[claim]
			if w == nil || string(w.Pod)+"@"+w.Node == before[claim] || !lastAck(w).After(since) {
				waiting = append(waiting, claim)
			}
		}
		sort.Strings(waiting)
		return len(waiting) == 0, "waiting for " + strings.Join(waiting, ", "), nil
	}, h.describe)
}

// killLeaderAt waits for the moment of f (the node's first fence at the
// datapath, or its first covered pod gone) and SIGKILLs the leading manager
// there; superviseManagers starts it again, as its Deployment would.
func (h *Harness) killLeaderAt(ctx context.Context, f Fault, fencesBefore int) error {
	what := "the first fence of " + f.Node + " at the datapath"
	if f.Kind == ManagerKillReap {
		what = "the first covered pod of " + f.Node + " reaped"
	}
	podsBefore, err := h.workloadPods(ctx)
	if err != nil {
		return err
	}
	err = sandbox.Poll(ctx, failoverBound, what, func(ctx context.Context) (bool, string, error) {
		if f.Kind == ManagerKillFence {
			h.pollAttachments(ctx)
			return h.hist.fences(f.Node) > fencesBefore, "", nil
		}
		for _, p := range podsBefore {
			if p.Spec.NodeName != f.Node {
				continue
			}
			cur, err := h.sb.Client().CoreV1().Pods(namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err == nil && cur.UID == p.UID && cur.DeletionTimestamp == nil {
				continue
			}
			return err == nil || apierrors.IsNotFound(err), "", nil
		}
		return false, "", nil
	}, nil)
	if err != nil {
		return err
	}
	for _, m := range h.mgrs {
		if m.leads() {
			h.Logf("chaos: SIGKILL of the leading manager %s at %s (the supervisor starts it again)", m.name, what)
			m.kill()
			return nil
		}
	}
	return fmt.Errorf("no manager leads at %s", what)
}
