package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
)

// slowSink is an API server that answers only when gate is open, and refuses
// what fail says.
type slowSink struct {
	gate    chan struct{}
	mu      sync.Mutex
	created []string
	patched []string
	fail    func(*corev1.Event) error
}

func (s *slowSink) Create(e *corev1.Event) (*corev1.Event, error) {
	<-s.gate
	if s.fail != nil {
		if err := s.fail(e); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created = append(s.created, e.Name)
	return e, nil
}

func (s *slowSink) Update(e *corev1.Event) (*corev1.Event, error) { return s.Create(e) }

func (s *slowSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	<-s.gate
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.created, e.Name) {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, e.Name)
	}
	s.patched = append(s.patched, e.Name)
	return e, nil
}

func (s *slowSink) names() (created, patched []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.created)), slices.Clone(s.patched)
}

func newTestSink(t *testing.T, inner record.EventSink, size int) (*QueuedEventSink, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return NewQueuedEventSink(inner, size, m), m
}

func event(name string) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app"}, Reason: EventPodForceDeleted,
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "app", Name: name}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestQueuedEventSink_CreateNeverWaitsForTheAPIServer(t *testing.T) {
	inner := &slowSink{gate: make(chan struct{})}
	s, m := newTestSink(t, inner, 100)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	start := time.Now()
	for i := range 50 {
		if _, err := s.Create(event(fmt.Sprintf("e-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("50 Creates took %s with the API server not answering", took)
	}
	// All but the eight being written wait in the queue.
	waitFor(t, "the writers to take 8", func() bool { return testutil.ToFloat64(m.EventsQueued) == 42 })
	close(inner.gate)
	waitFor(t, "every Event written", func() bool { c, _ := inner.names(); return len(c) == 50 })
	created, _ := inner.names()
	for i, name := range created {
		if want := fmt.Sprintf("e-%02d", i); name != want {
			t.Fatalf("written %v: %s missing", created, want)
		}
	}
	if q, d := testutil.ToFloat64(m.EventsQueued), testutil.ToFloat64(m.EventsDropped); q != 0 || d != 0 {
		t.Errorf("queued %v dropped %v after everything was written", q, d)
	}
}

func TestQueuedEventSink_FullQueueDropsAndCounts(t *testing.T) {
	inner := &slowSink{gate: make(chan struct{})}
	s, m := newTestSink(t, inner, 3)
	// No writers yet: three fit, the fourth and fifth are dropped, nothing blocks.
	for i := range 5 {
		if _, err := s.Create(event(fmt.Sprint("e-", i))); err != nil {
			t.Fatal(err)
		}
	}
	if q, d := testutil.ToFloat64(m.EventsQueued), testutil.ToFloat64(m.EventsDropped); q != 3 || d != 2 {
		t.Fatalf("queued %v dropped %v, want 3 and 2", q, d)
	}
	close(inner.gate)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	waitFor(t, "the queued Events written", func() bool { c, _ := inner.names(); return len(c) == 3 })
	cancel()
	<-done
	if created, _ := inner.names(); !slices.Equal(created, []string{"e-0", "e-1", "e-2"}) {
		t.Errorf("written %v, want the first three", created)
	}
}

func TestQueuedEventSink_PatchOfAnEventNotThereCreatesIt(t *testing.T) {
	inner := &slowSink{gate: make(chan struct{})}
	close(inner.gate)
	s, m := newTestSink(t, inner, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	gone := event("gone")
	gone.ResourceVersion = "42"
	if _, err := s.Patch(gone, []byte(`{"count":2}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Event created", func() bool { c, _ := inner.names(); return slices.Contains(c, "gone") })
	if _, err := s.Patch(event("gone"), []byte(`{"count":3}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Event patched", func() bool { _, p := inner.names(); return slices.Equal(p, []string{"gone"}) })
	if d := testutil.ToFloat64(m.EventsDropped); d != 0 {
		t.Errorf("dropped %v", d)
	}
}

func TestQueuedEventSink_RefusedEventIsCountedNotRetried(t *testing.T) {
	calls := 0
	var mu sync.Mutex
	inner := &slowSink{gate: make(chan struct{}), fail: func(e *corev1.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if e.Name == "bad" {
			calls++
			return apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, e.Name, errors.New("namespace is terminating"))
		}
		if e.Name == "dup" {
			return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, e.Name)
		}
		return nil
	}}
	close(inner.gate)
	s, m := newTestSink(t, inner, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for _, n := range []string{"bad", "dup", "good"} {
		if _, err := s.Create(event(n)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the good Event", func() bool { c, _ := inner.names(); return slices.Contains(c, "good") })
	waitFor(t, "the refusal counted", func() bool { return testutil.ToFloat64(m.EventsDropped) == 1 })
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("refused Event sent %d times, want 1", calls)
	}
}

func TestQueuedEventSink_StopCountsWhatIsLeft(t *testing.T) {
	inner := &slowSink{gate: make(chan struct{})}
	s, m := newTestSink(t, inner, 100)
	for i := range 20 {
		if _, err := s.Create(event(fmt.Sprint("e-", i))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	waitFor(t, "the writers to take 8", func() bool { return testutil.ToFloat64(m.EventsQueued) == 12 })
	cancel()
	close(inner.gate) // the eight in flight finish; the twelve queued are not sent
	<-done
	if q, d := testutil.ToFloat64(m.EventsQueued), testutil.ToFloat64(m.EventsDropped); q != 0 || d != 12 {
		t.Errorf("queued %v dropped %v after stopping, want 0 and 12", q, d)
	}
}

// TestQueuedEventSink_BroadcasterBurstLosesNothing is the failure it fixes:
// 3,000 Events recorded in three seconds while the API server does not answer.
// client-go's broadcaster writing directly drops what exceeds its queues
// (about 2,000); through the queued sink every one arrives.
func TestQueuedEventSink_BroadcasterBurstLosesNothing(t *testing.T) {
	inner := &slowSink{gate: make(chan struct{})}
	s, m := newTestSink(t, inner, EventQueueSize)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go s.Run(ctx)
	b := record.NewBroadcaster(record.WithContext(ctx), record.WithCorrelatorOptions(CorrelatorOptions()))
	defer b.Shutdown()
	b.StartRecordingToSink(s)
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "test"})
	const n = 3000
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: fmt.Sprint("p-", i), UID: "u"}}
		rec.Event(pod, corev1.EventTypeNormal, EventPodForceDeleted, "force-deleted")
		if i%100 == 99 {
			time.Sleep(10 * time.Millisecond) // the reaper's pace: thousands a second at most
		}
	}
	close(inner.gate)
	waitFor(t, "every Event written", func() bool { c, _ := inner.names(); return len(c) == n })
	created, _ := inner.names()
	if len(slices.Compact(created)) != n {
		t.Errorf("%d distinct Events written, want %d", len(slices.Compact(created)), n)
	}
	if d := testutil.ToFloat64(m.EventsDropped); d != 0 {
		t.Errorf("dropped %v", d)
	}
}
