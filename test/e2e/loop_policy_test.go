package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/sandbox"
)

// policyRoles are the owner kinds of the policy matrix (TestReaper_PolicyMatrix),
// each a pod on the victim with a Vigil volume of its own; the first two
// are those delete-both covers.
var policyRoles = []string{"web", "app", "ds", "job", "bare", "keep"}

// testRealPolicies is the policy matrix's representative case on real
// nodes: its last row, delete-both, with the fast trigger, as the loop's
// manager runs it. TestReaper_PolicyMatrix runs every policy on kwok nodes
// (see there why). One node holds a pod of each owner kind, each a writer
// container on a Vigil volume of its own: the StatefulSet web, the
// Deployment app, a DaemonSet, a Job, a bare pod and the StatefulSet keep
// opted out (vigil.io/reap: "false"). Its power is cut. web and app are
// reaped and their replacements' containers run on other nodes with every
// record the old ones acknowledged; the DaemonSet's, the Job's, the bare
// and the opted-out pods stay (Terminating once evicted), never
// force-deleted, each with a VigilPodNotReaped Event saying why, and their
// volumes' grants on the node stay live at the same epoch: only the volumes
// of the pods Vigil reaps are fenced. Then those four go, the node is
// started again, and its engine cleans up and removes the taint.
func (e *loopEnv) testRealPolicies(t *testing.T) {
	ctx := context.Background()
	c := e.s.Client()
	const victim = "node-3"
	apps, pods := e.startPolicyPods(t, ctx, victim)
	epochs := map[string]uint64{}
	for _, role := range policyRoles {
		epochs[role] = waitAttached(t, ctx, e.s, apps[role].pv, victim)
		e.waitAcks(t, sandbox.LedgerFile(e.writer.WriterLedgerDir, string(pods[role].UID)), 5, 60*time.Second)
	}
	for _, role := range policyRoles[:2] {
		e.waitVolumesInUse(t, victim, apps[role].handle)
	}
	t.Cleanup(func() { e.removePolicyPods(t, victim, apps) })

	start := time.Now()
	must(t, e.s.Stop(victim))
	tl := newTimeline(start)
	tl.mark("power cut of "+victim+" (6 writer containers: web, app, ds, job, bare, keep)", time.Now())
	for _, role := range policyRoles[:2] {
		old := pods[role]
		nb := e.waitAppPod(t, apps[role], string(old.UID), victim, 90*time.Second)
		nb = e.waitRunning(t, nb, 60*time.Second)
		e.waitAcks(t, sandbox.LedgerFile(e.writer.WriterLedgerDir, string(nb.UID)), 1, 60*time.Second)
		tl.mark(fmt.Sprintf("%s: replacement %s writing on %s", role, nb.Name, nb.Spec.NodeName), time.Now())
		rec := e.waitRecovery(t, victim, start, v1alpha1.PhaseReaping, 10*time.Second)
		e.checkOldWriter(t, sandbox.LedgerFile(e.writer.WriterLedgerDir, string(old.UID)),
			e.s.PodVolumeDir(nb.Spec.NodeName, nb.UID, apps[role].pv), old, rec)
		if a := e.grants(t, apps[role].handle)[victim]; a.Live() {
			t.Errorf("datapath: %s still live on %s's volume %s: %+v", victim, role, apps[role].handle, a)
		}
		waitPodEvent(t, ctx, c, old, controller.EventPodForceDeleted, "policy "+string(controller.PolicyDeleteBoth))
	}
	deadline := e.waitPolicyEvicted(t, ctx, pods)
	time.Sleep(time.Until(deadline.Add(stayWindow)))
	tl.mark(fmt.Sprintf("the evicted pods' deletion deadline + %s", stayWindow), time.Now())
	for _, role := range policyRoles[2:] {
		want := pods[role]
		p, err := c.CoreV1().Pods(loopNS).Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil || p.UID != want.UID {
			t.Errorf("%s pod %s (uid %s): %v, uid %v; Vigil must leave it", role, want.Name, want.UID, err, p.UID)
		}
		waitPodEvent(t, ctx, c, want, controller.EventPodNotReaped, string(notReapedReason(role, string(controller.PolicyDeleteBoth))))
		checkNoForceDeleteIn(t, ctx, c, want)
		if a := e.grants(t, apps[role].handle)[victim]; !a.Live() || a.Epoch != epochs[role] {
			t.Errorf("datapath: %s's grant of %s's volume %s is %+v; want it live at epoch %d, not fenced", victim, role, apps[role].handle, a, epochs[role])
		}
	}
	rec := e.waitRecovery(t, victim, start, v1alpha1.PhaseReaping, 10*time.Second)
	for _, v := range rec.Status.Volumes {
		for _, role := range policyRoles[2:] {
			if v.Handle == apps[role].handle {
				t.Errorf("NodeRecovery %s lists %s's volume %s as fenced", rec.Name, role, v.Handle)
			}
		}
	}
	t.Log(tl.table(fmt.Sprintf("Power cut of real node %s, delete-both: web and app reaped, ds, job, bare and keep left", victim)))
}

// startPolicyPods starts the workload of each of policyRoles, named pm-ROLE,
// on a claim of its own: the DaemonSet, the Job and the bare pod may run on
// victim only, the others prefer it (keep's must be there); it returns the
// apps and their pods, once each runs on victim.
func (e *loopEnv) startPolicyPods(t *testing.T, ctx context.Context, victim string) (map[string]loopApp, map[string]corev1.Pod) {
	t.Helper()
	c := e.s.Client()
	apps := map[string]loopApp{}
	grace := int64(podGraceSeconds)
	for _, role := range policyRoles {
		a := e.newAppClaim(t, "pm-"+role)
		apps[role] = a
		w := sandbox.Workload{Namespace: loopNS, Name: a.name, Claims: []string{a.claim}, TerminationGracePeriodSeconds: &grace,
			Image: e.writer.Image, WriterLedgerDir: e.writer.WriterLedgerDir, Prefer: []string{victim}}
		var err error
		switch role {
		case "web":
			_, err = c.AppsV1().StatefulSets(loopNS).Create(ctx, w.StatefulSet(1), metav1.CreateOptions{})
		case "app":
			_, err = c.AppsV1().Deployments(loopNS).Create(ctx, w.Deployment(1), metav1.CreateOptions{})
		case "ds":
			w.Nodes = []string{victim}
			_, err = c.AppsV1().DaemonSets(loopNS).Create(ctx, w.DaemonSet(), metav1.CreateOptions{})
		case "job":
			w.Nodes = []string{victim}
			_, err = c.BatchV1().Jobs(loopNS).Create(ctx, w.Job(), metav1.CreateOptions{})
		case "bare":
			w.Nodes = []string{victim}
			_, err = c.CoreV1().Pods(loopNS).Create(ctx, w.Pod(), metav1.CreateOptions{})
		case "keep":
			w.Nodes = []string{victim}
			ss := w.StatefulSet(1)
			ss.Spec.Template.Annotations = map[string]string{vigil.ReapAnnotation: "false"}
			_, err = c.AppsV1().StatefulSets(loopNS).Create(ctx, ss, metav1.CreateOptions{})
		}
		must(t, err)
	}
	pods := map[string]corev1.Pod{}
	for _, role := range policyRoles {
		p := e.waitRunning(t, e.waitAppPod(t, apps[role], "", "", 90*time.Second), 90*time.Second)
		if p.Spec.NodeName != victim {
			t.Fatalf("%s pod %s runs on %s, want %s:\n%s", role, p.Name, p.Spec.NodeName, victim, e.describe(ctx))
		}
		pods[role] = p
	}
	return apps, pods
}

// waitPolicyEvicted waits until the pods of the roles delete-both does not
// cover, but the DaemonSet's (which tolerates the node's taints), are
// Terminating (evicted by the taint manager), and returns their latest
// deletion deadline.
func (e *loopEnv) waitPolicyEvicted(t *testing.T, ctx context.Context, pods map[string]corev1.Pod) time.Time {
	t.Helper()
	var deadline time.Time
	must(t, sandbox.Poll(ctx, 3*(nodeMonitorGrace+tolerationSeconds*time.Second), "the job, bare and keep pods Terminating",
		func(ctx context.Context) (bool, string, error) {
			var waiting []string
			for _, role := range []string{"job", "bare", "keep"} {
				want := pods[role]
				p, err := e.s.Client().CoreV1().Pods(loopNS).Get(ctx, want.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) || (err == nil && p.UID != want.UID) {
					return false, "", fmt.Errorf("%s pod %s (uid %s) is gone: Vigil must leave it", role, want.Name, want.UID)
				}
				if err != nil || p.DeletionTimestamp == nil {
					waiting = append(waiting, want.Name)
					continue
				}
				if p.DeletionTimestamp.After(deadline) {
					deadline = p.DeletionTimestamp.Time
				}
			}
			return len(waiting) == 0, "not Terminating yet: " + strings.Join(waiting, ", "), nil
		}, e.describe))
	return deadline
}

// removePolicyPods deletes the case's workloads, starts victim again (its
// kubelet ends what it still runs of them) and waits until it is clean and
// untainted, then deletes the claims, so the next case finds the sandbox as
// this one did.
func (e *loopEnv) removePolicyPods(t *testing.T, victim string, apps map[string]loopApp) {
	ctx := context.Background()
	c := e.s.Client()
	bg := metav1.DeletePropagationBackground
	del := metav1.DeleteOptions{PropagationPolicy: &bg}
	for role, a := range apps {
		var err error
		switch role {
		case "web", "keep":
			err = c.AppsV1().StatefulSets(loopNS).Delete(ctx, a.name, del)
		case "app":
			err = c.AppsV1().Deployments(loopNS).Delete(ctx, a.name, del)
		case "ds":
			err = c.AppsV1().DaemonSets(loopNS).Delete(ctx, a.name, del)
		case "job":
			err = c.BatchV1().Jobs(loopNS).Delete(ctx, a.name, del)
		case "bare":
			err = c.CoreV1().Pods(loopNS).Delete(ctx, a.name, del)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", a.name, err)
		}
	}
	if err := e.s.Start(victim); err != nil {
		t.Errorf("start %s: %v", victim, err)
	}
	e.waitNodeClean(t, victim, nil)
	for _, a := range apps {
		if err := c.CoreV1().PersistentVolumeClaims(loopNS).Delete(ctx, a.claim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete claim %s: %v", a.claim, err)
		}
	}
}
