package controller

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vigil-storage/vigil"
)

// TestDecideFenceVolumes_Table is the fence's scope: the node's live grants
// minus every volume of a pod that will not be reaped, closed over shared
// volumes.
func TestDecideFenceVolumes_Table(t *testing.T) {
	reaped := func(key string, handles ...string) fencePod {
		return fencePod{Key: key, UID: types.UID(key), Reaped: true, Handles: handles}
	}
	kept := func(key string, why Reason, handles ...string) fencePod {
		return fencePod{Key: key, UID: types.UID(key), Why: why, Handles: handles}
	}
	cases := []struct {
		name       string
		live       []string
		pods       []fencePod
		wantFence  []string
		wantReaped []string
		wantHeld   map[string]heldVolume
	}{
		{"every pod reaped: every live grant fenced",
			[]string{"a", "b"}, []fencePod{reaped("ns/db-0", "a"), reaped("ns/db-1", "b")},
			[]string{"a", "b"}, []string{"ns/db-0", "ns/db-1"}, map[string]heldVolume{}},
		{"an opted-out pod's own volume keeps its grant",
			[]string{"a", "b"}, []fencePod{reaped("ns/db-0", "a"), kept("ns/keep-0", ReasonOptedOut, "b")},
			[]string{"a"}, []string{"ns/db-0"}, map[string]heldVolume{"b": {Pod: "ns/keep-0", Why: ReasonOptedOut}}},
		{"a pod the policy does not cover (Deployment under delete-statefulset-pod, DaemonSet, Job, bare) keeps its grants",
			[]string{"d", "ds", "j", "bare", "x"}, []fencePod{
				kept("ns/web", ReasonOwnerNotCovered, "d"), kept("ns/agent", ReasonOwnerNotCovered, "ds"),
				kept("ns/job", ReasonOwnerNotCovered, "j"), kept("ns/bare", ReasonOwnerNotCovered, "bare")},
			[]string{"x"}, nil, map[string]heldVolume{
				"d": {Pod: "ns/web", Why: ReasonOwnerNotCovered}, "ds": {Pod: "ns/agent", Why: ReasonOwnerNotCovered},
				"j": {Pod: "ns/job", Why: ReasonOwnerNotCovered}, "bare": {Pod: "ns/bare", Why: ReasonOwnerNotCovered}}},
		{"a volume shared with a pod not reaped is not fenced, nor any other volume of the pod sharing it",
			[]string{"shared", "own", "other"}, []fencePod{
				reaped("ns/db-0", "shared", "own"), kept("ns/keep-0", ReasonOptedOut, "shared"), reaped("ns/db-1", "other")},
			[]string{"other"}, []string{"ns/db-1"}, map[string]heldVolume{
				"shared": {Pod: "ns/keep-0", Why: ReasonOptedOut},
				"own":    {Pod: "ns/db-0", Why: ReasonSharesUnfencedVolume, Via: "shared"}}},
		{"the rule closes over chains of shared volumes",
			[]string{"a", "b", "c"}, []fencePod{
				reaped("ns/p1", "a"), reaped("ns/p2", "a", "b"), reaped("ns/p3", "b", "c"), kept("ns/q", ReasonVolumeNotProvable, "c")},
			nil, nil, map[string]heldVolume{
				"c": {Pod: "ns/q", Why: ReasonVolumeNotProvable},
				"b": {Pod: "ns/p3", Why: ReasonSharesUnfencedVolume, Via: "c"},
				"a": {Pod: "ns/p2", Why: ReasonSharesUnfencedVolume, Via: "b"}}},
		{"a live grant no pod uses any more strands nobody: fenced",
			[]string{"orphan", "b"}, []fencePod{kept("ns/keep-0", ReasonOptedOut, "b")},
			[]string{"orphan"}, nil, map[string]heldVolume{"b": {Pod: "ns/keep-0", Why: ReasonOptedOut}}},
		{"a volume that is not live is neither fenced nor held",
			[]string{"a"}, []fencePod{reaped("ns/db-0", "a"), kept("ns/keep-0", ReasonOptedOut, "gone")},
			[]string{"a"}, []string{"ns/db-0"}, map[string]heldVolume{}},
		{"no live grant: nothing to fence", nil, []fencePod{reaped("ns/db-0", "a")}, nil, []string{"ns/db-0"}, map[string]heldVolume{}},
		{"a handle listed twice is fenced once", []string{"a", "a"}, nil, []string{"a"}, nil, map[string]heldVolume{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := decideFenceVolumes(tc.live, nil, tc.pods)
			checkFencePlan(t, got, tc.wantFence, tc.wantReaped, tc.wantHeld)
		})
	}
}

// TestDecideFenceVolumes_SilentServer: a volume whose datapath server does
// not answer cannot be fenced now. It is held, the pods that use it are not
// reaped (nor, closing over shared volumes, are their other volumes fenced),
// and the rest of the node's fence goes ahead, so a dead datapath server
// does not stop the recovery of the pods whose data is on the others.
func TestDecideFenceVolumes_SilentServer(t *testing.T) {
	reaped := func(key string, handles ...string) fencePod {
		return fencePod{Key: key, UID: types.UID(key), Reaped: true, Handles: handles}
	}
	cases := []struct {
		name         string
		live, silent []string
		pods         []fencePod
		wantFence    []string
		wantReaped   []string
		wantHeld     map[string]heldVolume
	}{
		{"a pod whose data is on a live server is fenced and reaped; the pod on the silent server's volume is not",
			[]string{"up", "down"}, []string{"down"}, []fencePod{reaped("ns/db-0", "up"), reaped("ns/db-1", "down")},
			[]string{"up"}, []string{"ns/db-0"}, map[string]heldVolume{
				"down": {Pod: "ns/db-1", Why: ReasonVolumeServerSilent, Via: "down"}}},
		{"a pod with one volume on the silent server keeps its other volumes' grants",
			[]string{"up", "down", "other"}, []string{"down"}, []fencePod{reaped("ns/db-0", "up", "down"), reaped("ns/db-1", "other")},
			[]string{"other"}, []string{"ns/db-1"}, map[string]heldVolume{
				"up":   {Pod: "ns/db-0", Why: ReasonVolumeServerSilent, Via: "down"},
				"down": {Pod: "ns/db-0", Why: ReasonVolumeServerSilent, Via: "down"}}},
		{"a silent server's volume no pod of the node uses is held without a pod",
			[]string{"up", "elsewhere"}, []string{"elsewhere"}, []fencePod{reaped("ns/db-0", "up")},
			[]string{"up"}, []string{"ns/db-0"}, map[string]heldVolume{
				"elsewhere": {Why: ReasonVolumeServerSilent}}},
		{"every volume silent: nothing fenced, nobody reaped",
			[]string{"a"}, []string{"a"}, []fencePod{reaped("ns/db-0", "a")},
			nil, nil, map[string]heldVolume{"a": {Pod: "ns/db-0", Why: ReasonVolumeServerSilent, Via: "a"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := decideFenceVolumes(tc.live, tc.silent, tc.pods)
			checkFencePlan(t, got, tc.wantFence, tc.wantReaped, tc.wantHeld)
			for _, h := range got.Held {
				if !strings.Contains(h.String(), "datapath server does not answer") && !strings.Contains(h.String(), "on a datapath server that does not answer") {
					t.Errorf("held %+v says %q; want it to name the silent datapath server", h, h.String())
				}
			}
		})
	}
}

// checkFencePlan fails t unless plan fences, reaps and holds what is wanted.
func checkFencePlan(t *testing.T, plan fencePlan, wantFence, wantReaped []string, wantHeld map[string]heldVolume) {
	t.Helper()
	var reapedKeys []string
	for uid := range plan.Reaped {
		reapedKeys = append(reapedKeys, string(uid))
	}
	sort.Strings(reapedKeys)
	if !reflect.DeepEqual(plan.Fence, wantFence) || !reflect.DeepEqual(reapedKeys, wantReaped) || !reflect.DeepEqual(plan.Held, wantHeld) {
		t.Errorf("got fence %q reaped %q held %+v\nwant fence %q reaped %q held %+v",
			plan.Fence, reapedKeys, plan.Held, wantFence, wantReaped, wantHeld)
	}
}

func TestReapable_Table(t *testing.T) {
	sts := &Settings{Policy: PolicyDeleteStatefulSetPod, BackendDriver: vigil.DriverName}
	both := &Settings{Policy: PolicyDeleteBoth, BackendDriver: vigil.DriverName, ExtraProtectedProvisioners: []string{"other.csi"}}
	vigilVol := []VolumeInfo{{Name: "data", Driver: vigil.DriverName, Handle: "h"}}
	optedOut := newPod("ns", "p", "n", nil)
	optedOut.Annotations = map[string]string{vigil.ReapAnnotation: "false"}
	plain := newPod("ns", "p", "n", nil)
	cases := []struct {
		name  string
		pod   *corev1.Pod
		owner OwnerKind
		vols  []VolumeInfo
		set   *Settings
		want  Reason
		ok    bool
	}{
		{"StatefulSet under delete-statefulset-pod", plain, OwnerStatefulSet, vigilVol, sts, "", true},
		{"opted out", optedOut, OwnerStatefulSet, vigilVol, sts, ReasonOptedOut, false},
		{"Deployment under delete-statefulset-pod", plain, OwnerDeployment, vigilVol, sts, ReasonOwnerNotCovered, false},
		{"DaemonSet", plain, OwnerDaemonSet, vigilVol, both, ReasonOwnerNotCovered, false},
		{"Job", plain, OwnerJob, vigilVol, both, ReasonOwnerNotCovered, false},
		{"bare pod", plain, OwnerNone, vigilVol, both, ReasonOwnerNotCovered, false},
		{"policy do-nothing", plain, OwnerStatefulSet, vigilVol, &Settings{Policy: PolicyDoNothing, BackendDriver: vigil.DriverName}, ReasonPolicyDoNothing, false},
		{"a volume of another protected driver cannot be proven by the back end", plain, OwnerStatefulSet,
			append([]VolumeInfo{{Name: "x", Driver: "other.csi", Handle: "o"}}, vigilVol...), both, ReasonVolumeNotProvable, false},
		{"an inline network volume cannot be proven", plain, OwnerStatefulSet,
			append([]VolumeInfo{{Name: "share", Inline: "nfs"}}, vigilVol...), both, ReasonVolumeNotProvable, false},
		{"an unresolved claim cannot be proven", plain, OwnerStatefulSet,
			append([]VolumeInfo{{Name: "x", Claim: "missing"}}, vigilVol...), both, ReasonVolumeNotProvable, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if why, ok := reapable(tc.pod, tc.owner, tc.vols, tc.set); why != tc.want || ok != tc.ok {
				t.Errorf("reapable = %q, %t; want %q, %t", why, ok, tc.want, tc.ok)
			}
		})
	}
}

// strandFixture is node-1 under delete-statefulset-pod with the fast trigger,
// holding one pod of every kind, each on a volume of its own granted to node-1:
// a StatefulSet pod (reaped), an opted-out StatefulSet pod, a Deployment pod, a
// DaemonSet pod, a Job pod and a bare pod; and a StatefulSet pod sharing a
// volume with the opted-out one.
func strandFixture(t *testing.T) *fixture {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	f.settings.fast, f.settings.grace = true, 2*time.Second
	rsOwner := controllerRef("apps/v1", "Deployment", "web", "uid-deploy")
	keep := newPod("app", "keep-0", "node-1", controllerRef("apps/v1", "StatefulSet", "keep", "uid-keep"),
		pvcVolume("data", "data-keep-0"), pvcVolume("shared", "shared"))
	keep.Annotations = map[string]string{vigil.ReapAnnotation: "false"}
	f.objects = append(f.objects,
		newNode("node-1", corev1.ConditionTrue, -time.Hour), newNode("node-2", corev1.ConditionTrue, -time.Hour),
		newPod("app", "db-0", "node-1", controllerRef("apps/v1", "StatefulSet", "db", "uid-sts"), pvcVolume("data", "data-db-0")),
		keep,
		newRS("app", "web-1", "uid-rs", rsOwner),
		newPod("app", "web-1-x", "node-1", controllerRef("apps/v1", "ReplicaSet", "web-1", "uid-rs"), pvcVolume("data", "data-web")),
		newPod("app", "agent-x", "node-1", controllerRef("apps/v1", "DaemonSet", "agent", "uid-ds"), pvcVolume("data", "data-agent")),
		newPod("app", "job-x", "node-1", controllerRef("batch/v1", "Job", "job", "uid-job"), pvcVolume("data", "data-job")),
		newPod("app", "bare", "node-1", nil, pvcVolume("data", "data-bare")),
		newPod("app", "sh-0", "node-1", controllerRef("apps/v1", "StatefulSet", "sh", "uid-sh"),
			pvcVolume("shared", "shared"), pvcVolume("own", "data-sh-0")),
	)
	for _, c := range []struct{ claim, pv string }{
		{"data-db-0", "pv-db"}, {"data-keep-0", "pv-keep"}, {"shared", "pv-shared"}, {"data-web", "pv-web"},
		{"data-agent", "pv-agent"}, {"data-job", "pv-job"}, {"data-bare", "pv-bare"}, {"data-sh-0", "pv-sh"},
	} {
		f.objects = append(f.objects, newPVC("app", c.claim, c.pv, nil), newPV(c.pv, vigil.DriverName), newVA("va-"+c.pv, c.pv, "node-1"))
		f.backend.grant("node-1", "handle-"+c.pv)
	}
	return f
}

// strandedPods returns, for each pod of the fixture still on node-1 and
// not reaped, the volumes it uses on which node-1 is no longer live: a pod
// listed here is stranded.
func (f *fixture) strandedPods(reaped map[string]bool) []string {
	var out []string
	for _, o := range f.objects {
		pod, ok := o.(*corev1.Pod)
		if !ok || reaped[pod.Name] {
			continue
		}
		for _, v := range f.ctrl.listers.volumes(pod) {
			if !f.backend.live("node-1", v.Handle) {
				out = append(out, fmt.Sprintf("%s on %s", pod.Name, v.Handle))
			}
		}
	}
	return out
}

// syncAllPods syncs every pod of the fixture and returns the ones force-deleted.
func (f *fixture) syncAllPods(ctx context.Context) map[string]bool {
	f.t.Helper()
	reaped := map[string]bool{}
	for _, o := range f.objects {
		pod, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		f.client.ClearActions()
		if err := f.ctrl.syncPod(ctx, pod.Namespace, pod.Name); err != nil {
			f.t.Fatal(err)
		}
		for _, a := range f.actions() {
			if strings.HasPrefix(a, "delete pods app/"+pod.Name+" ") {
				reaped[pod.Name] = true
			}
		}
	}
	return reaped
}

func TestController_SyncNode_FenceNeverStrandsAPod(t *testing.T) {
	f := strandFixture(t)
	f.start()
	ctx := context.Background()
	f.ctrl.nodes.setIsolated("node-1", true, t0.Add(-4*time.Second))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"handle-pv-db"}}; !reflect.DeepEqual(f.backend.fenceAsked, want) {
		t.Errorf("fenced %q; want only the volume of the pod that will be reaped, %q", f.backend.fenceAsked, want)
	}
	evs := f.expectEvents("Warning "+EventNodeFenced, "Warning "+EventNodeDown)
	for _, want := range []string{"handle-pv-db→epoch", "left 7 volume(s)", "handle-pv-keep (used by pod app/keep-0, which will not be reaped (opted-out-by-annotation))",
		"handle-pv-sh (used by pod app/sh-0, which shares volume handle-pv-shared"} {
		if !strings.Contains(evs[0], want) {
			t.Errorf("fence event %q does not say %q", evs[0], want)
		}
	}
	reaped := f.syncAllPods(ctx)
	if want := map[string]bool{"db-0": true}; !reflect.DeepEqual(reaped, want) {
		t.Errorf("reaped %v, want %v", reaped, want)
	}
	if s := f.strandedPods(reaped); len(s) > 0 {
		t.Errorf("pods left on fenced volumes without being reaped: %v", s)
	}
	// The pod that shares a volume with the opted-out one says why it waits.
	found := false
	for _, e := range f.events() {
		if strings.Contains(e, "pod app/sh-0") && strings.Contains(e, "volume shared (PV pv-shared) is not fenced: used by pod app/keep-0, which will not be reaped (opted-out-by-annotation)") {
			found = true
		}
	}
	if !found {
		t.Error("no Event on app/sh-0 says which volume was left unfenced and for which pod")
	}
}

// A pod not yet reaped when its node comes back (the fence is immediate on
// storage isolation, the reap waits for the grace) is still reaped: the fence
// ended its I/O. A pod scheduled on the node after it came back is not, and
// once the promised pods are gone the next failure is fenced again.
func TestController_SyncNode_ReturnBeforeReapStillReaps(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	f.objects = append(f.objects, newPVC("app", "data-late-0", "pv-late", nil), newPV("pv-late", vigil.DriverName))
	f.start()
	ctx := context.Background()
	f.ctrl.nodes.setIsolated("node-1", true, t0.Add(-500*time.Millisecond)) // silent 3.5 s less than the grace
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.live("node-1", "handle-pv-a") {
		t.Fatal("not fenced at once on storage isolation")
	}
	f.client.ClearActions()
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions() // within the grace
	// The engine heartbeats again: Kubernetes and the datapath both see the node well.
	f.ctrl.nodes.setIsolated("node-1", false, time.Time{})
	f.now = t0.Add(time.Second)
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if !f.ctrl.nodes.fenced("node-1") {
		t.Fatal("the fence episode ended while a pod it is to reap is still on the node")
	}
	f.client.ClearActions()
	f.events()
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete volumeattachments /va-a1 uid=uid-va-va-a1", "delete pods app/db-0 grace=0 uid=uid-app-db-0")
	evs := f.events()
	if len(evs) == 0 || !strings.Contains(strings.Join(evs, "\n"), string(ReasonFencedNodeReturned)) {
		t.Errorf("events %q do not name the trigger %s", evs, ReasonFencedNodeReturned)
	}
	// late-0 is scheduled on the node after the fence: not the fence's to reap.
	late := newPod("app", "late-0", "node-1", controllerRef("apps/v1", "StatefulSet", "late", "uid-late"), pvcVolume("data", "data-late-0"))
	if err := f.ctrl.podsByNode.Add(toCachedPod(late)); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	if err := f.ctrl.syncPod(ctx, "app", "late-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	// Nothing promised is left: the episode ends; a new isolation fences anew.
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.ctrl.nodes.fenced("node-1") {
		t.Fatal("the fence episode did not end once its pods were gone")
	}
	f.backend.grant("node-1", "handle-pv-late")
	f.ctrl.nodes.setIsolated("node-1", true, f.now.Add(-4*time.Second))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.fenceCalls != 2 || f.backend.live("node-1", "handle-pv-late") {
		t.Errorf("second isolation: %d fence calls, late-0's volume live %t; want a second fence", f.backend.fenceCalls, f.backend.live("node-1", "handle-pv-late"))
	}
}

// A pod of the fence's promise that was opted out after the fence is left to a
// person, and says so; the episode lasts while it is there.
func TestDecide_ReturnedNodeHonoursOptOut(t *testing.T) {
	pod := newPod("app", "db-0", "node-1", nil)
	pod.Annotations = map[string]string{vigil.ReapAnnotation: "false"}
	s := &Snapshot{Pod: pod, Owner: OwnerStatefulSet, Node: newNode("node-1", corev1.ConditionTrue, -time.Hour),
		NodeObserved: nodeObservation{Fenced: true, FencedAt: t0, FencedPods: map[types.UID]bool{pod.UID: true}},
		Volumes:      []VolumeInfo{{Name: "data", Driver: vigil.DriverName, Handle: "h", Fenced: true}}}
	set := &Settings{Policy: PolicyDeleteBoth, FastFencedTrigger: true, BackendDriver: vigil.DriverName}
	if d := decide(s, set, t0); d.Kind != DecisionSkip || d.Reason != ReasonOptedOut {
		t.Errorf("decide = %s %s, want skip %s", d.Kind, d.Reason, ReasonOptedOut)
	}
	pod.Annotations = nil
	s.Volumes[0].Fenced = false
	if d := decide(s, set, t0); d.Kind != DecisionWait || d.Reason != ReasonNotProvenFenced {
		t.Errorf("unproven: decide = %s %s, want wait %s", d.Kind, d.Reason, ReasonNotProvenFenced)
	}
	s.Volumes[0].Fenced = true
	set.DryRun = true
	if d := decide(s, set, t0); d.Kind != DecisionWouldDelete || d.Reason != ReasonFencedNodeReturned {
		t.Errorf("dry run: decide = %s %s, want would-delete %s", d.Kind, d.Reason, ReasonFencedNodeReturned)
	}
}
