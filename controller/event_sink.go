package controller

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// EventQueueSize is how many Events may wait to be written. A rack of 50 nodes
// with 2,000 pods produces about that many in a few seconds; the queue holds
// five such bursts (about 1 KiB each) before it drops one.
const EventQueueSize = 10000

// eventWriters is how many Events are written at once. The events client's own
// rate limit decides how fast; enough writers keep that rate when the API
// server answers slowly.
const eventWriters = 8

// QueuedEventSink is the record.EventSink of the manager's broadcaster. It
// hands each Event to a queue and returns at once, and a few writers send the
// queue to the API server through inner.
//
// client-go's broadcaster writes its Events one at a time and drops what
// arrives while 2,000 wait; a loaded API server answering in a second made it
// drop hundreds of Events of a rack failure, the audit trail of what was
// force-deleted. Writing through a client of their own with a modest rate
// limit also keeps the Events from competing with the deletes they describe.
type QueuedEventSink struct {
	inner   record.EventSink
	queue   chan sinkWrite
	queued  prometheus.Gauge
	dropped prometheus.Counter
	once    sync.Once
}

type sinkWrite struct {
	event *corev1.Event
	patch []byte // nil: create
}

// NewQueuedEventSink queues up to size Events for inner; m counts what waits
// and what was dropped. Run writes them.
func NewQueuedEventSink(inner record.EventSink, size int, m *Metrics) *QueuedEventSink {
	return &QueuedEventSink{inner: inner, queue: make(chan sinkWrite, size), queued: m.EventsQueued, dropped: m.EventsDropped}
}

// Create queues ev and returns it: the broadcaster never waits for the API server.
func (s *QueuedEventSink) Create(ev *corev1.Event) (*corev1.Event, error) {
	s.put(sinkWrite{event: ev.DeepCopy()})
	return ev, nil
}

// Update is not used by client-go's recorder (it patches repeats); it is queued
// as a create of the event's current content.
func (s *QueuedEventSink) Update(ev *corev1.Event) (*corev1.Event, error) {
	return s.Create(ev)
}

// Patch queues the count and timestamp update of a repeated Event.
func (s *QueuedEventSink) Patch(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	s.put(sinkWrite{event: ev.DeepCopy(), patch: append([]byte(nil), data...)})
	return ev, nil
}

func (s *QueuedEventSink) put(w sinkWrite) {
	select {
	case s.queue <- w:
		s.queued.Inc()
	default:
		s.dropped.Inc()
		klog.Background().Info("Event dropped: the queue of Events to write is full",
			"capacity", cap(s.queue), "object", klog.KRef(w.event.InvolvedObject.Namespace, w.event.InvolvedObject.Name),
			"reason", w.event.Reason, "message", w.event.Message)
	}
}

// Run writes queued Events with a few writers until ctx ends; what is still
// queued then is counted as dropped. It runs once: later calls return at once.
func (s *QueuedEventSink) Run(ctx context.Context) {
	s.once.Do(func() {
		var wg sync.WaitGroup
		for range eventWriters {
			wg.Go(func() { s.write(ctx) })
		}
		wg.Wait()
		left := 0
		for {
			select {
			case <-s.queue:
				s.queued.Dec()
				s.dropped.Inc()
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

func (s *QueuedEventSink) write(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case w := <-s.queue:
			s.queued.Dec()
			s.send(ctx, w)
		}
	}
}

// send writes one Event. A repeat whose first Event is not there (it is still
// queued, or it expired) is created whole, the way client-go's recorder does.
// A failed write is logged and counted: Events are a record, never a reason to
// stop or to retry forever.
func (s *QueuedEventSink) send(ctx context.Context, w sinkWrite) {
	var err error
	if w.patch != nil {
		_, err = s.inner.Patch(w.event, w.patch)
		if apierrors.IsNotFound(err) {
			w.event.ResourceVersion = ""
			_, err = s.inner.Create(w.event)
		}
	} else {
		_, err = s.inner.Create(w.event)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) && ctx.Err() == nil {
		s.dropped.Inc()
		klog.FromContext(ctx).Info("Event not written", "object", klog.KRef(w.event.InvolvedObject.Namespace, w.event.InvolvedObject.Name),
			"reason", w.event.Reason, "err", err)
	}
}
