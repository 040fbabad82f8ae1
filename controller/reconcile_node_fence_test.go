package controller

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/fenceapi"
	"github.com/vigil-storage/vigil/settings"
)

func TestDecideFence_Table(t *testing.T) {
	ready := newNode("n", corev1.ConditionTrue, -time.Hour)
	unknown := newNode("n", corev1.ConditionUnknown, -time.Hour)
	fast := &Settings{FastFencedTrigger: true, NodeDownGracePeriod: 2 * time.Second, NotReadyDebounce: 15 * time.Second}
	slow := &Settings{NodeDownGracePeriod: 2 * time.Second, NotReadyDebounce: 15 * time.Second}
	cases := []struct {
		name       string
		obs        nodeObservation
		set        *Settings
		hasBackend bool
		want       fenceDecision
	}{
		{"ready and heartbeating is never fenced", nodeObservation{Node: ready}, fast, true, fenceDecision{}},
		{"storage-isolated is fenced at once, even if Kubernetes says Ready",
			nodeObservation{Node: ready, Isolated: true, SilentSince: t0.Add(-3 * time.Second)}, fast, true,
			fenceDecision{Fence: true, Reason: FenceReasonStorageIsolated}},
		{"down to Kubernetes within the grace waits for it",
			nodeObservation{Node: unknown, NotReadySince: t0.Add(-500 * time.Millisecond)}, fast, true,
			fenceDecision{RecheckAfter: 1500 * time.Millisecond}},
		{"down to Kubernetes past the grace (a node cut off from the API server only) is fenced",
			nodeObservation{Node: unknown, NotReadySince: t0.Add(-2 * time.Second)}, fast, true,
			fenceDecision{Fence: true, Reason: FenceReasonNodeDown}},
		{"a deleted node past the grace is fenced too", nodeObservation{NotReadySince: t0.Add(-time.Minute)}, fast, true,
			fenceDecision{Fence: true, Reason: FenceReasonNodeDown}},
		{"once per episode", nodeObservation{Node: unknown, NotReadySince: t0.Add(-time.Minute), Fenced: true, FencedAt: t0}, fast, true,
			fenceDecision{}},
		{"nothing ahead of time with the fast trigger off",
			nodeObservation{Node: unknown, NotReadySince: t0.Add(-time.Minute), Isolated: true}, slow, true, fenceDecision{}},
		{"nothing without a fencing back end",
			nodeObservation{Node: unknown, NotReadySince: t0.Add(-time.Minute)}, fast, false, fenceDecision{}},
		{"a node debouncing is not fenced", nodeObservation{Node: newNode("n", corev1.ConditionFalse, 0), NotReadySince: t0.Add(-5 * time.Second)},
			fast, true, fenceDecision{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := nodeVerdict(tc.obs, tc.set.NotReadyDebounce, t0)
			if got := decideFence(tc.obs, v, tc.set, tc.hasBackend, t0); got != tc.want {
				t.Errorf("got %+v, want %+v (verdict %s)", got, tc.want, v.State)
			}
		})
	}
}

func TestIsolation_SilenceThresholdLeaveAndSuppression(t *testing.T) {
	now := t0
	none := map[string]bool{}
	rep := heartbeatReport(now, map[string]time.Duration{"a": 500 * time.Millisecond, "b": 4 * time.Second, "c": time.Second, "d": 0})
	got, suppressed := isolation(rep, 3*time.Second, none, now)
	if suppressed || len(got) != 1 || !got["b"].Equal(now.Add(-4*time.Second)) {
		t.Fatalf("isolated %v suppressed %t, want only b since 4s ago", got, suppressed)
	}
	// A node that announced a graceful stop is not isolated while it lasts.
	rep.Nodes[1].LeavingUntil = now.Add(10 * time.Second)
	if got, _ := isolation(rep, 3*time.Second, map[string]bool{"b": true}, now); len(got) != 0 {
		t.Fatalf("leaving node judged isolated: %v", got)
	}
	// Silence since the back end restarted counts from its start, not from before.
	rep = heartbeatReport(now, map[string]time.Duration{"a": time.Hour, "b": 0, "c": 0})
	rep.Since = now.Add(-time.Second)
	if got, _ := isolation(rep, 3*time.Second, none, now); len(got) != 0 {
		t.Fatalf("a node silent only since the back end's start judged isolated: %v", got)
	}
	// Most nodes silent at once: a storage-side problem, nobody is isolated.
	rep = heartbeatReport(now, map[string]time.Duration{"a": time.Minute, "b": time.Minute, "c": 0})
	if got, suppressed := isolation(rep, 3*time.Second, none, now); !suppressed || len(got) != 0 {
		t.Fatalf("2 of 3 silent: isolated %v suppressed %t, want none and suppressed", got, suppressed)
	}
	// A node isolated before stays isolated while silent, even when the others
	// fall silent too (only a heartbeat ends an isolation), but no new one is added.
	if got, suppressed := isolation(rep, 3*time.Second, map[string]bool{"a": true}, now); !suppressed || len(got) != 1 ||
		got["a"].IsZero() {
		t.Fatalf("2 of 3 silent, a isolated before: isolated %v suppressed %t, want a only", got, suppressed)
	}
	// Exactly half is not "most".
	rep = heartbeatReport(now, map[string]time.Duration{"a": time.Minute, "b": 0})
	if got, suppressed := isolation(rep, 3*time.Second, none, now); suppressed || len(got) != 1 {
		t.Fatalf("1 of 2 silent: isolated %v suppressed %t", got, suppressed)
	}
}

// fencedFixture is a StatefulSet pod on node-1 with one vigil volume granted to
// node-1 at the datapath, and the fast trigger on.
func fencedFixture(t *testing.T, ready corev1.ConditionStatus) *fixture {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	f.settings.fast, f.settings.grace = true, 2*time.Second
	f.objects = append(f.objects,
		newPod("app", "db-0", "node-1", controllerRef("apps/v1", "StatefulSet", "db", "uid-sts"), pvcVolume("data", "data-db-0")),
		newNode("node-1", ready, -time.Hour), newNode("node-2", corev1.ConditionTrue, -time.Hour),
		newPVC("app", "data-db-0", "pv-a", nil), newPV("pv-a", vigil.DriverName), newVA("va-a1", "pv-a", "node-1"))
	f.backend.grant("node-1", "handle-pv-a")
	return f
}

func TestController_SyncNode_StorageIsolatedIsFencedTaintedThenReaped(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	f.start()
	ctx := context.Background()
	f.ctrl.nodes.setIsolated("node-1", true, t0.Add(-4*time.Second))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.live("node-1", "handle-pv-a") {
		t.Fatal("node-1 still holds a live grant after the fence")
	}
	f.expectActions("get nodes /node-1", "patch nodes /node-1 application/strategic-merge-patch+json")
	node, err := f.client.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil || fencedTaint(node) == nil || fencedTaint(node).Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("node-1 taints %+v (err %v), want %s:NoSchedule", node.Spec.Taints, err, vigil.FencedTaintKey)
	}
	// Storage isolation makes the node down only once it is fenced.
	evs := f.expectEvents("Warning "+EventNodeFenced, "Warning "+EventNodeDown)
	if !strings.Contains(evs[0], "handle-pv-a→epoch 2") || !strings.Contains(evs[1], string(FenceReasonStorageIsolated)) {
		t.Errorf("fence event %q does not name the volume, its epoch and the reason", evs[0])
	}
	if got := testutil.ToFloat64(f.ctrl.metrics.Fences.WithLabelValues(outcomeDone)); got != 1 {
		t.Errorf("fences = %v", got)
	}
	// Now the reaper acts on the fast trigger: the attachment first, then the pod.
	f.client.ClearActions()
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete volumeattachments /va-a1 uid=uid-va-va-a1", "delete pods app/db-0 grace=0 uid=uid-app-db-0")
	// A new leader (empty tracker) fences again: nothing is live, no epoch moves.
	f.ctrl.nodes = newNodeTracker()
	f.ctrl.proofs.nodes = f.ctrl.nodes
	f.ctrl.nodes.setIsolated("node-1", true, t0.Add(-4*time.Second))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if rows, _ := f.backend.Grants(ctx, "node-1"); len(rows) != 1 || rows[0].Epoch != 2 {
		t.Errorf("after a second fence the rows are %+v, want epoch 2 still (no second fence of a fenced volume)", rows)
	}
}

func TestController_SyncNode_BackendUnavailableProvesNothing(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionUnknown)
	f.start()
	f.backend.setErr(errors.New("connection refused"))
	f.ctrl.nodes.observedDown("node-1", true, t0.Add(-time.Minute))
	ctx := context.Background()
	err := f.ctrl.syncNode(ctx, "node-1")
	if err == nil || !errors.Is(err, fenceapi.ErrUnavailable) {
		t.Fatalf("err = %v, want a retryable error wrapping fenceapi.ErrUnavailable", err)
	}
	if f.ctrl.nodes.fenced("node-1") {
		t.Fatal("node marked fenced although the back end did not answer")
	}
	f.expectActions() // no taint without a fence
	evs := f.expectEvents("Warning "+EventNodeDown, "Warning "+EventFenceFailed)
	if !strings.Contains(evs[1], "nothing is proven") {
		t.Errorf("event %q does not say nothing is proven", evs[1])
	}
	// The pod waits: not proven fenced.
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
}

func TestController_SyncNode_KubernetesDownFencedAfterGrace(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionUnknown)
	f.start()
	ctx := context.Background()
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if !f.backend.live("node-1", "handle-pv-a") || f.backend.fenceCalls != 0 {
		t.Fatal("fenced within the grace")
	}
	f.now = t0.Add(2 * time.Second)
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.live("node-1", "handle-pv-a") || !f.ctrl.nodes.fenced("node-1") {
		t.Fatal("not fenced after the grace")
	}
}

func TestController_SyncNode_DryRunFencesNothing(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionUnknown)
	f.settings.dryRun = true
	f.start()
	f.now = t0.Add(time.Minute)
	f.ctrl.nodes.observedDown("node-1", true, t0)
	if err := f.ctrl.syncNode(context.Background(), "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.fenceCalls != 0 || !f.backend.live("node-1", "handle-pv-a") {
		t.Fatal("dry run fenced")
	}
	f.expectActions()
	f.expectEvents("Warning "+EventNodeDown, "Normal "+EventWouldFence)
}

func TestController_SyncNode_FastTriggerOffFencesNothing(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionUnknown)
	f.settings.fast = false
	f.start()
	f.now = t0.Add(time.Minute)
	f.ctrl.nodes.setIsolated("node-1", true, t0)
	if err := f.ctrl.syncNode(context.Background(), "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.fenceCalls != 0 {
		t.Fatal("fenced with the fast trigger off")
	}
}

// TestController_SyncPod_StaleCacheSendsNoSecondDelete: a pod the reaper
// force-deleted that its cache still shows (the watch lags behind a loaded API
// server) is not deleted again, and neither is its attachment; a pod the cache
// saw go is forgotten.
func TestController_SyncPod_StaleCacheSendsNoSecondDelete(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	f.start() // the fixture's caches are filled once: they never see a delete
	ctx := context.Background()
	f.ctrl.nodes.setIsolated("node-1", true, t0.Add(-4*time.Second))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete volumeattachments /va-a1 uid=uid-va-va-a1", "delete pods app/db-0 grace=0 uid=uid-app-db-0")
	f.client.ClearActions()
	for range 3 {
		if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
			t.Fatal(err)
		}
		if err := f.ctrl.syncAttachments(ctx, "node-1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.actions(); len(got) != 0 {
		t.Errorf("a stale cache sent %q again", got)
	}
	obj, exists, _ := f.ctrl.podsByNode.GetByKey("app/db-0")
	if !exists {
		t.Fatal("the pod left the cache: the test's stale cache did not hold")
	}
	f.ctrl.onPodDelete(obj)
	if f.ctrl.deleted.has("uid-app-db-0", t0) {
		t.Error("a pod the cache saw deleted is still remembered")
	}
}

func TestDeletedUIDs_ForgetAfterTTL(t *testing.T) {
	d := newDeletedUIDs()
	d.add("a", t0)
	d.add("", t0)
	if !d.has("a", t0.Add(deletedTTL-time.Millisecond)) || d.has("a", t0.Add(deletedTTL)) || d.has("", t0) || d.has("b", t0) {
		t.Fatal("has: want a within the TTL only")
	}
	d.add("b", t0.Add(deletedTTL+time.Second)) // sweeps a
	if d.len() != 1 {
		t.Errorf("%d remembered after the sweep, want 1", d.len())
	}
}

// TestController_SyncNode_BlockedByABadManagedValueFencesNothing: real settings whose
// managed dry-run holds "ture" from the start keep the store's value (false) in
// force and block acting. A storage-isolated node is then neither fenced nor
// tainted, and its pod is not reaped; the Events say what would have been done
// and why not.
func TestController_SyncNode_BlockedByABadManagedValueFencesNothing(t *testing.T) {
	store := settings.NewMemoryStore()
	ctx := context.Background()
	for k, v := range map[string]string{"fast-fenced-trigger": "true", "node-down-grace-period": "2s",
		"node-down-pod-deletion-policy": string(PolicyDeleteStatefulSetPod)} {
		if err := store.Set(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dry-run"), []byte("ture"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := settings.New(store, dir, settings.WithRegisterer(prometheus.NewRegistry()),
		settings.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set.Close() })
	if set.DryRun() || !set.FastFencedTrigger() || set.ActBlocked() == nil {
		t.Fatalf("settings: dry-run %t, fast %t, blocked %v; the test needs dry-run off, fast on, acting blocked",
			set.DryRun(), set.FastFencedTrigger(), set.ActBlocked())
	}
	f := fencedFixture(t, corev1.ConditionTrue)
	f.reader, f.actBlocked = set, set.ActBlocked
	f.start()
	f.ctrl.nodes.setIsolated("node-1", true, t0.Add(-4*time.Second))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.fenceCalls != 0 || !f.backend.live("node-1", "handle-pv-a") || f.ctrl.nodes.fenced("node-1") {
		t.Fatalf("a blocked manager fenced node-1 (%d fence calls)", f.backend.fenceCalls)
	}
	f.expectActions() // no taint
	evs := f.expectEvents("Normal " + EventWouldFence)
	if len(evs) == 1 && (!strings.Contains(evs[0], "not acting") || !strings.Contains(evs[0], `"ture"`)) {
		t.Errorf("event %q does not say that acting is blocked and by what", evs[0])
	}
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
}
