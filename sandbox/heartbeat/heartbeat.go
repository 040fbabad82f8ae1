package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ErrBadConfig: a Config field is missing or out of range.
var ErrBadConfig = errors.New("bad heartbeat config")

// Heartbeater is what Run needs of a datapath client.
type Heartbeater interface {
	Heartbeat(ctx context.Context, node string) error
}

// Config is what Run needs.
type Config struct {
	Client Heartbeater
	// Nodes are the node names to heartbeat for; at least one, no duplicates.
	Nodes []string
	// Interval between two rounds; default 1s.
	Interval time.Duration
	// Logf receives a line when a round fails after a good one and when it
	// recovers; default none.
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() (Config, error) {
	if c.Client == nil || len(c.Nodes) == 0 {
		return c, fmt.Errorf("%w: want a Client and at least one node (got %d nodes)", ErrBadConfig, len(c.Nodes))
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		if n == "" || strings.ContainsAny(n, " ,") || seen[n] {
			return c, fmt.Errorf("%w: node %q: want distinct non-empty names without spaces or commas", ErrBadConfig, n)
		}
		seen[n] = true
	}
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Interval < 0 {
		return c, fmt.Errorf("%w: Interval %s: want 0 (default 1s) or more", ErrBadConfig, c.Interval)
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c, nil
}

// Round is the outcome of one round of heartbeats.
type Round struct {
	Sent, Failed int
	FirstErr     error
}

// Beat sends one heartbeat per node, all at once as the engines of the nodes
// would, the round bounded by timeout. One after the other, a heartbeat that
// waited (on the datapath's TokenReview of that node's token, say) cost every
// node after it in the round its heartbeat too: the 500-node bench saw 46 of a
// rack's 50 heartbeats time out behind a few slow ones, and a rack looking
// storage-isolated that was not.
func Beat(ctx context.Context, c Heartbeater, nodes []string, timeout time.Duration) Round {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { errs[i] = c.Heartbeat(ctx, n) })
	}
	wg.Wait()
	var r Round
	for i, err := range errs {
		if err != nil {
			r.Failed++
			if r.FirstErr == nil {
				r.FirstErr = fmt.Errorf("heartbeat %s: %w", nodes[i], err)
			}
			continue
		}
		r.Sent++
	}
	return r
}

// Run heartbeats every node each Interval until ctx ends; only a bad Config
// is an error.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	failing := false
	for {
		r := Beat(ctx, cfg.Client, cfg.Nodes, cfg.Interval)
		switch {
		case r.Failed > 0 && !failing && ctx.Err() == nil:
			cfg.Logf("heartbeat: %d of %d failed: %v", r.Failed, len(cfg.Nodes), r.FirstErr)
			failing = true
		case r.Failed == 0 && failing:
			cfg.Logf("heartbeat: all %d nodes heartbeat again", len(cfg.Nodes))
			failing = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
