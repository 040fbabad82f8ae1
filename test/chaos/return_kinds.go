package chaos

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/settings"
)

// The uncovered pod of FenceUncoveredPod: a StatefulSet of one pod opted out
// of reaping (vigil.io/reap: "false"), pinned to the fault's node, on a claim
// of its own; it lives for one cycle.
const uncoveredApp = "keep"

// uncoveredClaim is the claim of cycle's uncovered pod.
func uncoveredClaim(cycle int) string { return fmt.Sprintf("keep-data-%d", cycle) }

// addUncovered creates the uncovered pod on node, registers its claim (so it
// gets a writer and its data is checked) and waits until it writes.
func (h *Harness) addUncovered(ctx context.Context, node string, cycle int) (string, error) {
	c := h.sb.Client()
	claim := uncoveredClaim(cycle)
	if err := sandbox.CreateClaim(ctx, c, namespace, claim, h.stk.StorageClass, volumeSize); err != nil {
		return claim, err
	}
	if err := sandbox.WaitPVCsBound(ctx, c, namespace, []string{claim}, 2*time.Minute); err != nil {
		return claim, err
	}
	pvc, err := c.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return claim, err
	}
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return claim, err
	}
	if pv.Spec.CSI == nil {
		return claim, fmt.Errorf("PV %s of claim %s has no CSI source", pv.Name, claim)
	}
	h.mu.Lock()
	h.claims[claim] = claimInfo{PV: pv.Name, Handle: pv.Spec.CSI.VolumeHandle}
	h.mu.Unlock()
	grace := podGrace
	ss := sandbox.Workload{Namespace: namespace, Name: uncoveredApp, Nodes: []string{node}, Claims: []string{claim},
		TerminationGracePeriodSeconds: &grace}.StatefulSet(1)
	ss.Spec.Template.Annotations = map[string]string{vigil.ReapAnnotation: "false"}
	if _, err := c.AppsV1().StatefulSets(namespace).Create(ctx, ss, metav1.CreateOptions{}); err != nil {
		return claim, fmt.Errorf("create the uncovered StatefulSet: %w", err)
	}
	if v := h.awaitIO(ctx, map[string]bool{claim: true}, time.Now(), 2*time.Minute, false); len(v) > 0 {
		return claim, fmt.Errorf("the uncovered pod on %s never wrote: %s", node, strings.Join(v, "; "))
	}
	h.Logf("chaos: uncovered pod %s-0 (%s: %q) writing on %s, claim %s", uncoveredApp, vigil.ReapAnnotation, "false", node, claim)
	return claim, nil
}

// removeUncovered checks the uncovered claim's data, deletes its StatefulSet,
// waits until its pod is gone and forgets the claim (its PVC is deleted).
func (h *Harness) removeUncovered(ctx context.Context, claim string) []string {
	h.awaitWriters(ctx, writersBound)
	_, v := h.checkClaim(claim, h.current()[claim])
	c := h.sb.Client()
	err := c.AppsV1().StatefulSets(namespace).Delete(ctx, uncoveredApp, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return append(v, fmt.Sprintf("delete the uncovered StatefulSet: %v", err))
	}
	err = sandbox.Poll(ctx, time.Minute, "the uncovered pod gone", func(ctx context.Context) (bool, string, error) {
		l, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + uncoveredApp})
		return err == nil && len(l.Items) == 0, "", nil
	}, h.describe)
	if err != nil {
		return append(v, err.Error())
	}
	h.mu.Lock()
	delete(h.claims, claim)
	h.mu.Unlock()
	if err := c.CoreV1().PersistentVolumeClaims(namespace).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
		h.Logf("chaos: delete claim %s: %v", claim, err)
	}
	return v
}

// awaitUncoveredBack is FenceUncoveredPod's end: once f.Node is back (Ready,
// what its reaped pods left cleaned up; the fenced taint stays while the
// uncovered pod's volume is published there, by design), the uncovered pod
// writes again within ioBound; then it goes and the node must be clean.
func (h *Harness) awaitUncoveredBack(ctx context.Context, node, claim string) []string {
	var errs []string
	if err := sandbox.Poll(ctx, returnBound, node+" back, Ready and without what its reaped pods left", func(ctx context.Context) (bool, string, error) {
		p := h.nodeProblems(ctx, node)
		return len(p) == 0, strings.Join(p, "; "), nil
	}, nil); err != nil {
		errs = append(errs, err.Error())
	}
	back := time.Now()
	errs = append(errs, h.awaitIO(ctx, map[string]bool{claim: true}, back, ioBound, false)...)
	if len(errs) == 0 {
		h.Logf("chaos: the uncovered pod on %s writes again %.1fs after its node was back", node, h.firstAcksAfter(back, map[string]bool{claim: true}).Seconds())
	}
	return append(errs, h.removeUncovered(ctx, claim)...)
}

// healWindowGrace is node-down-grace-period during a PartitionHealsAfterFence
// cycle: the reap comes this long after the node fell silent, the fence 3 s
// after (the connectivity threshold), so the heal lands between them.
const healWindowGrace = 10 * time.Second

// runHealAfterFence cuts f.Node off from everything with the managers'
// node-down-grace-period raised to healWindowGrace for the cycle, heals it as
// soon as the datapath shows its first fence, and checks that no pod of the node stays
// stranded on a fenced volume: within failoverBound of the heal every claim
// the node served writes again, through a replacement (the manager reaps a
// pod the fence was for when its node comes back) or through the same pod.
func (h *Harness) runHealAfterFence(ctx context.Context, f Fault, r *CycleResult, before map[string]string) error {
	claims, handles := map[string]bool{}, map[string]bool{}
	for claim, at := range before {
		if strings.HasSuffix(at, "@"+f.Node) {
			claims[claim] = true
			handles[h.claimInfo(claim).Handle] = true
		}
	}
	podsBefore, err := h.workloadPods(ctx)
	if err != nil {
		return err
	}
	// The window: an isolation fence comes at once, the reap after the grace
	// counted from the start of the silence, which with the default grace
	// (2 s, shorter than the connectivity threshold) has passed by the fence.
	if err := h.setSettingAll(ctx, settings.NameNodeDownGracePeriod, healWindowGrace.String()); err != nil {
		return fmt.Errorf("open the window between fence and reap: %w", err)
	}
	defer func() {
		if err := h.setSettingAll(context.Background(), settings.NameNodeDownGracePeriod, ""); err != nil {
			h.Logf("chaos: reset %s: %v", settings.NameNodeDownGracePeriod, err)
		}
	}()
	if err := h.fail(f); err != nil {
		return fmt.Errorf("inject %s: %w", f.Kind, err)
	}
	fenced := h.awaitFence(ctx, f.Node, handles, failoverBound)
	if err := h.restore(f); err != nil {
		return fmt.Errorf("heal %s: %w", f.Node, err)
	}
	r.FaultEnd = time.Now()
	if fenced.IsZero() {
		return fmt.Errorf("the datapath never showed a fence of %s within %s of the cut", f.Node, failoverBound)
	}
	h.Logf("chaos: %s healed %.0f ms after the datapath showed its fence (%.1fs after the cut)", f.Node,
		float64(r.FaultEnd.Sub(fenced).Milliseconds()), fenced.Sub(r.Start).Seconds())
	var errs []string
	if v := h.awaitIO(ctx, claims, r.FaultEnd, failoverBound, false); len(v) > 0 {
		errs = append(errs, v...)
	} else {
		r.Recovery = h.firstAcksAfter(r.FaultEnd, claims)
	}
	r.ReapTriggers = h.reapTriggers(ctx, f.Node, podsBefore)
	h.Logf("chaos: pods of %s reaped on triggers %v", f.Node, r.ReapTriggers)
	if err := sandbox.Poll(ctx, returnBound, f.Node+" Ready, untainted and clean", func(ctx context.Context) (bool, string, error) {
		p := h.nodeProblems(ctx, "")
		return len(p) == 0, strings.Join(p, "; "), nil
	}, nil); err != nil {
		errs = append(errs, err.Error())
	} else {
		r.NodeReturn = time.Since(r.FaultEnd)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func (h *Harness) claimInfo(claim string) claimInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claims[claim]
}

// awaitFence polls the datapath's attachment rows of handles every 100 ms
// until one shows node fenced, and returns when it saw it (zero if never).
func (h *Harness) awaitFence(ctx context.Context, node string, handles map[string]bool, bound time.Duration) time.Time {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for handle := range handles {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			atts, err := h.dp.Attachments(cctx, handle)
			cancel()
			if err != nil {
				continue
			}
			h.hist.observe(handle, atts)
			for _, a := range atts {
				if a.Node == node && a.State == datapath.StateFenced {
					return time.Now()
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Time{}
}

// triggerRE finds the trigger in the message of a reap's Event.
var triggerRE = regexp.MustCompile(`trigger ([a-z-]+);`)

// reapTriggers is the trigger of each reap of pods (those on node), from the
// Events the manager wrote on them, sorted: whether the node came back before
// the reap (fenced-node-returned) or not (proven-fenced-after-grace).
func (h *Harness) reapTriggers(ctx context.Context, node string, pods []corev1.Pod) []string {
	uids := map[types.UID]bool{}
	for _, p := range pods {
		if p.Spec.NodeName == node {
			uids[p.UID] = true
		}
	}
	evs, err := h.sb.Client().CoreV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"events: " + err.Error()}
	}
	seen := map[types.UID]string{}
	for _, e := range evs.Items {
		if m := triggerRE.FindStringSubmatch(e.Message); m != nil && uids[e.InvolvedObject.UID] {
			seen[e.InvolvedObject.UID] = m[1]
		}
	}
	var out []string
	for _, t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
