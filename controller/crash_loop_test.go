package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/vigil-storage/vigil"
)

func crashing(p *corev1.Pod, restarts int32) *corev1.Pod {
	p.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "sidecar", RestartCount: 50, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		{Name: "db", RestartCount: restarts, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonCrashLoopBackOff}}},
	}
	return p
}

func TestCrashLoopRestarts_OnlyContainersInBackOff(t *testing.T) {
	p := crashing(newPod("app", "p", "n", nil), 7)
	if got := crashLoopRestarts(p); got != 7 {
		t.Errorf("restarts %d, want 7 (the running sidecar's 50 restarts do not count)", got)
	}
	p.Status.ContainerStatuses[1].State.Waiting.Reason = "ContainerCreating"
	if got := crashLoopRestarts(p); got != 0 {
		t.Errorf("restarts %d for a container not in CrashLoopBackOff", got)
	}
	if c := toCachedPod(crashing(newPod("app", "p", "n", nil), 9)); c.CrashLoopRestarts != 9 {
		t.Errorf("cached pod keeps %d restarts", c.CrashLoopRestarts)
	}
}

func TestDecideCrashLoop_Table(t *testing.T) {
	vigilVols := []VolumeInfo{{Name: "d", Driver: vigil.DriverName, PVName: "pv"}}
	on := &Settings{CrashLoopPodDeletion: true, CrashLoopRestartLimit: 5}
	sts := func(mod func(s *Snapshot)) *Snapshot {
		s := &Snapshot{Pod: newPod("app", "p", "n", nil), Owner: OwnerStatefulSet, Volumes: vigilVols}
		if mod != nil {
			mod(s)
		}
		return s
	}
	cases := []struct {
		name     string
		snap     *Snapshot
		restarts int32
		st       crashState
		set      *Settings
		want     crashDecision
	}{
		{"setting off", sts(nil), 9, crashState{}, &Settings{CrashLoopRestartLimit: 5}, crashDecision{Reason: ReasonCrashLoopOff}},
		{"not looping", sts(nil), 0, crashState{}, on, crashDecision{Reason: ReasonCrashLoopNotLooping}},
		{"below the limit", sts(nil), 4, crashState{}, on, crashDecision{Reason: ReasonCrashLoopBelowLimit}},
		{"at the limit", sts(nil), 5, crashState{}, on, crashDecision{Delete: true, Reason: ReasonCrashLoopDelete}},
		{"a Deployment's pod", sts(func(s *Snapshot) { s.Owner = OwnerDeployment }), 5, crashState{}, on,
			crashDecision{Delete: true, Reason: ReasonCrashLoopDelete}},
		{"a DaemonSet's pod", sts(func(s *Snapshot) { s.Owner = OwnerDaemonSet }), 9, crashState{}, on, crashDecision{Reason: ReasonCrashLoopOwner}},
		{"a bare pod", sts(func(s *Snapshot) { s.Owner = OwnerNone }), 9, crashState{}, on, crashDecision{Reason: ReasonCrashLoopOwner}},
		{"no protected volume", sts(func(s *Snapshot) { s.Volumes = nil }), 9, crashState{}, on, crashDecision{Reason: ReasonCrashLoopNotProtected}},
		{"already terminating", sts(func(s *Snapshot) { terminating(s.Pod, time.Minute) }), 9, crashState{}, on,
			crashDecision{Reason: ReasonCrashLoopTerminating}},
		{"this UID was deleted once already", sts(nil), 9, crashState{DeletedBefore: true}, on, crashDecision{Reason: ReasonCrashLoopOnceDone}},
		{"the owner's backoff", sts(nil), 9, crashState{NextAllowed: t0.Add(40 * time.Second)}, on,
			crashDecision{Reason: ReasonCrashLoopBackoff, RecheckAfter: 40 * time.Second}},
		{"the owner's backoff has passed", sts(nil), 9, crashState{NextAllowed: t0}, on, crashDecision{Delete: true, Reason: ReasonCrashLoopDelete}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideCrashLoop(tc.snap, tc.restarts, tc.st, tc.set, t0); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCrashLoops_BoundPerUIDAndBackoffPerOwner(t *testing.T) {
	c := newCrashLoops()
	const owner = "app/StatefulSet/db"
	if st := c.state("u1", owner, t0); st.DeletedBefore || !st.NextAllowed.IsZero() {
		t.Fatalf("fresh state %+v", st)
	}
	c.deletedNow("u1", owner, t0)
	if st := c.state("u1", owner, t0.Add(time.Hour*2)); !st.DeletedBefore {
		t.Error("a deleted UID is forgotten within its memory")
	}
	wantGaps := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	now := t0
	for i, gap := range wantGaps {
		st := c.state("new", owner, now)
		if got := st.NextAllowed.Sub(now); got != gap {
			t.Fatalf("after deletion %d the owner waits %s, want %s", i+1, got, gap)
		}
		now = st.NextAllowed
		c.deletedNow(uidOf("u", i), owner, now)
	}
	// An hour without deletions resets the backoff.
	if st := c.state("later", owner, now.Add(crashLoopBackoffReset)); !st.NextAllowed.IsZero() {
		t.Errorf("backoff not reset after an hour: %+v", st)
	}
	if st := c.state("other", "app/StatefulSet/other", now); !st.NextAllowed.IsZero() {
		t.Error("another owner is held back")
	}
}

func uidOf(prefix string, i int) k8stypes.UID { return k8stypes.UID(prefix + string(rune('a'+i))) }

func TestController_SyncPod_CrashLoopDeletesOnceThenBacksOff(t *testing.T) {
	f := newFixture(t, PolicyDoNothing)
	f.settings.crashLoop = true
	owner := controllerRef("apps/v1", "StatefulSet", "db", "uid-sts")
	f.objects = append(f.objects,
		crashing(newPod("app", "db-0", "node-1", owner, pvcVolume("data", "data-db-0")), 6),
		crashing(newPod("app", "db-1", "node-1", owner, pvcVolume("data", "data-db-1")), 6),
		crashing(newPod("app", "web-0", "node-1", controllerRef("apps/v1", "DaemonSet", "web", "u"), pvcVolume("data", "data-db-0")), 60),
		newNode("node-1", corev1.ConditionTrue, -time.Hour),
		newPVC("app", "data-db-0", "pv-a", nil), newPV("pv-a", vigil.DriverName),
		newPVC("app", "data-db-1", "pv-b", nil), newPV("pv-b", vigil.DriverName))
	f.start()
	ctx := context.Background()
	for _, p := range []string{"db-0", "db-1", "web-0"} {
		if err := f.ctrl.syncPod(ctx, "app", p); err != nil {
			t.Fatal(err)
		}
	}
	// Deleted normally (no grace override), once; the second pod of the same owner
	// waits for the owner's backoff; the DaemonSet's pod is never Vigil's.
	f.expectActions("delete pods app/db-0 uid=uid-app-db-0")
	// On the pod only: the node is fine.
	evs := f.expectEvents("Warning "+EventCrashLoopDeleted, "Normal "+EventCrashLoopNotDeleted)
	if !strings.Contains(evs[0], "6 restarts") {
		t.Errorf("event %q does not name the restarts", evs[0])
	}
	if got := testutil.ToFloat64(f.ctrl.metrics.CrashLoopDeleted.WithLabelValues("StatefulSet")); got != 1 {
		t.Errorf("crash-loop deletions = %v", got)
	}
	// After the backoff, the other pod goes.
	f.now = t0.Add(crashLoopBackoffBase)
	if err := f.ctrl.syncPod(ctx, "app", "db-1"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete pods app/db-0 uid=uid-app-db-0", "delete pods app/db-1 uid=uid-app-db-1")
	f.client.ClearActions()
	// db-0 again, as the cache still shows it: each UID is deleted at most once.
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
}

func TestController_SyncPod_CrashLoopDryRun(t *testing.T) {
	f := newFixture(t, PolicyDoNothing)
	f.settings.crashLoop, f.settings.dryRun = true, true
	f.objects = append(f.objects, crashing(newPod("app", "db-0", "node-1", controllerRef("apps/v1", "StatefulSet", "db", "u"),
		pvcVolume("data", "data-db-0")), 6), newNode("node-1", corev1.ConditionTrue, -time.Hour),
		newPVC("app", "data-db-0", "pv-a", nil), newPV("pv-a", vigil.DriverName))
	f.start()
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	f.expectEvents("Normal "+EventWouldDeleteCrashLoop, "Normal "+EventWouldDeleteCrashLoop)
}

var _ runtime.Object = (*corev1.Pod)(nil)
