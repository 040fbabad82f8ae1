package enginenode

import (
	"context"
	"log/slog"
	"time"
)

// DefaultHeartbeatInterval is how often the engine tells the datapath it lives.
const DefaultHeartbeatInterval = time.Second

// Heartbeater is the datapath call the heartbeat loop makes.
type Heartbeater interface {
	Heartbeat(ctx context.Context, node string) error
}

// RunHeartbeats heartbeats node to hb every interval until ctx ends. Each beat
// gets at most one interval; failures are counted and logged when the state
// changes (first failure, recovery), not on every beat.
func RunHeartbeats(ctx context.Context, hb Heartbeater, node string, interval time.Duration, m *Metrics, log *slog.Logger) {
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		err := beat(ctx, hb, node, interval)
		switch {
		case err != nil && ctx.Err() == nil:
			m.heartbeatFailures.Inc()
			if !failing {
				log.Warn("heartbeat to the datapath failed", "node", node, "err", err)
			}
			failing = true
		case err == nil && failing:
			log.Info("heartbeats to the datapath resumed", "node", node)
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func beat(ctx context.Context, hb Heartbeater, node string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return hb.Heartbeat(ctx, node)
}
