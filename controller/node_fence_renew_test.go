package controller

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vigil-storage/vigil/fenceapi"
)

func TestDecideRefence_Table(t *testing.T) {
	fresh := fencePlan{Fence: []string{"vol-new"}, Reaped: map[types.UID]bool{"uid-p": true}}
	held := fencePlan{Held: map[string]heldVolume{"vol-kept": {Pod: "app/opted-out", Why: ReasonOptedOut}}}
	cases := []struct {
		name    string
		in      refenceInput
		want    []string
		wantWhy refenceWhy
	}{
		{"fenced, isolated, silent, a fresh grant: fenced again",
			refenceInput{Enabled: true, Fenced: true, Isolated: true, Silent: true, Plan: fresh}, []string{"vol-new"}, ""},
		{"the engine heartbeats in a report read now: positive evidence, nothing",
			refenceInput{Enabled: true, Fenced: true, Isolated: true, Silent: false, Plan: fresh}, nil, refenceHeartbeats},
		{"the storage watch no longer marks it isolated: nothing",
			refenceInput{Enabled: true, Fenced: true, Isolated: false, Silent: true, Plan: fresh}, nil, refenceNotIsolated},
		{"not fenced in this episode: the fence itself decides (decideFence), not this",
			refenceInput{Enabled: true, Fenced: false, Isolated: true, Silent: true, Plan: fresh}, nil, refenceNotFenced},
		{"fast trigger off: nothing",
			refenceInput{Enabled: false, Fenced: true, Isolated: true, Silent: true, Plan: fresh}, nil, refenceOff},
		{"only a grant the fence left alone for a pod that will not be reaped: nothing",
			refenceInput{Enabled: true, Fenced: true, Isolated: true, Silent: true, Plan: held}, nil, refenceNothingFresh},
		{"no live grant at all: nothing",
			refenceInput{Enabled: true, Fenced: true, Isolated: true, Silent: true}, nil, refenceNothingFresh},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, why := decideRefence(c.in)
			if !reflect.DeepEqual(got, c.want) || why != c.wantWhy {
				t.Fatalf("decideRefence = %v, %q; want %v, %q", got, why, c.want, c.wantWhy)
			}
		})
	}
}

func TestSilentPast(t *testing.T) {
	rep := heartbeatReport(t0, map[string]time.Duration{"silent": 4 * time.Second, "talking": 0})
	rep.Nodes = append(rep.Nodes, fenceapi.NodeConnectivity{Node: "leaving", LastHeartbeat: t0.Add(-time.Minute), LeavingUntil: t0.Add(time.Minute)})
	for node, want := range map[string]bool{"silent": true, "talking": false, "leaving": false, "unknown": false} {
		if got := silentPast(rep, node, 3*time.Second); got != want {
			t.Errorf("silentPast(%s) = %t, want %t", node, got, want)
		}
	}
}

// TestController_SyncNode_FreshGrantOnIsolatedNodeIsFencedAgain: node-1 is
// storage-isolated and fenced; a stage that raced the fence leaves a fresh
// live grant on it. While its engine stays silent, the next look at the node
// fences that grant too, says so, and the reaper can prove the pod; while a
// report shows it heartbeating, or once it is no longer isolated, nothing is
// fenced again.
func TestController_SyncNode_FreshGrantOnIsolatedNodeIsFencedAgain(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	f.start()
	ctx := context.Background()
	f.ctrl.nodes.setIsolated("node-1", true, t0.Add(-4*time.Second))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents("Warning "+EventNodeFenced, "Warning "+EventNodeDown)
	regrant := func() {
		t.Helper()
		f.backend.grant("node-1", "handle-pv-a") // the raced ControllerPublish
		f.now = f.now.Add(2 * grantsMaxAge)      // the next look, past the proof cache
	}

	// The engine heartbeats in a report read now (the watch has not caught
	// up yet): positive evidence, the grant stays.
	regrant()
	f.backend.setReport(heartbeatReport(f.now, map[string]time.Duration{"node-1": 0, "node-2": 0}))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if !f.backend.live("node-1", "handle-pv-a") {
		t.Fatal("a grant of a node whose engine heartbeats was fenced again")
	}
	f.expectEvents()

	// Silent: fenced again.
	f.backend.setReport(heartbeatReport(f.now, map[string]time.Duration{"node-1": time.Minute, "node-2": 0}))
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.live("node-1", "handle-pv-a") {
		t.Fatal("a fresh live grant on a node still storage-isolated and fenced was left live")
	}
	evs := f.expectEvents("Warning " + EventNodeRefenced)
	if len(evs) == 1 && (!strings.Contains(evs[0], "handle-pv-a→epoch 4") || !strings.Contains(evs[0], "still storage-isolated")) {
		t.Errorf("Event %q does not name the volume, its new epoch and why", evs[0])
	}
	f.client.ClearActions()
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete volumeattachments /va-a1 uid=uid-va-va-a1", "delete pods app/db-0 grace=0 uid=uid-app-db-0")

	// No longer isolated (its engine is back): a new grant is its own.
	f.ctrl.nodes.setIsolated("node-1", false, time.Time{})
	regrant()
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if !f.backend.live("node-1", "handle-pv-a") {
		t.Fatal("a grant of a node no longer storage-isolated was fenced again")
	}
}
