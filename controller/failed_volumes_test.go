package controller

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/vigil-storage/vigil/fenceapi"
)

func TestNewlyFailed(t *testing.T) {
	a, b := fenceapi.FailedVolume{Handle: "a"}, fenceapi.FailedVolume{Handle: "b"}
	for _, tc := range []struct {
		name   string
		report []fenceapi.FailedVolume
		before map[string]bool
		fresh  []fenceapi.FailedVolume
		now    map[string]bool
	}{
		{"nothing failed", nil, map[string]bool{}, nil, map[string]bool{}},
		{"first failure", []fenceapi.FailedVolume{a}, map[string]bool{}, []fenceapi.FailedVolume{a}, map[string]bool{"a": true}},
		{"still failed", []fenceapi.FailedVolume{a}, map[string]bool{"a": true}, nil, map[string]bool{"a": true}},
		{"a second one", []fenceapi.FailedVolume{a, b}, map[string]bool{"a": true}, []fenceapi.FailedVolume{b}, map[string]bool{"a": true, "b": true}},
		{"cleared", nil, map[string]bool{"a": true}, nil, map[string]bool{}},
		{"first poll of a new leader", []fenceapi.FailedVolume{a}, nil, []fenceapi.FailedVolume{a}, map[string]bool{"a": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fresh, now := newlyFailed(tc.report, tc.before)
			if !reflect.DeepEqual(fresh, tc.fresh) || !reflect.DeepEqual(now, tc.now) {
				t.Fatalf("newlyFailed = %+v, %v; want %+v, %v", fresh, now, tc.fresh, tc.now)
			}
		})
	}
}

// TestController_PollStorage_FailedVolumeWarnsOnItsPV: a volume the storage
// reports failed gets one Warning Event on its PersistentVolume, saying why
// and what to do, and counts in the gauge until it is cleared.
func TestController_PollStorage_FailedVolumeWarnsOnItsPV(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	f.recorder.IncludeObject = true
	f.start()
	ctx := context.Background()
	reachable, warned := true, false
	f.backend.setReport(heartbeatReport(t0, map[string]time.Duration{"node-1": 0, "node-2": 0}))
	failed := fenceapi.FailedVolume{Handle: "handle-pv-a", Since: t0, Reason: "flushing its data to disk failed (flush: input/output error)",
		Clear: "vigil-datapath clear-failure handle-pv-a"}
	f.backend.setFailed(failed, fenceapi.FailedVolume{Handle: "no-pv", Since: t0, Reason: "r", Clear: "c"})
	f.ctrl.pollStorage(ctx, &reachable, &warned)
	evs := f.expectEvents("Warning " + EventVolumeFailed)
	if len(evs) == 1 {
		for _, want := range []string{"handle-pv-a", "input/output error", "may be lost", "`vigil-datapath clear-failure handle-pv-a`", "kind=PersistentVolume"} {
			if !strings.Contains(evs[0], want) {
				t.Errorf("event %q lacks %q", evs[0], want)
			}
		}
	}
	if got := testutil.ToFloat64(f.ctrl.metrics.VolumesFailed); got != 2 {
		t.Errorf("failed-volume gauge %v, want 2", got)
	}
	f.ctrl.pollStorage(ctx, &reachable, &warned)
	f.expectEvents() // still failed: no second Event
	f.backend.setErr(errors.New("refused"))
	f.ctrl.pollStorage(ctx, &reachable, &warned)
	if got := testutil.ToFloat64(f.ctrl.metrics.VolumesFailed); got != 2 {
		t.Errorf("an unreachable back end changed the gauge to %v", got)
	}
	f.backend.setErr(nil)
	f.backend.setFailed()
	f.ctrl.pollStorage(ctx, &reachable, &warned)
	if got := testutil.ToFloat64(f.ctrl.metrics.VolumesFailed); got != 0 {
		t.Errorf("failed-volume gauge %v after the operator cleared them, want 0", got)
	}
	failed.Since = t0.Add(time.Hour)
	f.backend.setFailed(failed)
	f.ctrl.pollStorage(ctx, &reachable, &warned)
	f.expectEvents("Warning " + EventVolumeFailed) // failed again: a new Event
}
