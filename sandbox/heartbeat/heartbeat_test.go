package heartbeat

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeDatapath records heartbeats; nodes in down fail.
type fakeDatapath struct {
	mu   sync.Mutex
	seen map[string]int
	down map[string]bool
}

func (f *fakeDatapath) Heartbeat(_ context.Context, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[node] {
		return errors.New("unreachable")
	}
	f.seen[node]++
	return nil
}

func (f *fakeDatapath) count(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[node]
}

func TestBeat_EveryNodeFailuresCounted(t *testing.T) {
	f := &fakeDatapath{seen: map[string]int{}, down: map[string]bool{"b": true}}
	r := Beat(context.Background(), f, []string{"a", "b", "c"}, time.Second)
	if r.Sent != 2 || r.Failed != 1 || r.FirstErr == nil || f.count("a") != 1 || f.count("c") != 1 {
		t.Errorf("Beat = %+v, seen %v; want 2 sent (a, c), b failed", r, f.seen)
	}
}

// slowDatapath makes one node's heartbeat wait until the round ends.
type slowDatapath struct {
	fakeDatapath
	slow string
}

func (f *slowDatapath) Heartbeat(ctx context.Context, node string) error {
	if node == f.slow {
		<-ctx.Done()
		return ctx.Err()
	}
	return f.fakeDatapath.Heartbeat(ctx, node)
}

// A heartbeat that waits delays no other node's: the first node of the round
// waits out the whole round, the others are sent.
func TestBeat_OneSlowNodeDelaysNoOther(t *testing.T) {
	f := &slowDatapath{fakeDatapath: fakeDatapath{seen: map[string]int{}}, slow: "a"}
	r := Beat(context.Background(), f, []string{"a", "b", "c", "d"}, 200*time.Millisecond)
	if r.Sent != 3 || r.Failed != 1 || f.count("b") != 1 || f.count("c") != 1 || f.count("d") != 1 {
		t.Errorf("Beat = %+v, seen %v; want b, c, d sent and a failed", r, f.seen)
	}
}

func TestRun_HeartbeatsUntilCancelled(t *testing.T) {
	f := &fakeDatapath{seen: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Client: f, Nodes: []string{"n1", "n2"}, Interval: 5 * time.Millisecond})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for f.count("n1") < 3 || f.count("n2") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("heartbeats after 10s: %v", f.seen)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil once cancelled", err)
	}
}

func TestRun_BadConfig(t *testing.T) {
	f := &fakeDatapath{seen: map[string]int{}}
	for name, c := range map[string]Config{
		"no client":  {Nodes: []string{"a"}},
		"no nodes":   {Client: f},
		"empty name": {Client: f, Nodes: []string{"a", ""}},
		"duplicate":  {Client: f, Nodes: []string{"a", "a"}},
		"comma":      {Client: f, Nodes: []string{"a,b"}},
		"negative":   {Client: f, Nodes: []string{"a"}, Interval: -time.Second},
	} {
		if err := Run(context.Background(), c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: Run = %v, want ErrBadConfig", name, err)
		}
	}
}
