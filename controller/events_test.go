package controller

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

func TestEvents_Emit_DropsIdenticalRepeatsWithinTTL(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	now := t0
	e := newEvents(rec, func() time.Time { return now })
	ref := nodeRef("n")
	if !e.emit(ref, ref.UID, corev1.EventTypeNormal, EventNodeDown, "m") {
		t.Fatal("first emit dropped")
	}
	if e.emit(ref, ref.UID, corev1.EventTypeNormal, EventNodeDown, "m") {
		t.Fatal("identical repeat emitted")
	}
	if !e.emit(ref, ref.UID, corev1.EventTypeNormal, EventNodeDown, "other message") {
		t.Fatal("a different message was dropped")
	}
	now = now.Add(eventDedupeTTL)
	if !e.emit(ref, ref.UID, corev1.EventTypeNormal, EventNodeDown, "m") {
		t.Fatal("repeat after the TTL dropped")
	}
	if e.seen.len() != 2 {
		t.Errorf("%d keys kept after pruning, want 2", e.seen.len())
	}
}

func TestNewMetrics_ExactNames(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	f.start()
	if err := f.ctrl.syncNode(t.Context(), "node-1"); err != nil {
		t.Fatal(err)
	}
	if err := f.ctrl.syncPod(t.Context(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	families, err := f.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, mf := range families {
		var labels []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		got[mf.GetName()] = labels
	}
	want := map[string][]string{
		"vigil_reaper_pods_deleted_total":              {"owner_kind", "policy"},
		"vigil_reaper_volumeattachments_deleted_total": nil,
		"vigil_reaper_decisions_total":                 {"decision", "reason"},
		"vigil_nodes_down":                             nil,
		"vigil_nodes_storage_isolated":                 nil,
		"vigil_fence_duration_seconds":                 nil,
		"vigil_recovery_duration_seconds":              nil,
		"vigil_datapath_reachable":                     nil,
		"vigil_events_queued":                          nil,
		"vigil_events_dropped_total":                   nil,
		"vigil_attachment_recovery_actions_total":      {"action"},
		"vigil_volumes_failed":                         nil,
		"vigil_control_plane_outage":                   nil,
		"vigil_nodes_held_control_plane_outage":        nil,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("metrics %v, want %v", got, want)
	}
}
