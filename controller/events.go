package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// eventDedupeTTL is how long an identical Event on the same object is suppressed:
// longer than an informer resync, so re-deciding the same thing stays quiet.
const eventDedupeTTL = time.Hour

// events emits Events through a recorder, dropping one identical (same object,
// type, reason and message) to one emitted less than eventDedupeTTL ago.
type events struct {
	rec  record.EventRecorder
	now  func() time.Time
	seen *ttlSet[eventKey]
}

type eventKey struct {
	uid                  types.UID
	typ, reason, message string
}

func newEvents(rec record.EventRecorder, now func() time.Time) *events {
	return &events{rec: rec, now: now, seen: newTTLSet[eventKey](eventDedupeTTL)}
}

// emit records the Event on obj (identified by uid for deduplication) unless
// an identical one was emitted within the ttl. It reports whether it emitted.
func (e *events) emit(obj runtime.Object, uid types.UID, typ, reason, message string) bool {
	if !e.seen.addIfAbsent(eventKey{uid: uid, typ: typ, reason: reason, message: message}, e.now()) {
		return false
	}
	e.rec.Event(obj, typ, reason, message)
	return true
}

// nodeRef is how Events are attached to a node, the kubelet's way (UID = name),
// so `kubectl describe node` shows them, even after the Node is deleted.
func nodeRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: name, UID: types.UID(name)}
}
