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
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	core "k8s.io/client-go/testing"
)

// slowAPI is an API server whose Event creates answer only once gate is
// closed, refused as fail says.
type slowAPI struct {
	gate    chan struct{}
	fail    func(*corev1.Event) error
	mu      sync.Mutex
	created []*corev1.Event
	calls   int
}

func newSlowAPI() (*slowAPI, *fake.Clientset) {
	api := &slowAPI{gate: make(chan struct{})}
	client := fake.NewClientset()
	client.PrependReactor("create", "events", func(a core.Action) (bool, kruntime.Object, error) {
		<-api.gate
		ev := a.(core.CreateAction).GetObject().(*corev1.Event)
		api.mu.Lock()
		defer api.mu.Unlock()
		api.calls++
		if api.fail != nil {
			if err := api.fail(ev); err != nil {
				return true, nil, err
			}
		}
		api.created = append(api.created, ev)
		return true, ev, nil
	})
	return api, client
}

func (a *slowAPI) written() []*corev1.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.created)
}

func newTestWriter(t *testing.T, client *fake.Clientset, size int) (*EventWriter, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return NewEventWriter(client.CoreV1(), scheme.Scheme, "vigil-manager", size, m), m
}

// runWriter runs w until the test ends.
func runWriter(t *testing.T, w *EventWriter) context.CancelFunc {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return cancel
}

func podNamed(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name, UID: types.UID("uid-" + name)}}
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

func TestEventWriter_MakesTheEventOfTheObject(t *testing.T) {
	api, client := newSlowAPI()
	close(api.gate)
	w, m := newTestWriter(t, client, 10)
	w.now = func() time.Time { return t0 }
	runWriter(t, w)
	w.Event(podNamed("db-0"), corev1.EventTypeNormal, EventPodForceDeleted, "force-deleted pod app/db-0")
	w.Eventf(nodeRef("node-1"), corev1.EventTypeWarning, EventFenceFailed, "fencing %s: %v", "node-1", "refused")
	waitFor(t, "two Events", func() bool { return len(api.written()) == 2 })
	evs := api.written()
	slices.SortFunc(evs, func(a, b *corev1.Event) int { return len(a.Namespace) - len(b.Namespace) })
	pod, node := evs[0], evs[1]
	if pod.Namespace != "app" || pod.InvolvedObject.Kind != "Pod" || pod.InvolvedObject.Name != "db-0" || pod.InvolvedObject.UID != "uid-db-0" ||
		pod.Reason != EventPodForceDeleted || pod.Type != corev1.EventTypeNormal || pod.Count != 1 ||
		pod.Source.Component != "vigil-manager" || pod.ReportingController != "vigil-manager" ||
		!pod.FirstTimestamp.Time.Equal(t0) || pod.Name != fmt.Sprintf("db-0.%x", t0.UnixNano()) {
		t.Errorf("pod Event %+v", pod)
	}
	if node.Namespace != metav1.NamespaceDefault || node.InvolvedObject.Kind != "Node" || node.Message != "fencing node-1: refused" || node.Type != corev1.EventTypeWarning {
		t.Errorf("node Event %+v", node)
	}
	if d := testutil.ToFloat64(m.EventsDropped); d != 0 {
		t.Errorf("dropped %v", d)
	}
}

func TestEventWriter_BadEventIsRefusedAndCounted(t *testing.T) {
	api, client := newSlowAPI()
	close(api.gate)
	w, m := newTestWriter(t, client, 10)
	runWriter(t, w)
	w.Event(podNamed("db-0"), "Loud", EventPodForceDeleted, "an unknown type")
	w.Event(&struct{ corev1.Pod }{}, corev1.EventTypeNormal, EventPodForceDeleted, "an object of no known kind")
	if d := testutil.ToFloat64(m.EventsDropped); d != 2 {
		t.Errorf("dropped %v, want 2", d)
	}
	if q := testutil.ToFloat64(m.EventsQueued); q != 0 {
		t.Errorf("queued %v, want 0", q)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(api.written()); n != 0 {
		t.Errorf("%d Events written", n)
	}
}

func TestEventWriter_NeverWaitsForTheAPIServer(t *testing.T) {
	api, client := newSlowAPI()
	w, m := newTestWriter(t, client, 100)
	runWriter(t, w)
	start := time.Now()
	for i := range 50 {
		w.Event(podNamed(fmt.Sprintf("p-%02d", i)), corev1.EventTypeNormal, EventPodForceDeleted, "force-deleted")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("50 Events took %s with the API server not answering", took)
	}
	// All but the eight being written wait in the queue.
	waitFor(t, "the writers to take 8", func() bool { return testutil.ToFloat64(m.EventsQueued) == 42 })
	close(api.gate)
	waitFor(t, "every Event written", func() bool { return len(api.written()) == 50 })
	var names []string
	for _, e := range api.written() {
		names = append(names, e.InvolvedObject.Name)
	}
	slices.Sort(names)
	for i, name := range names {
		if want := fmt.Sprintf("p-%02d", i); name != want {
			t.Fatalf("written %v: %s missing", names, want)
		}
	}
	if q, d := testutil.ToFloat64(m.EventsQueued), testutil.ToFloat64(m.EventsDropped); q != 0 || d != 0 {
		t.Errorf("queued %v dropped %v after everything was written", q, d)
	}
}

func TestEventWriter_FullQueueDropsAndCounts(t *testing.T) {
	api, client := newSlowAPI()
	w, m := newTestWriter(t, client, 3)
	// No writers yet: three fit, the fourth and fifth are dropped, nothing blocks.
	for i := range 5 {
		w.Event(podNamed(fmt.Sprint("p-", i)), corev1.EventTypeNormal, EventPodForceDeleted, "force-deleted")
	}
	if q, d := testutil.ToFloat64(m.EventsQueued), testutil.ToFloat64(m.EventsDropped); q != 3 || d != 2 {
		t.Fatalf("queued %v dropped %v, want 3 and 2", q, d)
	}
	close(api.gate)
	runWriter(t, w)
	waitFor(t, "the queued Events written", func() bool { return len(api.written()) == 3 })
	for _, e := range api.written() {
		if !slices.Contains([]string{"p-0", "p-1", "p-2"}, e.InvolvedObject.Name) {
			t.Errorf("written %s, want only the first three", e.InvolvedObject.Name)
		}
	}
}

func TestEventWriter_RefusedEventIsCountedNotRetried(t *testing.T) {
	api, client := newSlowAPI()
	api.fail = func(e *corev1.Event) error {
		switch e.InvolvedObject.Name {
		case "bad":
			return apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, e.Name, errors.New("namespace is terminating"))
		case "dup":
			return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, e.Name)
		}
		return nil
	}
	close(api.gate)
	w, m := newTestWriter(t, client, 10)
	runWriter(t, w)
	for _, n := range []string{"bad", "dup", "good"} {
		w.Event(podNamed(n), corev1.EventTypeNormal, EventPodForceDeleted, "force-deleted")
	}
	waitFor(t, "the good Event", func() bool { return len(api.written()) == 1 })
	waitFor(t, "the refusal counted", func() bool { return testutil.ToFloat64(m.EventsDropped) == 1 })
	time.Sleep(50 * time.Millisecond)
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.calls != 3 {
		t.Errorf("%d creates for 3 Events, want 3 (no retry)", api.calls)
	}
}

func TestEventWriter_StopCountsWhatIsLeft(t *testing.T) {
	api, client := newSlowAPI()
	w, m := newTestWriter(t, client, 100)
	for i := range 20 {
		w.Event(podNamed(fmt.Sprint("p-", i)), corev1.EventTypeNormal, EventPodForceDeleted, "force-deleted")
	}
	cancel := runWriter(t, w)
	waitFor(t, "the writers to take 8", func() bool { return testutil.ToFloat64(m.EventsQueued) == 12 })
	cancel()
	close(api.gate) // the eight in flight finish; the twelve queued are not sent
	waitFor(t, "the twelve counted", func() bool { return testutil.ToFloat64(m.EventsDropped) == 12 })
	if q := testutil.ToFloat64(m.EventsQueued); q != 0 {
		t.Errorf("queued %v after stopping, want 0", q)
	}
}

// TestEventWriter_BurstLosesNothing is the failure it fixes: 5,000 Events
// recorded at once while the API server does not answer. client-go's
// broadcaster drops what exceeds its queues (about 2,000); the writer keeps
// every one.
func TestEventWriter_BurstLosesNothing(t *testing.T) {
	api, client := newSlowAPI()
	w, m := newTestWriter(t, client, EventQueueSize)
	runWriter(t, w)
	const n = 5000
	for i := range n {
		w.Event(podNamed(fmt.Sprint("p-", i)), corev1.EventTypeNormal, EventPodForceDeleted, "force-deleted")
	}
	close(api.gate)
	waitFor(t, "every Event written", func() bool { return len(api.written()) == n })
	if d := testutil.ToFloat64(m.EventsDropped); d != 0 {
		t.Errorf("dropped %v", d)
	}
}
