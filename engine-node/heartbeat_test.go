package enginenode

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

type countingHeartbeater struct {
	mu    sync.Mutex
	beats int
	fail  bool
	nodes map[string]bool
}

func (c *countingHeartbeater) Heartbeat(_ context.Context, node string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.beats++
	if c.nodes == nil {
		c.nodes = map[string]bool{}
	}
	c.nodes[node] = true
	if c.fail {
		return errors.New("unreachable")
	}
	return nil
}

func (c *countingHeartbeater) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.beats
}

func runBeatsFor(t *testing.T, hb *countingHeartbeater, m *Metrics, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	RunHeartbeats(ctx, hb, "node-a", 10*time.Millisecond, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestRunHeartbeats_Interval_BeatsUntilCancelled(t *testing.T) {
	hb := &countingHeartbeater{}
	m := NewMetrics(nil)
	runBeatsFor(t, hb, m, 200*time.Millisecond)
	if n := hb.count(); n < 3 || n > 30 { // loose: CI machines are busy
		t.Fatalf("%d beats in 200ms at 10ms, want about 20", n)
	}
	if !hb.nodes["node-a"] || len(hb.nodes) != 1 {
		t.Fatalf("beats named %v, want node-a", hb.nodes)
	}
	if f := testutil.ToFloat64(m.heartbeatFailures); f != 0 {
		t.Fatalf("failures = %v, want 0", f)
	}
}

func TestRunHeartbeats_Failures_Counted(t *testing.T) {
	hb := &countingHeartbeater{fail: true}
	m := NewMetrics(nil)
	runBeatsFor(t, hb, m, 100*time.Millisecond)
	if f, n := testutil.ToFloat64(m.heartbeatFailures), hb.count(); f == 0 || int(f) > n {
		t.Fatalf("failures = %v after %d failing beats", f, n)
	}
}
