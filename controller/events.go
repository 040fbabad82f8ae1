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

// emitPod puts the Event on the pod: what was done to the pod, or why not. A
// rack failure has thousands of these; the node's NodeRecovery lists its pods.
func (c *Controller) emitPod(pod *corev1.Pod, typ, reason, msg string) {
	c.events.emit(pod, pod.UID, typ, reason, msg)
}

// emitBoth puts the Event on the pod and on its node: what was done to the
// node's attachments, and in a dry run what would have been.
func (c *Controller) emitBoth(pod *corev1.Pod, typ, reason, msg string) {
	c.emitPod(pod, typ, reason, msg)
	ref := nodeRef(pod.Spec.NodeName)
	c.events.emit(ref, ref.UID, typ, reason, msg)
}
