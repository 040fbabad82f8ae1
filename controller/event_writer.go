package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
)

// EventQueueSize is how many Events may wait to be written: a rack of 50
// nodes with 2,000 pods produces about that many in a few seconds. At about
// 1 KiB each the full queue holds 10 MiB.
const EventQueueSize = 10000

// eventWriters is how many Events are written at once. The events client's own
// rate limit decides how fast; enough writers keep that rate when the API
// server answers slowly.
const eventWriters = 8

// EventWriter is the manager's record.EventRecorder. Each Event goes into a
// queue at once, and a few writers create it through a client of its own.
//
// client-go's broadcaster writes Events one at a time and drops, uncounted,
// what arrives while about 2,000 wait: on a 500-node cluster a rack failure
// lost hundreds of the Events that say what was force-deleted, and a manager
// starting among 200 down nodes lost thousands. The manager needs none of the
// broadcaster's aggregation (it drops identical repeats itself, see events),
// so Events skip it. Writing through a client with a modest rate limit also
// keeps them from competing with the deletes they describe.
type EventWriter struct {
	client typedcorev1.EventsGetter
	scheme *runtime.Scheme
	source corev1.EventSource
	now    func() time.Time
	queue  chan *corev1.Event
	m      *Metrics
	once   sync.Once
}

// NewEventWriter queues up to size Events for client, as component; m counts
// what waits and what was dropped. Run writes them.
func NewEventWriter(client typedcorev1.EventsGetter, scheme *runtime.Scheme, component string, size int, m *Metrics) *EventWriter {
	return &EventWriter{client: client, scheme: scheme, source: corev1.EventSource{Component: component},
		now: time.Now, queue: make(chan *corev1.Event, size), m: m}
}

// Event queues an Event on obj; it never waits for the API server.
func (w *EventWriter) Event(obj runtime.Object, eventtype, reason, message string) {
	w.AnnotatedEventf(obj, nil, eventtype, reason, "%s", message)
}

// Eventf is Event with a format.
func (w *EventWriter) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	w.AnnotatedEventf(obj, nil, eventtype, reason, messageFmt, args...)
}

// AnnotatedEventf is Eventf with annotations on the Event.
func (w *EventWriter) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	logger := klog.Background()
	ref, err := reference.GetReference(w.scheme, obj)
	if err != nil {
		logger.Error(err, "no reference to record an Event on", "reason", reason)
		w.m.EventsDropped.Inc()
		return
	}
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		logger.Error(nil, "Event of an unknown type", "type", eventtype, "reason", reason)
		w.m.EventsDropped.Inc()
		return
	}
	ev := w.event(ref, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
	select {
	case w.queue <- ev:
		w.m.EventsQueued.Inc()
	default:
		w.m.EventsDropped.Inc()
		logger.Info("Event dropped: the queue of Events to write is full", "capacity", cap(w.queue),
			"object", klog.KRef(ref.Namespace, ref.Name), "reason", reason, "message", ev.Message)
	}
}

// event is the Event client-go's recorder would make: named after the object
// and the time, in the object's namespace (default for a cluster-scoped one).
func (w *EventWriter) event(ref *corev1.ObjectReference, annotations map[string]string, eventtype, reason, message string) *corev1.Event {
	t := metav1.NewTime(w.now())
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%v.%x", ref.Name, t.UnixNano()), Namespace: ns, Annotations: annotations},
		InvolvedObject: *ref, Reason: reason, Message: message, Type: eventtype, Count: 1,
		FirstTimestamp: t, LastTimestamp: t, Source: w.source, ReportingController: w.source.Component,
	}
}

// Run writes queued Events with a few writers until ctx ends; what is still
// queued then is counted as dropped. It runs once: later calls return at once.
func (w *EventWriter) Run(ctx context.Context) {
	w.once.Do(func() {
		var wg sync.WaitGroup
		for range eventWriters {
			wg.Go(func() { w.write(ctx) })
		}
		wg.Wait()
		left := 0
		for {
			select {
			case <-w.queue:
				w.m.EventsQueued.Dec()
				w.m.EventsDropped.Inc()
				left++
			default:
				if left > 0 {
					klog.FromContext(ctx).Info("Events not written: the manager is stopping", "count", left)
				}
				return
			}
		}
	})
}

func (w *EventWriter) write(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case ev := <-w.queue:
			w.m.EventsQueued.Dec()
			w.send(ctx, ev)
		}
	}
}

// send creates one Event. A failure is logged and counted: Events are a
// record, never a reason to stop or to retry forever.
func (w *EventWriter) send(ctx context.Context, ev *corev1.Event) {
	_, err := w.client.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
		w.m.EventsDropped.Inc()
		klog.FromContext(ctx).Info("Event not written", "object", klog.KRef(ev.InvolvedObject.Namespace, ev.InvolvedObject.Name),
			"reason", ev.Reason, "err", err)
	}
}
