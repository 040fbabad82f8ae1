package controller

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vigil-storage/vigil/fenceapi"
)

func TestDecideResume_Table(t *testing.T) {
	pod := func(name string, deleting bool, handles ...string) resumePod {
		return resumePod{Key: "app/" + name, UID: types.UID("uid-" + name), Deleting: deleting, Handles: handles}
	}
	tests := []struct {
		name     string
		fenced   []string
		pods     []resumePod
		wantKeys []string
		wantVols []string
	}{
		{name: "nothing fenced: nothing", pods: []resumePod{pod("db-0", false, "a")}},
		{name: "fenced volume, no pod on it: nothing", fenced: []string{"b"}, pods: []resumePod{pod("db-0", false, "a")}},
		{name: "pod on a fenced volume is resumed", fenced: []string{"a"},
			pods: []resumePod{pod("db-0", false, "a")}, wantKeys: []string{"app/db-0"}, wantVols: []string{"a"}},
		{name: "one fenced volume of two is enough", fenced: []string{"b"},
			pods: []resumePod{pod("db-0", false, "a", "b")}, wantKeys: []string{"app/db-0"}, wantVols: []string{"b"}},
		{name: "a pod being deleted is left to its deletion", fenced: []string{"a"},
			pods: []resumePod{pod("db-0", true, "a")}},
		{name: "a pod without volumes of the back end: nothing", fenced: []string{"a"},
			pods: []resumePod{pod("web-0", false)}},
		{name: "several pods, sorted", fenced: []string{"a", "c"},
			pods:     []resumePod{pod("db-1", false, "c"), pod("web-0", false, "b"), pod("db-0", false, "a")},
			wantKeys: []string{"app/db-0", "app/db-1"}, wantVols: []string{"a", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fenced := map[string]bool{}
			for _, h := range tt.fenced {
				fenced[h] = true
			}
			got := decideResume(fenced, tt.pods)
			if !reflect.DeepEqual(got.Keys, tt.wantKeys) || !reflect.DeepEqual(got.Volumes, tt.wantVols) {
				t.Errorf("pods %q volumes %q, want %q %q", got.Keys, got.Volumes, tt.wantKeys, tt.wantVols)
			}
			if len(got.Pods) != len(tt.wantKeys) {
				t.Errorf("pods %v, want %d", got.Pods, len(tt.wantKeys))
			}
			for _, k := range tt.wantKeys {
				if !got.Pods[types.UID("uid-"+strings.TrimPrefix(k, "app/"))] {
					t.Errorf("pod %s not resumed", k)
				}
			}
		})
	}
}

// newLeaderOnReturnedNode is a manager that has just started leading: node-1
// is Ready, with its StatefulSet pod db-0 on volume pv-a, on which the
// datapath holds node-1's row live or, fenced by the leader before, fenced.
func newLeaderOnReturnedNode(t *testing.T, fenced bool) *fixture {
	f := fencedFixture(t, corev1.ConditionTrue)
	if fenced {
		if _, err := f.backend.fenceAll(context.Background(), "node-1"); err != nil {
			t.Fatal(err)
		}
	}
	f.start()
	return f
}

func TestController_SyncNode_NewLeaderResumesFenceOfReturnedNode(t *testing.T) {
	f := newLeaderOnReturnedNode(t, true)
	ctx := context.Background()
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	evs := f.expectEvents("Warning " + EventFenceResumed)
	if len(evs) == 1 && (!strings.Contains(evs[0], "[handle-pv-a]") || !strings.Contains(evs[0], "[app/db-0]")) {
		t.Errorf("Event %q does not name the fenced volume and the pod", evs[0])
	}
	f.client.ClearActions()
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete volumeattachments /va-a1 uid=uid-va-va-a1", "delete pods app/db-0 grace=0 uid=uid-app-db-0")
	if got := testutil.ToFloat64(f.ctrl.metrics.Decisions.WithLabelValues(string(DecisionDelete), string(ReasonFencedNodeReturned))); got != 1 {
		t.Errorf("decisions delete/%s = %v, want 1", ReasonFencedNodeReturned, got)
	}
	// Looked at once per leadership: the next sync does not ask again.
	calls := f.backend.grantsCalls
	f.now = f.now.Add(2 * grantsMaxAge)
	f.ctrl.nodes.endFence("node-1")
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if f.backend.grantsCalls != calls {
		t.Errorf("grants read %d more time(s) after the node was checked", f.backend.grantsCalls-calls)
	}
}

func TestController_SyncNode_NewLeaderLeavesLiveNodeAlone(t *testing.T) {
	f := newLeaderOnReturnedNode(t, false)
	ctx := context.Background()
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents()
	if f.ctrl.nodes.fenced("node-1") {
		t.Error("a node whose grants are all live was taken as fenced")
	}
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
}

func TestController_SyncNode_NewLeaderWithoutGrantsResumesNothing(t *testing.T) {
	f := newLeaderOnReturnedNode(t, true)
	f.backend.setErr(errors.New("connection refused"))
	ctx := context.Background()
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents()
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions()
	// The datapath answers on a later sync: the fence is resumed then.
	f.backend.setErr(nil)
	f.now = f.now.Add(resumeRetry)
	if err := f.ctrl.syncNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	f.expectEvents("Warning " + EventFenceResumed)
	f.client.ClearActions()
	if err := f.ctrl.syncPod(ctx, "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	f.expectActions("delete volumeattachments /va-a1 uid=uid-va-va-a1", "delete pods app/db-0 grace=0 uid=uid-app-db-0")
}

// Only a fenced row is an open promise: a released one is a cleanup done, a
// live one a node that can write.
func TestNewGrantsView_FencedRowsOnly(t *testing.T) {
	v := newGrantsView([]fenceapi.Grant{
		{Handle: "a", State: fenceapi.StateGranted},
		{Handle: "b", State: fenceapi.StateFenced},
		{Handle: "c", State: fenceapi.StateReleased},
	}, t0)
	if want := map[string]bool{"b": true}; !reflect.DeepEqual(v.fenced, want) {
		t.Errorf("fenced %v, want %v", v.fenced, want)
	}
	if want := map[string]bool{"a": true}; !reflect.DeepEqual(v.live, want) {
		t.Errorf("live %v, want %v", v.live, want)
	}
}
