package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/vigil-storage/vigil/fenceapi"
)

func drainKeys(f *fixture) map[queueKey]bool {
	out := map[queueKey]bool{}
	for f.ctrl.queue.Len() > 0 {
		k, _ := f.ctrl.queue.Get()
		f.ctrl.queue.Done(k)
		f.ctrl.queue.Forget(k)
		out[k] = true
	}
	return out
}

func TestController_PollStorage_MarksIsolationAndQueuesChanges(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	f.objects = append(f.objects, newNode("node-3", corev1.ConditionTrue, -time.Hour))
	f.start()
	ctx := context.Background()
	reachable, warned := true, false
	f.backend.setReport(heartbeatReport(t0, map[string]time.Duration{"node-1": 4 * time.Second, "node-2": 0, "node-3": 0}))
	f.ctrl.pollStorage(ctx, &reachable, &warned)
	if keys := drainKeys(f); len(keys) != 1 || !keys[queueKey{kind: keyNode, name: "node-1"}] {
		t.Fatalf("queued %v, want node-1", keys)
	}
	if !f.ctrl.nodes.isolatedNodes()["node-1"] {
		t.Fatal("node-1 not marked isolated")
	}
	f.expectEvents("Warning " + EventNodeStorageIsolated)
	if got := testutil.ToFloat64(f.ctrl.metrics.NodesIsolated); got != 1 {
		t.Errorf("isolated gauge %v", got)
	}
	// The same report again: no change, nothing queued, no Event.
	f.ctrl.pollStorage(ctx, &reachable, &warned)
	if keys := drainKeys(f); len(keys) != 0 {
		t.Errorf("queued %v on an unchanged report", keys)
	}
	f.expectEvents()
	// Unreachable back end: marks stay, the gauge says so.
	f.backend.setErr(errors.New("refused"))
	f.ctrl.pollStorage(ctx, &reachable, &warned)
	if !f.ctrl.nodes.isolatedNodes()["node-1"] || reachable || testutil.ToFloat64(f.ctrl.metrics.DatapathReachable) != 0 {
		t.Fatal("an unreachable back end changed the marks or was not reported")
	}
	// It heartbeats again: the mark goes and the node is judged again.
	f.backend.setErr(nil)
	f.backend.setReport(heartbeatReport(t0, map[string]time.Duration{"node-1": 0, "node-2": 0, "node-3": 0}))
	f.ctrl.pollStorage(ctx, &reachable, &warned)
	if keys := drainKeys(f); !keys[queueKey{kind: keyNode, name: "node-1"}] || len(f.ctrl.nodes.isolatedNodes()) != 0 {
		t.Fatalf("heartbeats back: queued %v, isolated %v", keys, f.ctrl.nodes.isolatedNodes())
	}
}

// blockingBackend blocks FenceVolumes until released, to catch work that outlives Run.
type blockingBackend struct {
	*fakeBackend
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	done    bool
}

func (b *blockingBackend) FenceVolumes(ctx context.Context, node string, handles []string) ([]fenceapi.Fenced, error) {
	close(b.entered)
	<-b.release
	out, err := b.fakeBackend.FenceVolumes(ctx, node, handles)
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
	return out, err
}

// Run returns only after its workers have stopped: when leadership ends, no
// fence or delete may still be in flight (issue: Controller.Run returned without
// waiting for its workers).
func TestController_Run_WaitsForWorkersBeforeReturning(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	bf := &blockingBackend{fakeBackend: f.backend, entered: make(chan struct{}), release: make(chan struct{})}
	f.backend = nil
	f.start()
	f.ctrl.backend = bf
	f.ctrl.proofs = newProofs(bf, f.ctrl.nodes, f.ctrl.now)
	// The storage watch runs too: its report must keep node-1 isolated.
	bf.setReport(heartbeatReport(t0, map[string]time.Duration{"node-1": 5 * time.Second, "node-2": 0, "node-3": 0}))
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- f.ctrl.Run(ctx, 2) }()
	select {
	case <-bf.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker never started fencing")
	}
	cancel()
	select {
	case <-returned:
		t.Fatal("Run returned while a worker was still fencing")
	case <-time.After(200 * time.Millisecond):
	}
	close(bf.release)
	select {
	case err := <-returned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the worker finished")
	}
	bf.mu.Lock()
	defer bf.mu.Unlock()
	if !bf.done {
		t.Fatal("Run returned before the fence finished")
	}
}
