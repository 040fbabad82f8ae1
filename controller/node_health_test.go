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
	observed := t0.Add(-2 * time.Minute)
	cases := []struct {
		name      string
		node      *corev1.Node
		want      NodeState
		wantSince time.Time
	}{
		{"ready", newNode("n", corev1.ConditionTrue, -time.Hour), NodeReady, time.Time{}},
		{"no ready condition yet", &corev1.Node{}, NodeReady, time.Time{}},
		{"unknown is down at once", newNode("n", corev1.ConditionUnknown, -time.Second), NodeDownUnknown, t0.Add(-time.Second)},
		{"false within debounce", newNode("n", corev1.ConditionFalse, -14*time.Second), NodeNotReadyDebouncing, time.Time{}},
		{"false at the debounce", newNode("n", corev1.ConditionFalse, -15*time.Second), NodeDownNotReady, t0},
		{"deleted", nil, NodeDownDeleted, observed},
		{"out-of-service while not ready", newNode("n", corev1.ConditionFalse, -time.Second, outOfService(-5*time.Second)),
			NodeDownOutOfService, t0.Add(-5 * time.Second)},
		{"out-of-service on a ready node", newNode("n", corev1.ConditionTrue, -time.Hour, outOfService(-5*time.Second)), NodeReady, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := nodeVerdict(tc.node, observed, debounce, t0)
			if v.State != tc.want || !v.Since.Equal(tc.wantSince) {
				t.Errorf("got %s since %v, want %s since %v", v.State, v.Since, tc.want, tc.wantSince)
			}
			if v.State.Fenced() != (tc.want == NodeDownDeleted || tc.want == NodeDownOutOfService) {
				t.Errorf("Fenced() = %t for %s", v.State.Fenced(), v.State)
			}
		})
	}
}

// A kubelet restart flips Ready to False for a few seconds; each flip resets the
// transition time, so a node that flaps faster than the debounce is never down.
func TestNodeVerdict_FlappingNeverDebouncesThrough(t *testing.T) {
	for i := range 20 {
		now := t0.Add(time.Duration(i) * 10 * time.Second)
		node := newNode("n", corev1.ConditionFalse, time.Duration(i)*10*time.Second-8*time.Second)
		if v := nodeVerdict(node, time.Time{}, 15*time.Second, now); v.State.Down() {
			t.Fatalf("flap %d: node judged down (%s)", i, v.State)
		}
	}
}

func TestReaper_SyncNode_TransitionsEventsAndGauge(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	f.start()
	ctx := context.Background()
	if err := f.reaper.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	f.expectEvents("Warning " + EventNodeDown)
	if got := testutil.ToFloat64(f.reaper.metrics.NodesDown); got != 1 {
		t.Errorf("nodes down = %v", got)
	}
	if got := f.reaper.queue.Len(); got != 1 {
		t.Errorf("queue holds %d keys, want the node's one pod", got)
	}
	// A resync of the same state: no new Event.
	if err := f.reaper.syncNode(ctx, "node-1"); err != nil {
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
	if err := f.reaper.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents("Normal " + EventNodeRecovered)
	if got := testutil.ToFloat64(f.reaper.metrics.NodesDown); got != 0 {
		t.Errorf("nodes down = %v after recovery", got)
	}
	setNode(newNode("node-1", corev1.ConditionUnknown, 5*time.Second))
	f.now = t0.Add(10 * time.Second)
	if err := f.reaper.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents()
	if got := testutil.ToFloat64(f.reaper.metrics.NodesDown); got != 1 {
		t.Errorf("nodes down = %v", got)
	}
}

func TestReaper_WatchSettings_RequeuesPodsOnDownNodesAtOnce(t *testing.T) {
	f := newFixture(t, PolicyDoNothing)
	statefulSetOnDownNode(f)
	f.start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.reaper.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if err := f.reaper.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	for f.reaper.queue.Len() > 0 {
		k, _ := f.reaper.queue.Get()
		f.reaper.queue.Done(k)
		f.reaper.queue.Forget(k)
	}
	go f.reaper.watchSettings(ctx)
	f.settings.changes <- settings.Change{Name: settings.NameNodeDownPodDeletionPolicy, Value: string(PolicyDeleteStatefulSetPod)}
	got := make(chan queueKey)
	go func() {
		for {
			k, shutdown := f.reaper.queue.Get()
			if shutdown {
				return
			}
			f.reaper.queue.Done(k)
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
	f.reaper.queue.ShutDown()
}
