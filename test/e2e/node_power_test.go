package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/sandbox"
)

// Events of the power-cut timeline.
const (
	evNotReady     = "node Ready=Unknown (NotReady)"
	evNoSchedule   = "taint node.kubernetes.io/unreachable:NoSchedule"
	evNoExecute    = "taint node.kubernetes.io/unreachable:NoExecute"
	evSTSEvicted   = "StatefulSet pod evicted (Terminating)"
	evSTSReplaced  = "StatefulSet replacement created"
	evDepEvicted   = "Deployment pod evicted (Terminating)"
	evDepReplaced  = "Deployment replacement created"
	evDepScheduled = "Deployment replacement scheduled on"
	evVANew        = "VolumeAttachment created for the replacement on"
	evDepRunning   = "Deployment replacement Running (kwok: says nothing about its volume)"
)

// TestNodePowerOff_KubernetesBaseline shows what Kubernetes alone does when a node
// hosting a StatefulSet pod and a Deployment pod, both with driver.vigil.io
// volumes, loses power: the node goes NotReady with the unreachable taints, both
// pods are evicted once their toleration expires, the Deployment gets a
// replacement, and the StatefulSet pod stays Terminating with no replacement.
func TestNodePowerOff_KubernetesBaseline(t *testing.T) {
	ctx := context.Background()
	c := sb.Client()
	const ns, victim = "baseline", "node-1"
	stsPod, depPod := deployBaselineWorkloads(t, ctx, ns, victim)

	t.Cleanup(func() {
		if err := sb.Start(victim); err != nil {
			t.Errorf("restart %s: %v", victim, err)
		}
		if err := sb.WaitNodeReady(ctx, 30*time.Second, corev1.ConditionTrue, victim); err != nil {
			t.Errorf("%s after restart: %v", victim, err)
		}
	})
	bootBefore := nodeStatus(t, victim).BootID
	// The attach-detach controller attaches the two volumes of victim's pods.
	must(t, sandbox.Poll(ctx, 30*time.Second, "2 VolumeAttachments on "+victim, func(ctx context.Context) (bool, string, error) {
		n := attachmentsOn(t, ctx, victim)
		return n == 2, fmt.Sprintf("%d", n), nil
	}, func(ctx context.Context) string { return sandbox.DescribePVCs(ctx, c, ns) }))

	start := time.Now()
	if err := sb.Stop(victim); err != nil {
		t.Fatalf("power off %s: %v", victim, err)
	}
	tl := newTimeline(start)
	tl.mark("power cut: kwok and stand-in SIGKILLed", time.Now())
	for _, p := range nodeStatus(t, victim).Processes {
		if p.Running {
			t.Errorf("process %s (pid %d) of %s survived the power cut", p.Name, p.PID, victim)
		}
	}

	watchPowerCut(t, ctx, tl, ns, victim, stsPod, depPod)
	t.Log(tl.table(fmt.Sprintf("Power cut of %s (kubernetes alone; node-monitor-grace-period %s, toleration %ds, pod grace %ds)",
		victim, nodeMonitorGrace, tolerationSeconds, podGraceSeconds)))

	checkBaseline(t, tl, victim)
	if n := attachmentsOn(t, ctx, victim); n != 2 {
		t.Errorf("%d VolumeAttachments left on the dead %s, want both still there (nobody detaches them)", n, victim)
	}
	if t.Failed() {
		t.Log(sandbox.DescribeNodes(ctx, c, victim))
		t.Log(sandbox.DescribePods(ctx, c, ns, ""))
	}

	// Power on again: a new boot id, the stand-in restarted.
	if err := sb.Start(victim); err != nil {
		t.Fatalf("power on %s: %v", victim, err)
	}
	after := nodeStatus(t, victim)
	if after.BootID == bootBefore || after.BootID == "" {
		t.Errorf("boot id after restart = %q, before %q: want a new one", after.BootID, bootBefore)
	}
	for _, p := range after.Processes {
		if !p.Running {
			t.Errorf("process %s of %s not running after power on", p.Name, victim)
		}
	}
	if err := sb.WaitNodeReady(ctx, 30*time.Second, corev1.ConditionTrue, victim); err != nil {
		t.Error(err)
	}
}

// deployBaselineWorkloads creates a StatefulSet of 2 and a Deployment of 1 on
// static driver.vigil.io volumes, one pod of each on victim, and returns those two.
func deployBaselineWorkloads(t *testing.T, ctx context.Context, ns, victim string) (sts, dep corev1.Pod) {
	t.Helper()
	c := sb.Client()
	must(t, sandbox.EnsureNamespace(ctx, c, ns))
	must(t, sandbox.EnsureCSIDriver(ctx, c, true))
	claims := []string{"data-web-0", "data-web-1", "app-data"}
	for _, cl := range claims {
		must(t, sandbox.CreateStaticVolume(ctx, c, ns, cl, "1Gi"))
	}
	// Pre-bound claims can take ~10 s to be Bound; pods wait for that.
	must(t, sandbox.WaitPVCsBound(ctx, c, ns, claims, 60*time.Second))
	grace := int64(podGraceSeconds)
	web := sandbox.Workload{Namespace: ns, Name: "web", Prefer: []string{victim}, Spread: true,
		StorageClass: sandbox.StaticClaimClass, TerminationGracePeriodSeconds: &grace}
	app := sandbox.Workload{Namespace: ns, Name: "app", Prefer: []string{victim}, Claims: []string{"app-data"},
		TerminationGracePeriodSeconds: &grace}
	_, err := c.AppsV1().StatefulSets(ns).Create(ctx, web.StatefulSet(2), metav1.CreateOptions{})
	must(t, err)
	_, err = c.AppsV1().Deployments(ns).Create(ctx, app.Deployment(1), metav1.CreateOptions{})
	must(t, err)
	webPods, err := sandbox.WaitPodsRunning(ctx, c, ns, web.Selector(), 2, 60*time.Second)
	must(t, err)
	appPods, err := sandbox.WaitPodsRunning(ctx, c, ns, app.Selector(), 1, 60*time.Second)
	must(t, err)
	var okSTS, okDep bool
	for _, p := range webPods {
		if p.Spec.NodeName == victim {
			sts, okSTS = p, true
		}
	}
	if appPods[0].Spec.NodeName == victim {
		dep, okDep = appPods[0], true
	}
	if !okSTS || !okDep {
		t.Fatalf("want a pod of each workload on %s:\n%s", victim, sandbox.DescribePods(ctx, c, ns, ""))
	}
	return sts, dep
}

// watchPowerCut polls the cluster every 100 ms and marks each event of the
// timeline, until the StatefulSet pod has been Terminating for its whole grace
// period and 10 s more, and the Deployment replacement runs (or 2 minutes pass).
func watchPowerCut(t *testing.T, ctx context.Context, tl *timeline, ns, victim string, sts, dep corev1.Pod) {
	c := sb.Client()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		now := time.Now()
		if node, err := c.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{}); err == nil {
			if sandbox.NodeReadyStatus(node) != corev1.ConditionTrue {
				tl.mark(evNotReady, now)
			}
			for _, taint := range node.Spec.Taints {
				if taint.Key == corev1.TaintNodeUnreachable {
					tl.mark(map[corev1.TaintEffect]string{corev1.TaintEffectNoSchedule: evNoSchedule,
						corev1.TaintEffectNoExecute: evNoExecute}[taint.Effect], now)
				}
			}
		}
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("list pods: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, p := range pods.Items {
			markPod(tl, p, sts, dep, now)
		}
		markAttachments(t, ctx, tl, victim, now)
		evicted, ok := tl.seen(evSTSEvicted)
		_, running := tl.seen(evDepRunning)
		if ok && running && now.Sub(tl.start) > evicted+time.Duration(podGraceSeconds+10)*time.Second {
			tl.mark(fmt.Sprintf("StatefulSet pod %s still Terminating, no replacement (end of watch)", sts.Name), now)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// markAttachments marks the VolumeAttachments of the test's volumes created for
// another node than victim: the attach-detach controller's answer to a replacement.
func markAttachments(t *testing.T, ctx context.Context, tl *timeline, victim string, now time.Time) {
	vas, err := sb.Client().StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("list VolumeAttachments: %v", err)
		return
	}
	for _, va := range vas.Items {
		if va.Spec.NodeName != victim && va.Spec.Source.PersistentVolumeName != nil &&
			strings.HasPrefix(*va.Spec.Source.PersistentVolumeName, "pv-baseline-app-") {
			tl.mark(evVANew+" "+va.Spec.NodeName+" (the one on "+victim+" remains)", now)
		}
	}
}

// attachmentsOn counts the VolumeAttachments of node.
func attachmentsOn(t *testing.T, ctx context.Context, node string) int {
	vas, err := sb.Client().StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list VolumeAttachments: %v", err)
	}
	n := 0
	for _, va := range vas.Items {
		if va.Spec.NodeName == node {
			n++
		}
	}
	return n
}

func markPod(tl *timeline, p, sts, dep corev1.Pod, now time.Time) {
	switch {
	case p.UID == sts.UID && p.DeletionTimestamp != nil:
		tl.mark(evSTSEvicted, now)
		if hasCondition(p, corev1.DisruptionTarget) {
			tl.mark("StatefulSet pod condition DisruptionTarget", now)
		}
	case p.UID == dep.UID && p.DeletionTimestamp != nil:
		tl.mark(evDepEvicted, now)
	case p.Name == sts.Name && p.UID != sts.UID:
		tl.mark(evSTSReplaced, now)
	case p.Labels["app"] == dep.Labels["app"] && p.UID != dep.UID:
		tl.mark(evDepReplaced, now)
		if p.Spec.NodeName != "" {
			tl.mark(evDepScheduled+" "+p.Spec.NodeName, now)
		}
		if p.Status.Phase == corev1.PodRunning {
			tl.mark(evDepRunning, now)
		}
	}
}

// checkBaseline asserts Kubernetes' own behaviour on the recorded timeline.
func checkBaseline(t *testing.T, tl *timeline, victim string) {
	t.Helper()
	need := func(ev string) time.Duration {
		d, ok := tl.seen(ev)
		if !ok {
			t.Errorf("never seen: %s", ev)
		}
		return d
	}
	notReady := need(evNotReady)
	if limit := nodeMonitorGrace + 5*time.Second; notReady > limit {
		t.Errorf("%s at %.1fs, want within %s", evNotReady, notReady.Seconds(), limit)
	}
	need(evNoSchedule)
	noExec := need(evNoExecute)
	for _, ev := range []string{evSTSEvicted, evDepEvicted} {
		d := need(ev)
		want := noExec + tolerationSeconds*time.Second
		if d < want-1500*time.Millisecond || d > want+10*time.Second {
			t.Errorf("%s at %.1fs, want about NoExecute (%.1fs) + toleration %ds", ev, d.Seconds(), noExec.Seconds(), tolerationSeconds)
		}
	}
	if d, ok := tl.seen(evSTSReplaced); ok {
		t.Errorf("%s at %.1fs: Kubernetes alone must not replace a StatefulSet pod whose node is down", evSTSReplaced, d.Seconds())
	}
	replaced := need(evDepReplaced)
	if evicted, ok := tl.seen(evDepEvicted); ok && replaced < evicted-time.Second {
		t.Errorf("Deployment replacement at %.1fs, before the eviction at %.1fs", replaced.Seconds(), evicted.Seconds())
	}
	scheduled := false
	for _, e := range tl.order {
		if strings.HasPrefix(e, evDepScheduled+" ") {
			scheduled = true
			if strings.HasSuffix(e, " "+victim) {
				t.Errorf("%s: the replacement went to the dead node", e)
			}
		}
	}
	if !scheduled {
		t.Errorf("never seen: %s", evDepScheduled)
	}
}

func hasCondition(p corev1.Pod, ct corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == ct && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func nodeStatus(t *testing.T, name string) sandbox.NodeStatus {
	t.Helper()
	st, err := sb.Status(context.Background())
	if err != nil {
		t.Fatalf("sandbox status: %v", err)
	}
	for _, n := range st.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s in sandbox status", name)
	return sandbox.NodeStatus{}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
