package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
)

// runLeaderPowerCut cuts the power of the leader's node, waits for a new
// leader and for the claims that must fail over (claimExpect), keeps the node
// off f.Down longer, powers it on and waits for its server to be back in the
// group and the node to be clean. Claims whose pod was not on the node must
// stay, and no other node may be fenced.
func (h *Harness) runLeaderPowerCut(ctx context.Context, f Fault, r *CycleResult, before map[string]string) error {
	leader, err := h.awaitLeader(ctx, "")
	if err != nil {
		return err
	}
	lost, applied := leader.Node, leader.AppliedIndex
	fates, moved := h.fates(before, lost)
	h.note(r, "power cut of %s, the leader's node (applied index %d); %s", lost, applied, describeFates(fates))
	fencesBefore := h.fenceCounts()
	h.setOff(lost, true)
	if err := h.sb.Stop(lost); err != nil {
		return fmt.Errorf("inject %s: %w", f.Kind, err)
	}
	t0 := time.Now()
	var errs []string
	if next, err := h.awaitLeader(ctx, lost); err != nil {
		errs = append(errs, err.Error())
	} else {
		h.note(r, "new leader %s %.2fs after the power cut", next.Node, time.Since(t0).Seconds())
	}
	if len(moved) > 0 {
		if err := h.awaitMoved(ctx, before, moved, r.Start, failoverBound); err != nil {
			errs = append(errs, fmt.Sprintf("covered pods of %s whose data is on another server not running elsewhere within %s: %v", lost, failoverBound, err))
		} else {
			r.Recovery = h.firstAcksAfter(r.Start, moved)
		}
	}
	time.Sleep(f.Down)
	err = h.sb.Start(lost)
	h.setOff(lost, false)
	r.FaultEnd = time.Now()
	if err != nil {
		return fmt.Errorf("power %s on again: %v; %s", lost, err, strings.Join(errs, "; "))
	}
	if err := h.awaitGroup(ctx, lost, applied, r.FaultEnd); err != nil {
		errs = append(errs, err.Error())
	} else {
		h.note(r, "%s's server back in the group %.2fs after the node's start", lost, time.Since(r.FaultEnd).Seconds())
	}
	if err := sandbox.Poll(ctx, returnBound, lost+" back, Ready, untainted and clean", func(ctx context.Context) (bool, string, error) {
		p := h.nodeProblems(ctx, "")
		return len(p) == 0, strings.Join(p, "; "), nil
	}, nil); err != nil {
		errs = append(errs, err.Error())
	} else {
		r.NodeReturn = time.Since(r.FaultEnd)
	}
	if len(moved) == 0 && h.awaitProgress(ctx, r.FaultEnd, ioBound) == nil {
		// Nothing had to move: the recovery is the writers' (those of the
		// lost server's volumes stalled until it was back). A writer that
		// does not write again is the cycle's failingIO violation.
		r.Recovery = h.firstAcksAfter(r.FaultEnd, nil)
	}
	errs = append(errs, h.checkStayed(before, fates, fencesBefore, lost)...)
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// fates is each claim's claimExpect when node lost is lost, and the claims
// that must fail over.
func (h *Harness) fates(before map[string]string, lost string) (map[string]claimFate, map[string]bool) {
	sets := h.group.sets()
	fates, moved := map[string]claimFate{}, map[string]bool{}
	h.mu.Lock()
	defer h.mu.Unlock()
	for claim, at := range before {
		podNode := at[strings.LastIndex(at, "@")+1:]
		set, known := sets[h.claims[claim].Handle]
		fates[claim] = claimExpect(podNode, set, known, lost)
		if fates[claim] == mustMove {
			moved[claim] = true
		}
	}
	return fates, moved
}

func describeFates(fates map[string]claimFate) string {
	claims := make([]string, 0, len(fates))
	for c := range fates {
		claims = append(claims, c)
	}
	sort.Strings(claims)
	out := make([]string, len(claims))
	for i, c := range claims {
		out[i] = c + " " + string(fates[c])
	}
	return strings.Join(out, ", ")
}

// checkStayed: every claim whose pod was not on lost is served by the same
// pod, and no node but lost was fenced.
func (h *Harness) checkStayed(before map[string]string, fates map[string]claimFate, fencesBefore map[string]int, lost string) []string {
	var v []string
	after := h.placement()
	for claim, fate := range fates {
		if (fate == staysWriting || fate == stallsInPlace) && after[claim] != before[claim] {
			v = append(v, fmt.Sprintf("claim %s (%s) failed over (pod@node %s, now %q): its pod was not on %s", claim, fate, before[claim], after[claim], lost))
		}
	}
	for node, n := range fencesBefore {
		if got := h.hist.fences(node); node != lost && got != n {
			v = append(v, fmt.Sprintf("%s was fenced %d times though only %s lost its power", node, got-n, lost))
		}
	}
	sort.Strings(v)
	return v
}

// runServerPartition cuts one server (the leader, or a follower chosen by the
// seed) off from the other two, checks that it answers no change as current
// while cut off (probeStale), heals it and waits for it to be back in the group.
func (h *Harness) runServerPartition(ctx context.Context, f Fault, r *CycleResult) error {
	leader, err := h.awaitLeader(ctx, "")
	if err != nil {
		return err
	}
	target := leader.Node
	if f.Role == RoleFollower {
		var followers []string
		for _, s := range h.stk.DatapathServers {
			if s.Node != leader.Node {
				followers = append(followers, s.Node)
			}
		}
		sort.Strings(followers)
		target = followers[f.Seed%uint64(len(followers))]
	}
	pr, err := h.newProbe(ctx, f.Cycle, target)
	if err != nil {
		return fmt.Errorf("probe volume: %w", err)
	}
	h.note(r, "%s's server (%s) cut off from the other two for %s; probe volume %s granted to %s at epoch %d",
		target, f.Role, f.Cut.Round(time.Millisecond), pr.vol, probeNode, pr.granted)
	if err := h.sb.Partition(target, sandbox.PartitionDatapathGroup); err != nil {
		return fmt.Errorf("inject %s: %w", f.Kind, err)
	}
	t0 := time.Now()
	var errs []string
	h.probeFence(ctx, r, &pr)
	if target == leader.Node {
		if next, err := h.awaitLeader(ctx, target); err != nil {
			errs = append(errs, err.Error())
		} else {
			h.note(r, "new leader %s %.2fs after the cut", next.Node, time.Since(t0).Seconds())
		}
	}
	h.probeGrant(ctx, r, &pr)
	time.Sleep(time.Until(t0.Add(f.Cut)))
	err = h.sb.Heal(target)
	r.FaultEnd = time.Now()
	if err != nil {
		return fmt.Errorf("heal %s: %v", target, err)
	}
	_, applied := h.leaderApplied(ctx)
	if err := h.awaitGroup(ctx, target, applied, r.FaultEnd); err != nil {
		errs = append(errs, err.Error())
	} else {
		h.note(r, "%s's server back in the group %.2fs after the heal", target, time.Since(r.FaultEnd).Seconds())
	}
	errs = append(errs, h.checkProbe(ctx, pr)...)
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return h.awaitTransientEnd(ctx, r)
}

// probe is a volume of no pod, granted to probeNode, on which a partition
// cycle asks the cut-off server for changes.
type probe struct {
	vol, target string
	granted     uint64
	// fenced, regranted: the epochs the cut-off server answered a fence and a
	// grant with, 0 when it refused (as it must, unless the change was
	// committed); majority: the epoch of the fence the rest of the group
	// committed meanwhile (0 if none).
	fenced, regranted, majority uint64
}

// newProbe creates the cycle's probe volume and grants it to probeNode, and
// waits until target's server has applied the grant.
func (h *Harness) newProbe(ctx context.Context, cycle int, target string) (probe, error) {
	pr := probe{target: target}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := h.dp.CreateVolume(cctx, fmt.Sprintf("chaos-probe-%d", cycle), 1<<20, datapath.AccessRWO)
	if err != nil {
		return pr, err
	}
	pr.vol = v.ID
	if pr.granted, err = h.dp.Grant(cctx, v.ID, probeNode); err != nil {
		return pr, err
	}
	_, applied := h.leaderApplied(ctx)
	return pr, h.awaitGroup(ctx, target, applied, time.Now())
}

// probeFence asks the cut-off server alone to fence probeNode on the probe.
func (h *Harness) probeFence(ctx context.Context, r *CycleResult, pr *probe) {
	time.Sleep(time.Second) // cut off for real: its connections to the others stall
	e, ok, err := h.askCutOff(ctx, r, pr, func(ctx context.Context, c *dpclient.Client) (uint64, error) { return c.Fence(ctx, pr.vol, probeNode) })
	if !ok {
		return
	}
	if err != nil {
		h.note(r, "the cut-off server %s refused the probe's fence: %v", pr.target, err)
		return
	}
	pr.fenced = e
	h.note(r, "the cut-off server %s answered the probe's fence with epoch %d (checked against the group after the heal)", pr.target, e)
}

// probeGrant has the rest of the group fence probeNode on the probe, so that
// the cut-off server's state is stale, then asks the cut-off server alone to
// grant the probe to probeNode again: answered from its stale state, it
// would give the old grant's epoch.
func (h *Harness) probeGrant(ctx context.Context, r *CycleResult, pr *probe) {
	err := sandbox.Poll(ctx, leaderBound, "a fence of the probe committed by the majority", func(ctx context.Context) (bool, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		e, err := h.dp.Fence(cctx, pr.vol, probeNode)
		pr.majority = e
		return err == nil, fmt.Sprint(err), nil
	}, nil)
	if err != nil {
		h.note(r, "the majority did not fence the probe: %v", err)
		return
	}
	e, ok, err := h.askCutOff(ctx, r, pr, func(ctx context.Context, c *dpclient.Client) (uint64, error) { return c.Grant(ctx, pr.vol, probeNode) })
	if !ok {
		return
	}
	if err != nil {
		h.note(r, "the majority fenced the probe at epoch %d; the cut-off server %s refused a grant of it: %v", pr.majority, pr.target, err)
		return
	}
	pr.regranted = e
	h.note(r, "the majority fenced the probe at epoch %d; the cut-off server %s answered a grant of it with epoch %d", pr.majority, pr.target, e)
}

// askCutOff dials the cut-off server alone and has call ask it, within 3 s;
// ok is false (and noted) when the server cannot be dialed.
func (h *Harness) askCutOff(ctx context.Context, r *CycleResult, pr *probe, call func(context.Context, *dpclient.Client) (uint64, error)) (epoch uint64, ok bool, err error) {
	c, err := h.dialServer(ctx, h.serverOf(pr.target), 3*time.Second)
	if err != nil {
		h.note(r, "dial the cut-off server %s: %v", pr.target, err)
		return 0, false, nil
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	epoch, err = call(cctx, c)
	return epoch, true, err
}

// checkProbe: whatever the cut-off server answered as done must be in the
// group's record after the heal, at an epoch at least the one it gave (and a
// grant it answered must be above the majority's fence): otherwise it
// answered from stale state.
func (h *Harness) checkProbe(ctx context.Context, pr probe) []string {
	if pr.fenced == 0 && pr.regranted == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	atts, err := h.dp.Attachments(cctx, pr.vol)
	if err != nil {
		return []string{fmt.Sprintf("read the probe %s after the heal: %v", pr.vol, err)}
	}
	i := slices.IndexFunc(atts, func(a datapath.Attachment) bool { return a.Node == probeNode })
	if i < 0 {
		return []string{fmt.Sprintf("the probe %s has no row of %s after the heal", pr.vol, probeNode)}
	}
	return probeStale(pr, atts[i])
}

// probeStale: what the cut-off server answered as done (pr.fenced,
// pr.regranted) against probeNode's row of the probe after the heal.
func probeStale(pr probe, row datapath.Attachment) []string {
	var v []string
	if pr.fenced != 0 && (row.Epoch < pr.fenced || pr.fenced <= pr.granted) {
		v = append(v, fmt.Sprintf("the server on %s, cut off from its group, answered a fence of %s on the probe %s with epoch %d "+
			"(granted at %d before the cut), but after the heal the group has it %s at epoch %d: it answered from stale state",
			pr.target, probeNode, pr.vol, pr.fenced, pr.granted, row.State, row.Epoch))
	}
	if pr.regranted != 0 && (pr.regranted <= pr.majority || row.Epoch < pr.regranted) {
		v = append(v, fmt.Sprintf("the server on %s, cut off from its group, answered a grant of the probe %s to %s with epoch %d, "+
			"while the rest of the group had fenced it at epoch %d (after the heal: %s at epoch %d): it answered from stale state",
			pr.target, pr.vol, probeNode, pr.regranted, pr.majority, row.State, row.Epoch))
	}
	return v
}
