package controller

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vigil-storage/vigil/settings"
	corev1 "k8s.io/api/core/v1"
)

func TestNodeVerdict_States(t *testing.T) {
	const debounce = 15 * time.Second
	seen := t0.Add(-2 * time.Minute) // the manager first saw the node not Ready
	silent := t0.Add(-5 * time.Second)
	cases := []struct {
		name      string
		obs       nodeObservation
		want      NodeState
		wantSince time.Time
	}{
		{"ready", nodeObservation{Node: newNode("n", corev1.ConditionTrue, -time.Hour)}, NodeReady, time.Time{}},
		{"no ready condition yet", nodeObservation{Node: &corev1.Node{}}, NodeReady, time.Time{}},
		{"unknown is down at once, since the manager saw it",
			nodeObservation{Node: newNode("n", corev1.ConditionUnknown, -time.Second), NotReadySince: seen}, NodeDownUnknown, seen},
		{"false within the debounce of the manager's own observation",
			nodeObservation{Node: newNode("n", corev1.ConditionFalse, -time.Hour), NotReadySince: t0.Add(-14 * time.Second)},
			NodeNotReadyDebouncing, time.Time{}},
		{"false at the debounce", nodeObservation{Node: newNode("n", corev1.ConditionFalse, -time.Second), NotReadySince: t0.Add(-15 * time.Second)},
			NodeDownNotReady, t0},
		{"deleted (confirmed)", nodeObservation{NotReadySince: seen}, NodeDownDeleted, seen},
		{"out-of-service while not ready",
			nodeObservation{Node: newNode("n", corev1.ConditionFalse, -time.Second, outOfService(-5*time.Second)), NotReadySince: seen},
			NodeDownOutOfService, seen},
		{"out-of-service on a ready node", nodeObservation{Node: newNode("n", corev1.ConditionTrue, -time.Hour, outOfService(-5*time.Second))},
			NodeReady, time.Time{}},
		{"storage-isolated but not fenced is not down",
			nodeObservation{Node: newNode("n", corev1.ConditionTrue, -time.Hour), Isolated: true, SilentSince: silent},
			NodeStorageIsolated, time.Time{}},
		{"storage-isolated and fenced is down since the silence began",
			nodeObservation{Node: newNode("n", corev1.ConditionTrue, -time.Hour), Isolated: true, SilentSince: silent, Fenced: true, FencedAt: t0},
			NodeDownStorageIsolated, silent},
		{"storage-isolated and fenced while debouncing is down",
			nodeObservation{Node: newNode("n", corev1.ConditionFalse, -time.Second), NotReadySince: t0.Add(-time.Second),
				Isolated: true, SilentSince: silent, Fenced: true}, NodeDownStorageIsolated, silent},
		{"fenced but heartbeating again is not down",
			nodeObservation{Node: newNode("n", corev1.ConditionTrue, -time.Hour), Fenced: true, FencedAt: t0}, NodeReady, time.Time{}},
		{"Kubernetes' verdict wins over isolation", nodeObservation{Node: newNode("n", corev1.ConditionUnknown, -time.Second),
			NotReadySince: seen, Isolated: true, SilentSince: silent, Fenced: true}, NodeDownUnknown, seen},
		{"held in an outage: unknown is not down",
			nodeObservation{Node: newNode("n", corev1.ConditionUnknown, -time.Second), NotReadySince: seen, OutageHeld: true},
			NodeHeldControlPlaneOutage, time.Time{}},
		{"held in an outage: false past the debounce is not down",
			nodeObservation{Node: newNode("n", corev1.ConditionFalse, -time.Second), NotReadySince: seen, OutageHeld: true},
			NodeHeldControlPlaneOutage, time.Time{}},
		{"held in an outage: debouncing stays debouncing",
			nodeObservation{Node: newNode("n", corev1.ConditionFalse, -time.Second), NotReadySince: t0.Add(-time.Second), OutageHeld: true},
			NodeNotReadyDebouncing, time.Time{}},
		{"held in an outage: ready stays ready", nodeObservation{Node: newNode("n", corev1.ConditionTrue, -time.Hour), OutageHeld: true},
			NodeReady, time.Time{}},
		{"held in an outage: the out-of-service taint still stands",
			nodeObservation{Node: newNode("n", corev1.ConditionFalse, -time.Second, outOfService(-5*time.Second)), NotReadySince: seen, OutageHeld: true},
			NodeDownOutOfService, seen},
		{"held in an outage: a deleted node is still down", nodeObservation{NotReadySince: seen, OutageHeld: true}, NodeDownDeleted, seen},
		{"held in an outage: a node fenced before stays down", nodeObservation{Node: newNode("n", corev1.ConditionUnknown, -time.Second),
			NotReadySince: seen, OutageHeld: true, Fenced: true, FencedAt: t0}, NodeDownUnknown, seen},
		{"held in an outage: a storage-isolated node keeps its own rule", nodeObservation{Node: newNode("n", corev1.ConditionUnknown, -time.Second),
			NotReadySince: seen, OutageHeld: true, Isolated: true, SilentSince: silent}, NodeDownUnknown, seen},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := nodeVerdict(tc.obs, debounce, t0)
			if v.State != tc.want || !v.Since.Equal(tc.wantSince) {
				t.Errorf("got %s since %v, want %s since %v", v.State, v.Since, tc.want, tc.wantSince)
			}
			if v.State.Fenced() != (tc.want == NodeDownDeleted || tc.want == NodeDownOutOfService) {
				t.Errorf("Fenced() = %t for %s", v.State.Fenced(), v.State)
			}
		})
	}
}

// The debounce counts from the manager's own first observation, never from the
// kubelet's lastTransitionTime (the node's clock, which may be far off).
func TestNodeVerdict_DebounceUsesManagerClock(t *testing.T) {
	tr := newNodeTracker()
	// The node's clock says Ready=False began an hour ago; the manager sees it now.
	node := newNode("n", corev1.ConditionFalse, -time.Hour)
	if v := nodeVerdict(tr.observe("n", node, t0), 15*time.Second, t0); v.State != NodeNotReadyDebouncing {
		t.Fatalf("first observation: %s, want debouncing", v.State)
	}
	if v := nodeVerdict(tr.observe("n", node, t0.Add(15*time.Second)), 15*time.Second, t0.Add(15*time.Second)); v.State != NodeDownNotReady {
		t.Fatalf("after the debounce: %s, want down", v.State)
	}
}

// A kubelet restart flips Ready to False for a few seconds; every Ready between
// flips resets the manager's observation, so a node that flaps faster than the
// debounce is never down.
func TestNodeVerdict_FlappingNeverDebouncesThrough(t *testing.T) {
	tr := newNodeTracker()
	for i := range 40 {
		now := t0.Add(time.Duration(i) * 5 * time.Second)
		status := corev1.ConditionFalse
		if i%3 == 2 {
			status = corev1.ConditionTrue
		}
		if v := nodeVerdict(tr.observe("n", newNode("n", status, 0), now), 15*time.Second, now); v.State.Down() {
			t.Fatalf("flap %d: node judged down (%s)", i, v.State)
		}
	}
}

func TestController_SyncNode_TransitionsEventsAndGauge(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	f.start()
	ctx := context.Background()
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	f.expectEvents("Warning " + EventNodeDown)
	if got := testutil.ToFloat64(f.ctrl.metrics.NodesDown); got != 1 {
		t.Errorf("nodes down = %v", got)
	}
	if got := f.ctrl.queue.Len(); got != 2 {
		t.Errorf("queue holds %d keys, want the node's one pod and its attachments", got)
	}
	// A resync of the same state: no new Event.
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents()

	// The node flaps: Ready, then Unknown again. One recovery Event; the second
	// down Event is identical to the first and is suppressed.
	setNode := func(n *corev1.Node) {
		slim, _ := TransformForCache(n)
		if err := f.factory.Core().V1().Nodes().Informer().GetIndexer().Update(slim); err != nil {
			t.Fatal(err)
		}
	}
	setNode(newNode("node-1", corev1.ConditionTrue, 0))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents("Normal " + EventNodeRecovered)
	if got := testutil.ToFloat64(f.ctrl.metrics.NodesDown); got != 0 {
		t.Errorf("nodes down = %v after recovery", got)
	}
	setNode(newNode("node-1", corev1.ConditionUnknown, 5*time.Second))
	f.now = t0.Add(10 * time.Second)
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents()
	if got := testutil.ToFloat64(f.ctrl.metrics.NodesDown); got != 1 {
		t.Errorf("nodes down = %v", got)
	}
}

func TestController_WatchSettings_RequeuesPodsOnDownNodesAtOnce(t *testing.T) {
	f := newFixture(t, PolicyDoNothing)
	statefulSetOnDownNode(f)
	f.start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	for f.ctrl.queue.Len() > 0 {
		k, _ := f.ctrl.queue.Get()
		f.ctrl.queue.Done(k)
		f.ctrl.queue.Forget(k)
	}
	go f.ctrl.watchSettings(ctx)
	f.settings.changes <- settings.Change{Name: settings.NameNodeDownPodDeletionPolicy, Value: string(PolicyDeleteStatefulSetPod)}
	got := make(chan queueKey)
	go func() {
		for {
			k, shutdown := f.ctrl.queue.Get()
			if shutdown {
				return
			}
			f.ctrl.queue.Done(k)
			if k.kind == keyPod {
				got <- k
				return
			}
		}
	}()
	select {
	case k := <-got:
		if k.namespace != "app" || k.name != "db-0" {
			t.Fatalf("queued %+v", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pod on the down node was not requeued")
	}
	f.ctrl.queue.ShutDown()
}

func TestController_NodeStatuses_ReportsTheTracker(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	f.start()
	f.ctrl.nodes.setIsolated("node-1", true, t0.Add(-4*time.Second))
	if err := f.ctrl.syncNode(context.Background(), "node-1"); err != nil {
		t.Fatal(err)
	}
	st := f.ctrl.NodeStatuses()
	if len(st) != 1 || st[0].Name != "node-1" || st[0].State != NodeDownStorageIsolated || !st[0].Down || !st[0].Isolated ||
		st[0].FencedAt.IsZero() || !st[0].SilentSince.Equal(t0.Add(-4*time.Second)) || !st[0].Since.Equal(st[0].SilentSince) {
		t.Fatalf("statuses %+v", st)
	}
}
