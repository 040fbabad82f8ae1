package controller

import (
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
	if len(e.seen) != 2 {
		t.Errorf("%d keys kept after pruning, want 2", len(e.seen))
	}
}

func TestCorrelatorOptions_KeyFunc_NeverCombinesDifferentMessages(t *testing.T) {
	key := CorrelatorOptions().KeyFunc
	a := &corev1.Event{Reason: EventPodForceDeleted, Message: "force-deleted pod app/db-0", InvolvedObject: *nodeRef("n")}
	b := a.DeepCopy()
	b.Message = "force-deleted pod app/db-1"
	ka, _ := key(a)
	kb, _ := key(b)
	if ka == kb {
		t.Fatal("Events about two pods share an aggregation key and would be combined")
	}
}
