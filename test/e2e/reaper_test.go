package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/settings"
)

// stayWindow is how long pods a policy does not cover are watched past their
// deletion deadline: they must still be there, Terminating, at its end.
const stayWindow = 10 * time.Second

// reapCase is one power cut of the matrix.
type reapCase struct {
	policy controller.PodDeletionPolicy
	ns     string
	// variant: "" (the policy from the start), "then-set" (do-nothing, then the
	// policy is set once the pods are past their deadline), "dry-run" (dry-run
	// true, then false) or "failover" (two managers, the leader is SIGKILLed at
	// the eviction).
	variant string
}

// caseRun is the state of one case while it runs.
type caseRun struct {
	reapCase
	store    string
	rec      *recorder
	pods     *casePods
	cut      time.Time
	deadline time.Time
	acting   *manager // the manager expected to reap
	leader   *manager // the first leader (acting, unless it is killed)
	managers []*manager
	started  time.Time // before the managers started
}

// TestReaper_PolicyMatrix is Longhorn's test plan for node-down pod deletion in
// the sandbox, one power cut of node-2 per policy, with bin/vigil-manager run
// as a child process. Each case also proves one more thing: do-nothing then a
// settings change acting at once, dry-run, and leader failover.
//
// It stays on kwok nodes, with static volumes of driver.vigil.io and no
// datapath, because what it tests is the control loop's decision alone: the
// Kubernetes-compatible trigger (a pod Terminating past its deletion
// deadline), which owner kinds each policy covers, the Events and metrics of
// each action and non-action, a settings change or dry-run acting without a
// resync, and a standby manager taking over. No volume is fenced (nothing is
// proven fenced without a datapath), so no attachment is freed and no I/O
// happens: a real kubelet, a real CSI driver and writers in containers would
// add nothing it checks, and four power cuts of real nodes would cost minutes
// of make test. Its representative case on real nodes, with the real CSI
// driver, the datapath's fence and a writer container in every pod, is
// TestLoop/Policies: delete-both with the fast trigger, a pod of each owner
// kind on the cut node.
func TestReaper_PolicyMatrix(t *testing.T) {
	ctx := context.Background()
	cases := []reapCase{
		{policy: controller.PolicyDeleteBoth, ns: "reap-do-nothing", variant: "then-set"},
		{policy: controller.PolicyDeleteStatefulSetPod, ns: "reap-sts", variant: "dry-run"},
		{policy: controller.PolicyDeleteDeploymentPod, ns: "reap-deploy"},
		{policy: controller.PolicyDeleteBoth, ns: "reap-both", variant: "failover"},
	}
	must(t, sandbox.EnsureCSIDriver(ctx, sb.Client(), true))
	var wg sync.WaitGroup
	errs := make([]error, len(cases))
	for i, rc := range cases {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = prepareVolumes(ctx, rc.ns) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("volumes of %s: %v", cases[i].ns, err)
		}
	}
	for _, rc := range cases {
		name := string(rc.policy)
		if rc.variant != "" {
			name = rc.ns + "/" + rc.variant
		}
		t.Run(name, func(t *testing.T) { runReapCase(t, ctx, rc) })
	}
}

func runReapCase(t *testing.T, ctx context.Context, rc reapCase) {
	r := &caseRun{reapCase: rc, store: filepath.Join(t.TempDir(), "settings.db")}
	initial := rc.policy
	if rc.variant == "then-set" {
		initial = controller.PolicyDoNothing
	}
	setSetting(t, r.store, settings.NameNodeDownPodDeletionPolicy, string(initial))
	if rc.variant == "dry-run" {
		setSetting(t, r.store, settings.NameDryRun, "true")
	}
	t.Cleanup(func() { cleanupNamespace(t, context.Background(), rc.ns) })
	r.pods = deployCase(t, ctx, rc.ns)
	r.started = time.Now().Truncate(time.Second)
	r.startManagers(t)
	r.rec = watchCase(t, rc.ns, reapVictim)
	r.cut = powerCut(t, r.rec)
	r.deadline = waitEvicted(t, ctx, rc.ns, r.pods)
	r.leader.waitMetric(t, "vigil_nodes_down", 1, 5*time.Second)

	covered := r.run(t, ctx, initial)
	stays := map[string]corev1.Pod{}
	for role, p := range r.pods.all() {
		if _, ok := covered[role]; !ok {
			stays[role] = p
		}
	}
	r.checkReaped(t, ctx, covered)
	r.checkStaying(t, ctx, stays)
	checkNoForeignDetach(t, r.rec, r.pods, stays)
	for _, e := range r.rec.errors() {
		t.Error(e)
	}
	t.Log(r.rec.table(fmt.Sprintf("Power cut of %s, case %s %s (grace %ds, tolerations %ds; deadline at %.1fs)",
		reapVictim, rc.policy, rc.variant, podGraceSeconds, tolerationSeconds, r.deadline.Sub(r.cut).Seconds())))
	// Power on again: the verdict goes back to healthy.
	must(t, sb.Start(reapVictim))
	must(t, sb.WaitNodeReady(ctx, 30*time.Second, corev1.ConditionTrue, reapVictim))
	r.acting.waitMetric(t, "vigil_nodes_down", 0, 10*time.Second)
}

// startManagers starts one manager, or two for the failover case, under the
// manager's identity of deploy/, which may hold only its own Lease.
func (r *caseRun) startManagers(t *testing.T) {
	o := managerOpts{store: r.store, leaseNamespace: vigil.Namespace, leaseName: vigil.ManagerLeaseName}
	n := 1
	if r.variant == "failover" {
		n = 2
	}
	for i := range n {
		r.managers = append(r.managers, startManager(t, fmt.Sprintf("manager-%d", i), o))
	}
	r.acting, r.leader = r.managers[0], r.managers[0]
	r.leader = r.waitLeader(t, "", 30*time.Second)
	for _, m := range r.managers {
		m.waitMetric(t, "vigil_nodes_down", 0, 5*time.Second)
		if m != r.leader {
			r.acting = m // the standby takes over after the leader is killed
		}
	}
}

// run carries out the case's variant past the deadline and returns the roles the
// (final) policy covers, reaped by now.
func (r *caseRun) run(t *testing.T, ctx context.Context, initial controller.PodDeletionPolicy) map[string]deletion {
	switch r.variant {
	case "then-set":
		r.holdPastDeadline(t, ctx, initial, "policy do-nothing")
		set := time.Now()
		setSetting(t, r.store, settings.NameNodeDownPodDeletionPolicy, string(r.policy))
		r.rec.mark("settings set " + settings.NameNodeDownPodDeletionPolicy + " " + string(r.policy))
		covered := r.waitCovered(t, ctx, 10*time.Second)
		r.logLatency(t, "settings set → reaped", set, covered)
		return covered
	case "dry-run":
		r.holdPastDeadline(t, ctx, r.policy, "dry run")
		for _, role := range r.coveredRoles() {
			p := r.pods.all()[role]
			waitEvent(t, ctx, p, controller.EventWouldForceDelete, "dry run", string(r.policy), string(controller.ReasonPastDeadline))
		}
		if v := r.acting.metricValue(t, podsDeletedSample(controller.OwnerStatefulSet, string(r.policy))); v != 0 {
			t.Errorf("dry run: pods_deleted_total = %v, want 0", v)
		}
		set := time.Now()
		setSetting(t, r.store, settings.NameDryRun, "false")
		r.rec.mark("settings set dry-run false")
		covered := r.waitCovered(t, ctx, 10*time.Second)
		r.logLatency(t, "dry-run false → reaped", set, covered)
		return covered
	case "failover":
		return r.failover(t, ctx)
	}
	covered := r.waitCovered(t, ctx, time.Until(r.deadline)+15*time.Second)
	for role, d := range covered {
		t.Logf("FIGURE %s own deletion deadline → reaped: %s pod %s %.2fs", r.ns, role, r.pods.all()[role].Name,
			d.at.Sub(r.pods.deadlines[role]).Seconds())
	}
	return covered
}

// holdPastDeadline waits until stayWindow past the deadline and checks that
// nothing was deleted meanwhile, with the reason Events of a non-action.
func (r *caseRun) holdPastDeadline(t *testing.T, ctx context.Context, policy controller.PodDeletionPolicy, why string) {
	time.Sleep(time.Until(r.deadline.Add(stayWindow)))
	r.rec.mark(fmt.Sprintf("deadline + %s: nothing deleted (%s)", stayWindow, why))
	checkStays(t, ctx, r.rec, r.pods.all(), why)
	checkNoForeignDetach(t, r.rec, r.pods, r.pods.all())
	if why == "dry run" {
		return
	}
	for role, p := range r.pods.all() {
		waitEvent(t, ctx, p, controller.EventPodNotReaped, string(notReapedReason(role, string(policy))), "policy "+string(policy))
	}
}

// coveredRoles are the roles the case's final policy force-deletes.
func (r *caseRun) coveredRoles() []string {
	switch r.policy {
	case controller.PolicyDeleteStatefulSetPod:
		return []string{"web"}
	case controller.PolicyDeleteDeploymentPod:
		return []string{"app"}
	case controller.PolicyDeleteBoth:
		return []string{"web", "app"}
	}
	return nil
}

// waitCovered waits until each covered pod is gone and returns the deletions.
func (r *caseRun) waitCovered(t *testing.T, ctx context.Context, timeout time.Duration) map[string]deletion {
	out := map[string]deletion{}
	for _, role := range r.coveredRoles() {
		p := r.pods.all()[role]
		out[role] = waitReaped(t, ctx, r.rec, p, timeout)
		r.rec.mark(fmt.Sprintf("reap: %s pod %s force-deleted", role, p.Name))
	}
	return out
}

func (r *caseRun) logLatency(t *testing.T, what string, from time.Time, covered map[string]deletion) {
	for role, d := range covered {
		t.Logf("FIGURE %s %s: %s pod %s %.2fs", r.ns, what, role, r.pods.all()[role].Name, d.at.Sub(from).Seconds())
	}
}

// checkReaped checks each reaped pod: its attachments left to Kubernetes, a
// replacement on another node, an Event on the pod naming the policy, the
// metric.
func (r *caseRun) checkReaped(t *testing.T, ctx context.Context, covered map[string]deletion) {
	owners := map[string]controller.OwnerKind{"web": controller.OwnerStatefulSet, "app": controller.OwnerDeployment}
	for role, d := range covered {
		p := r.pods.all()[role]
		// deletionTimestamp has whole seconds; the reaper must not act before it.
		if own := r.pods.deadlines[role]; d.at.Before(own.Add(-200 * time.Millisecond)) {
			t.Errorf("pod %s reaped at %s, before its deletion deadline %s", p.Name, d.at.Format(time.RFC3339Nano), own.Format(time.RFC3339))
		}
		checkOrder(t, r.rec, r.pods, p, d)
		waitReplacement(t, ctx, p)
		waitEvent(t, ctx, p, controller.EventPodForceDeleted, "policy "+string(r.policy), string(controller.ReasonPastDeadline))
	}
	// Other tests' pods on the shared sandbox may be on the victim too, and the
	// reaper rightly reaps those as well: the counters must match the Events the
	// reaper put on the victim's pods since this case's managers started.
	for role := range covered {
		owner, policy := owners[role], string(r.policy)
		r.matchEvents(t, ctx, podsDeletedSample(owner, policy), 1, controller.EventPodForceDeleted,
			"(owner "+string(owner)+")", "policy "+policy)
	}
	// No datapath here: nothing is proven fenced, so Vigil frees no attachment
	// (decision table row 5: only volume-attachment-recovery-policy immediate
	// with a proof deletes them first; TestLoop covers that).
	if v := r.acting.metricValue(t, "vigil_reaper_volumeattachments_deleted_total"); v != 0 ||
		nodeEventCount(t, ctx, controller.EventVolumeAttachmentDeleted, r.started) != 0 {
		t.Errorf("manager %s deleted %v VolumeAttachments without a proof of fencing; want none", r.acting.name, v)
	}
	for _, m := range r.managers {
		if m == r.acting || m.exited() {
			continue
		}
		for _, o := range owners {
			if v := m.metricValue(t, podsDeletedSample(o, string(r.policy))); v != 0 {
				t.Errorf("manager %s (not the one acting) deleted %v %s pods", m.name, v, o)
			}
		}
	}
}

// matchEvents waits until the acting manager's sample equals the number of
// Events of reason on the victim's pods (messages containing want) since the managers
// started, and that number is at least min.
func (r *caseRun) matchEvents(t *testing.T, ctx context.Context, sample string, atLeast int, reason string, want ...string) {
	t.Helper()
	var n int
	var v float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n = victimPodEventCount(t, ctx, reason, r.started, want...)
		v = r.acting.metricValue(t, sample)
		if n >= atLeast && v == float64(n) {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Errorf("manager %s: %s = %v, but %d %s Events on pods of node %s (want at least %d, and equal)",
		r.acting.name, sample, v, n, reason, reapVictim, atLeast)
}

// checkStaying checks the pods the policy does not cover: still there
// (Terminating) stayWindow past the deadline, no StatefulSet replacement, and
// Events saying why.
func (r *caseRun) checkStaying(t *testing.T, ctx context.Context, stays map[string]corev1.Pod) {
	if wait := time.Until(r.deadline.Add(stayWindow)); wait > 0 {
		time.Sleep(wait)
	}
	checkStays(t, ctx, r.rec, stays, "policy "+string(r.policy)+" does not cover it")
	for role, p := range stays {
		if role == "web" || role == "keep" {
			checkNoReplacement(t, ctx, p)
		}
		waitEvent(t, ctx, p, controller.EventPodNotReaped, string(notReapedReason(role, string(r.policy))), "policy "+string(r.policy))
		checkNoForceDelete(t, ctx, p)
	}
	for _, owner := range []controller.OwnerKind{controller.OwnerJob, controller.OwnerDaemonSet, controller.OwnerNone} {
		if r.acting.hasSeries(t, fmt.Sprintf(`vigil_reaper_pods_deleted_total{owner_kind="%s"`, owner)) {
			t.Errorf("manager %s force-deleted a pod of owner kind %s", r.acting.name, owner)
		}
	}
}

// waitLeader waits until the Lease names a holder other than not and exactly one
// running manager logs that it leads; it returns that manager.
func (r *caseRun) waitLeader(t *testing.T, not string, timeout time.Duration) *manager {
	t.Helper()
	var leader *manager
	c := sb.Client()
	must(t, sandbox.Poll(context.Background(), timeout, "a leader of Lease "+vigil.Namespace+"/"+vigil.ManagerLeaseName,
		func(ctx context.Context) (bool, string, error) {
			l, err := c.CoordinationV1().Leases(vigil.Namespace).Get(ctx, vigil.ManagerLeaseName, metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == not {
				return false, fmt.Sprintf("lease: %v", err), nil
			}
			var leaders []*manager
			for _, m := range r.managers {
				select {
				case <-m.done:
					continue
				default:
				}
				if m.isLeader() {
					leaders = append(leaders, m)
				}
			}
			if len(leaders) > 1 {
				return false, "", fmt.Errorf("%d managers act as leader at once", len(leaders))
			}
			if len(leaders) == 1 {
				leader = leaders[0]
			}
			return leader != nil, "holder " + *l.Spec.HolderIdentity, nil
		}, nil))
	return leader
}

// failover: only the leader acts; the leader is SIGKILLed at the eviction (the
// Lease is not released); the standby takes the Lease when it expires and reaps.
func (r *caseRun) failover(t *testing.T, ctx context.Context) map[string]deletion {
	standby := r.acting
	if v := standby.metricValue(t, "vigil_nodes_down"); v != 0 {
		t.Errorf("standby %s: vigil_nodes_down = %v before it leads, want 0 (it must not act)", standby.name, v)
	}
	if standby.hasSeries(t, "vigil_reaper_decisions_total{") {
		t.Errorf("standby %s made reaper decisions before it leads", standby.name)
	}
	l, err := sb.Client().CoordinationV1().Leases(vigil.Namespace).Get(ctx, vigil.ManagerLeaseName, metav1.GetOptions{})
	must(t, err)
	holder := *l.Spec.HolderIdentity
	r.leader.kill(t)
	killed := time.Now()
	r.rec.mark("SIGKILL of the leader " + r.leader.name)
	if next := r.waitLeader(t, holder, 40*time.Second); next != standby {
		t.Fatalf("after the leader's death the new leader is %s, want the standby %s", next.name, standby.name)
	}
	r.rec.mark("standby " + standby.name + " holds the Lease and acts")
	t.Logf("FIGURE %s takeover (leader SIGKILL → standby leads): %.2fs", r.ns, time.Since(killed).Seconds())
	covered := r.waitCovered(t, ctx, time.Until(r.deadline)+30*time.Second)
	r.logLatency(t, "leader SIGKILL → reaped", killed, covered)
	return covered
}
