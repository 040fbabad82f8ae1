package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
)

// outageFixture is three nodes in state ready, each running a StatefulSet pod
// on a Vigil volume granted to it; db-1's pod is terminating past its deadline
// (Kubernetes' own trigger); the fast trigger is on with a 2 s grace.
func outageFixture(t *testing.T, ready corev1.ConditionStatus) *fixture {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	f.settings.fast, f.settings.grace = true, 2*time.Second
	for i, n := range []string{"node-1", "node-2", "node-3"} {
		pod := newPod("app", "db-"+n[5:], n, controllerRef("apps/v1", "StatefulSet", "db", "uid-sts"), pvcVolume("data", "data-"+n))
		if i == 0 {
			pod = terminating(pod, -time.Second)
		}
		pv := "pv-" + n
		f.objects = append(f.objects, pod, newNode(n, ready, -time.Hour),
			newPVC("app", "data-"+n, pv, nil), newPV(pv, vigil.DriverName), newVA("va-"+n, pv, n))
		f.backend.grant(n, "handle-"+pv)
	}
	return f
}

// heartbeats sets every node heartbeating at the datapath (silent ones named).
func (f *fixture) heartbeats(silent ...string) {
	m := map[string]time.Duration{"node-1": 0, "node-2": 0, "node-3": 0}
	for _, n := range silent {
		m[n] = time.Minute
	}
	f.backend.setReport(heartbeatReport(f.now, m))
}

func (f *fixture) poll() {
	f.t.Helper()
	reachable, warned := true, false
	f.ctrl.pollStorage(context.Background(), &reachable, &warned)
}

// setReady changes a node's Ready condition in the cache and the client.
func (f *fixture) setReady(name string, status corev1.ConditionStatus) {
	f.t.Helper()
	n := newNode(name, status, f.now.Sub(t0))
	n.ResourceVersion = "2"
	slim, _ := TransformForCache(n)
	if err := f.factory.Core().V1().Nodes().Informer().GetIndexer().Update(slim); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.client.ClearActions()
}

func (f *fixture) syncAll(ctx context.Context) {
	f.t.Helper()
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if err := f.ctrl.syncNode(ctx, n); err != nil {
			f.t.Fatal(err)
		}
		if err := f.ctrl.syncPod(ctx, "app", "db-"+n[5:]); err != nil {
			f.t.Fatal(err)
		}
		if err := f.ctrl.syncAttachments(ctx, n); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) expectNothingFenced() {
	f.t.Helper()
	if f.backend.fenceCalls != 0 {
		f.t.Errorf("FenceNode called %d times, want none", f.backend.fenceCalls)
	}
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if !f.backend.live(n, "handle-pv-"+n) || f.ctrl.nodes.fenced(n) {
			f.t.Errorf("%s lost its grant or is marked fenced", n)
		}
	}
}

// Every node cut off from the API server while every engine heartbeats:
// nothing is fenced, no pod is force-deleted (not even the one terminating past
// its deadline), no attachment is touched; a Warning Event per node and the
// gauges say why; when the nodes come back nothing has changed.
func TestController_ControlPlaneOutage_NothingFencedOrReaped(t *testing.T) {
	f := outageFixture(t, corev1.ConditionUnknown)
	f.start()
	ctx := context.Background()
	f.heartbeats()
	f.poll()
	evs := f.expectEvents("Warning "+EventControlPlaneOutage, "Warning "+EventControlPlaneOutage, "Warning "+EventControlPlaneOutage)
	for _, e := range evs {
		if !strings.Contains(e, "3 of 3 nodes cut off") || !strings.Contains(e, "threshold 55%") {
			t.Errorf("event %q does not say how many nodes and the threshold", e)
		}
	}
	if testutil.ToFloat64(f.ctrl.metrics.ControlPlaneOutage) != 1 || testutil.ToFloat64(f.ctrl.metrics.NodesHeldOutage) != 3 {
		t.Errorf("gauges outage=%v held=%v, want 1 and 3", testutil.ToFloat64(f.ctrl.metrics.ControlPlaneOutage),
			testutil.ToFloat64(f.ctrl.metrics.NodesHeldOutage))
	}
	f.syncAll(ctx)              // the manager's clock starts counting the nodes down
	f.now = t0.Add(time.Minute) // far past the grace
	f.heartbeats()
	f.poll()
	f.syncAll(ctx)
	f.expectActions()
	f.expectNothingFenced()
	f.expectEvents() // no second outage Event, no NodeDown, no pod Event
	for _, st := range f.ctrl.NodeStatuses() {
		if st.State != NodeHeldControlPlaneOutage || st.Down {
			t.Errorf("%s: %s down=%v, want %s", st.Name, st.State, st.Down, NodeHeldControlPlaneOutage)
		}
	}
	if got := testutil.ToFloat64(f.ctrl.metrics.NodesDown); got != 0 {
		t.Errorf("nodes down gauge %v, want 0", got)
	}
	// The control plane is back: the nodes are Ready, nothing happens.
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		f.setReady(n, corev1.ConditionTrue)
	}
	f.now = t0.Add(2 * time.Minute)
	f.heartbeats()
	f.poll()
	f.syncAll(ctx)
	f.expectActions()
	f.expectNothingFenced()
	f.expectEvents()
	if testutil.ToFloat64(f.ctrl.metrics.ControlPlaneOutage) != 0 || testutil.ToFloat64(f.ctrl.metrics.NodesHeldOutage) != 0 {
		t.Error("gauges still report an outage after the nodes came back")
	}
}

// One node cut off from the API server while its engine heartbeats is a
// zombie: fenced after the grace and its pod reaped, as without the rule.
func TestController_ControlPlaneOutage_OneZombieIsStillFenced(t *testing.T) {
	f := outageFixture(t, corev1.ConditionTrue)
	f.start()
	ctx := context.Background()
	f.setReady("node-1", corev1.ConditionUnknown)
	f.heartbeats()
	f.poll()
	f.expectEvents()
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.now = t0.Add(3 * time.Second)
	f.heartbeats()
	f.poll()
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.live("node-1", "handle-pv-node-1") || !f.ctrl.nodes.fenced("node-1") {
		t.Fatal("the zombie node-1 was not fenced after the grace")
	}
	f.client.ClearActions()
	if err := f.ctrl.syncPod(ctx, "app", "db-1"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete volumeattachments /va-node-1 uid=uid-va-va-node-1", "delete pods app/db-1 grace=0 uid=uid-app-db-1")
}

// A kubelet that died while the engine and the containers still run: its Lease
// goes stale and Kubernetes calls it Unknown; alone, it is a zombie and fenced.
// Two more such nodes make an outage: then the fence waits.
func TestController_ControlPlaneOutage_DeadKubeletIsAZombie(t *testing.T) {
	f := outageFixture(t, corev1.ConditionTrue)
	f.start()
	ctx := context.Background()
	dur := int32(40)
	lease := func(name string, renew time.Time) *coordinationv1.Lease {
		rt := metav1.NewMicroTime(renew)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{RenewTime: &rt, LeaseDurationSeconds: &dur}}
	}
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		f.ctrl.onLease(lease(n, t0))
	}
	// 21 s later only node-2 and node-3 renewed (node-1's kubelet is dead):
	// node-1's Lease is stale, one node, no outage.
	f.now = t0.Add(21 * time.Second)
	f.ctrl.onLease(lease("node-2", f.now))
	f.ctrl.onLease(lease("node-3", f.now))
	f.heartbeats()
	f.poll()
	if f.ctrl.outage.held("node-1") {
		t.Fatal("one dead kubelet held as an outage")
	}
	f.setReady("node-1", corev1.ConditionUnknown)
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(3 * time.Second)
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if !f.ctrl.nodes.fenced("node-1") {
		t.Fatal("the node with a dead kubelet and a live engine was not fenced")
	}
	// The same Leases stale on every node, before Kubernetes calls any of
	// them down: an outage, held at once.
	g := outageFixture(t, corev1.ConditionTrue)
	g.start()
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		g.ctrl.onLease(lease(n, t0))
	}
	g.now = t0.Add(21 * time.Second)
	g.heartbeats()
	g.poll()
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if !g.ctrl.outage.held(n) {
			t.Errorf("%s not held with every Lease stale and every engine heartbeating", n)
		}
	}
	ev := g.expectEvents("Warning "+EventControlPlaneOutage, "Warning "+EventControlPlaneOutage, "Warning "+EventControlPlaneOutage)
	if !strings.Contains(ev[0], "Ready, but its Lease is no longer renewed") {
		t.Errorf("event %q does not say the Lease is stale", ev[0])
	}
}

// When the control plane comes back, the nodes report one by one: the last
// ones are not fenced because the first ones are back. Held for outageSettle,
// then judged by Kubernetes' verdict again.
func TestController_ControlPlaneOutage_HealingNodesAreNotFencedOneByOne(t *testing.T) {
	f := outageFixture(t, corev1.ConditionUnknown)
	f.start()
	ctx := context.Background()
	f.heartbeats()
	f.poll()
	f.events()
	f.now = t0.Add(time.Minute)
	f.setReady("node-1", corev1.ConditionTrue)
	f.heartbeats()
	f.poll()
	f.syncAll(ctx)
	f.expectActions()
	f.expectNothingFenced()
	f.expectEvents()
	// Still not back after the settle: node-2 and node-3 are zombies now.
	f.now = f.now.Add(outageSettle + time.Second)
	f.heartbeats()
	f.poll()
	if err := f.ctrl.syncNode(ctx, "node-2"); err != nil {
		t.Fatal(err)
	}
	if !f.ctrl.nodes.fenced("node-2") {
		t.Fatal("node-2, still down after the settle, was not fenced")
	}
}

// A node judged down (its recovery opened) before the outage was recognized
// is held when it is: its NodeRecovery says why and does not advance.
func TestController_ControlPlaneOutage_MarksTheOpenRecovery(t *testing.T) {
	f := outageFixture(t, corev1.ConditionTrue)
	rc := newFakeRecoveryClient()
	f.start()
	f.ctrl.recoveries = newRecoveries(rc, f.ctrl.metrics, f.ctrl.ownerPodUIDs)
	ctx := context.Background()
	f.setReady("node-1", corev1.ConditionUnknown)
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents("Warning " + EventNodeDown)
	f.setReady("node-2", corev1.ConditionUnknown)
	f.setReady("node-3", corev1.ConditionUnknown)
	f.heartbeats()
	f.poll()
	f.events()
	f.now = t0.Add(time.Minute)
	f.syncAll(ctx)
	f.expectActions()
	f.expectNothingFenced()
	f.expectEvents()
	f.ctrl.recoveries.flush(ctx)
	rec := rc.only(t)
	if rec.Status.Reason != RecoveryReasonControlPlaneOutage || rec.Status.Phase != v1alpha1.PhaseDetected || rec.Status.FencedAt != nil {
		t.Errorf("recovery %+v, want reason %s, still Detected, nothing fenced", rec.Status, RecoveryReasonControlPlaneOutage)
	}
}
