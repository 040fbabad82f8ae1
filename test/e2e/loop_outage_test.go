package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/sandbox"
)

// outageApp is one app of testControlPlaneOutage, with what it had before.
type outageApp struct {
	app    loopApp
	pod    corev1.Pod
	node   string
	epoch  uint64
	writer *zombieWriter
}

// testControlPlaneOutage cuts every node off from the API server only (a load
// balancer in front of it failing for the kubelets), for longer than
// Kubernetes takes to call them Unknown plus the grace. Every engine still
// heartbeats to the datapath: the control plane failed, not the nodes. Nothing
// is fenced, nothing is reaped, every volume stays writable during the cut and
// after it; when it heals, every pod, grant and epoch is as before.
func (e *loopEnv) testControlPlaneOutage(t *testing.T) {
	ctx := context.Background()
	nodes := []string{"node-1", "node-2", "node-3"}
	apps := make([]*outageApp, len(nodes))
	for i, n := range nodes {
		apps[i] = &outageApp{app: e.newLoopAppWith(t, fmt.Sprintf("cp%d", i+1), n, tolerateUnreachable)}
	}
	for _, a := range apps {
		a.pod = e.waitAppPod(t, a.app, "", "", 60*time.Second)
		a.node = a.pod.Spec.NodeName
		a.epoch = waitAttached(t, ctx, e.s, a.app.pv, a.node)
		target := waitPublished(t, ctx, e.s, a.node, a.pod, a.app.pv)
		a.writer = startZombieWriter(t, target)
		defer a.writer.halt()
	}
	fencesBefore, _ := e.mgr.metric(t, `vigil_fences_total{outcome="done"}`)

	start := time.Now()
	for _, n := range nodes {
		must(t, e.s.Partition(n, sandbox.PartitionAPIServer))
	}
	healed := false
	defer func() {
		if !healed {
			for _, n := range nodes {
				_ = e.s.Heal(n)
			}
		}
	}()
	tl := newTimeline(start)
	tl.mark("every node cut off from the API server only (engines still reach the datapath)", time.Now())
	e.waitAllReady(t, nodes, corev1.ConditionUnknown, 40*time.Second)
	unknownAt := time.Now()
	tl.mark("Kubernetes calls every node Ready=Unknown", unknownAt)
	if v, ok := e.mgr.metric(t, "vigil_control_plane_outage"); !ok || v != 1 {
		t.Errorf("vigil_control_plane_outage = %v (present %t) with every node Unknown, want 1", v, ok)
	}
	if v, ok := e.mgr.metric(t, "vigil_nodes_held_control_plane_outage"); !ok || v != float64(len(nodes)) {
		t.Errorf("vigil_nodes_held_control_plane_outage = %v (present %t), want %d", v, ok, len(nodes))
	}
	// Well past node-down-grace-period (2 s): the fence would have come by now.
	time.Sleep(6 * time.Second)
	e.checkNothingChanged(t, apps, "during the cut")
	tl.mark("6 s past Unknown: nothing fenced, nothing reaped, every writer acknowledged", time.Now())

	for _, n := range nodes {
		must(t, e.s.Heal(n))
	}
	healed = true
	tl.mark("healed", time.Now())
	e.waitAllReady(t, nodes, corev1.ConditionTrue, 40*time.Second)
	tl.mark("every node Ready again", time.Now())
	time.Sleep(3 * time.Second) // the writers keep writing after the heal
	for _, a := range apps {
		a.writer.halt()
	}
	e.checkNothingChanged(t, apps, "after the heal")
	if v, _ := e.mgr.metric(t, `vigil_fences_total{outcome="done"}`); v != fencesBefore {
		t.Errorf("vigil_fences_total{outcome=\"done\"} went from %v to %v: a fence happened", fencesBefore, v)
	}
	if v, _ := e.mgr.metric(t, "vigil_control_plane_outage"); v != 0 {
		t.Errorf("vigil_control_plane_outage = %v after the heal, want 0", v)
	}
	e.checkOutageEvents(t, nodes)
	e.checkNoRecoveryActed(t, start)
	t.Log(tl.table("Control-plane outage: every node cut off from the API server only → held, nothing fenced or reaped"))
}

// tolerateUnreachable gives the pods Kubernetes' default tolerations of an
// unreachable or not-ready node (300 s), where the sandbox's admission gives
// 10 s: when the nodes come back one by one, the node lifecycle controller
// leaves its full-disruption mode at the first Ready node and taints the
// others, still Unknown until their kubelets report, and with 10 s its own
// taint eviction could delete a pod that Vigil left alone.
func tolerateUnreachable(sts *appsv1.StatefulSet) {
	secs := int64(300)
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		sts.Spec.Template.Spec.Tolerations = append(sts.Spec.Template.Spec.Tolerations, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs})
	}
}

// podEvents is the Events of a pod, one line each, to tell who deleted it.
func (e *loopEnv) podEvents(name string) string {
	evs, err := e.s.Client().CoreV1().Events(loopNS).List(context.Background(),
		metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, ev := range evs.Items {
		fmt.Fprintf(&b, "\n  %s %s %s (%s): %s", ev.LastTimestamp.Format("15:04:05"), ev.InvolvedObject.UID, ev.Reason, ev.Source.Component, ev.Message)
	}
	return b.String()
}

// waitAllReady waits until every node's Ready condition is status.
func (e *loopEnv) waitAllReady(t *testing.T, nodes []string, status corev1.ConditionStatus, timeout time.Duration) {
	t.Helper()
	must(t, sandbox.Poll(context.Background(), timeout, fmt.Sprintf("every node Ready=%s", status), func(ctx context.Context) (bool, string, error) {
		var other []string
		for _, n := range nodes {
			if got := e.readyStatus(t, n); got != status {
				other = append(other, n+"="+string(got))
			}
		}
		return len(other) == 0, strings.Join(other, " "), nil
	}, e.describe))
}

// checkNothingChanged checks every app: the same pod (not terminating), a live
// grant at the same epoch on the same node, no fenced taint, and a writer that
// never failed.
func (e *loopEnv) checkNothingChanged(t *testing.T, apps []*outageApp, when string) {
	t.Helper()
	ctx := context.Background()
	c := e.s.Client()
	for _, a := range apps {
		pod, err := c.CoreV1().Pods(loopNS).Get(ctx, a.pod.Name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("%s: pod %s: %v", when, a.pod.Name, err)
		case pod.UID != a.pod.UID || pod.DeletionTimestamp != nil:
			t.Errorf("%s: pod %s uid %s deleting %v, want the same pod %s, not deleted; its Events:%s",
				when, pod.Name, pod.UID, pod.DeletionTimestamp, a.pod.UID, e.podEvents(pod.Name))
		}
		if g := e.grants(t, a.app.handle)[a.node]; !g.Live() || g.Epoch != a.epoch {
			t.Errorf("%s: datapath row of %s on %s is %+v, want a live grant at epoch %d", when, a.app.pv, a.node, g, a.epoch)
		}
		if n, err := c.CoreV1().Nodes().Get(ctx, a.node, metav1.GetOptions{}); err == nil && fencedTaintOn(n) {
			t.Errorf("%s: %s carries the fenced taint", when, a.node)
		}
		a.writer.mu.Lock()
		acked, fail, ferr := len(a.writer.acked), a.writer.firstFail, a.writer.failErr
		a.writer.mu.Unlock()
		if !fail.IsZero() || acked == 0 {
			t.Errorf("%s: the writer on %s (%s) acknowledged %d records, first failure at %v: %v", when, a.node, a.app.pv, acked, fail, ferr)
		}
	}
}

// checkOutageEvents checks that every node got the control-plane outage Event.
func (e *loopEnv) checkOutageEvents(t *testing.T, nodes []string) {
	t.Helper()
	evs, err := e.s.Client().CoreV1().Events("default").List(context.Background(),
		metav1.ListOptions{FieldSelector: "reason=" + controller.EventControlPlaneOutage})
	must(t, err)
	seen := map[string]bool{}
	for _, ev := range evs.Items {
		if ev.InvolvedObject.Kind == "Node" {
			seen[ev.InvolvedObject.Name] = true
		}
	}
	for _, n := range nodes {
		if !seen[n] {
			t.Errorf("no %s Event on node %s (%d Events of that reason)", controller.EventControlPlaneOutage, n, len(evs.Items))
		}
	}
}

// checkNoRecoveryActed checks that no NodeRecovery since start fenced a node,
// reaped a pod or freed an attachment.
func (e *loopEnv) checkNoRecoveryActed(t *testing.T, since time.Time) {
	t.Helper()
	recs, err := e.rc.List(context.Background(), metav1.ListOptions{})
	must(t, err)
	for _, r := range recs.Items {
		s := r.Status
		if s.DetectedAt == nil || s.DetectedAt.Time.Before(since) {
			continue
		}
		if s.FencedAt != nil || len(s.Pods) > 0 || len(s.Attachments) > 0 {
			t.Errorf("NodeRecovery %s of %s acted during the outage: fenced %v, %d pods reaped, %d attachments freed (reason %s)",
				r.Name, r.Spec.NodeName, s.FencedAt, len(s.Pods), len(s.Attachments), s.Reason)
		}
	}
}
