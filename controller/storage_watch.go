package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/vigil-storage/vigil/fenceapi"
)

// connectivityPoll is how often the leader asks the fencing back end which
// engines still talk to it. Detection takes the threshold plus at most this.
const connectivityPoll = 250 * time.Millisecond

// isolation is the pure part of the storage watch: which nodes a report shows
// storage-isolated under threshold, given the nodes isolated before, with when
// their silence began on the manager's clock (now minus the silence the back end
// measured on its own).
//
// When more than half of the nodes the report lists (and at least two) are
// silent at once, the likelier cause is the storage side itself (the datapath
// cut off from the nodes, not the nodes gone), and fencing them all would take
// down every workload for nothing: then no node becomes isolated and suppressed
// is true. A node isolated before stays isolated while it is silent, suppressed
// or not: only positive evidence (a heartbeat, or an announced graceful stop)
// ends its isolation. Kubernetes' own verdicts still stand.
func isolation(r fenceapi.Report, threshold time.Duration, before map[string]bool, now time.Time) (isolated map[string]time.Time, suppressed bool) {
	silent := map[string]time.Time{}
	for _, n := range r.Nodes {
		silence, ok := r.Silence(n.Node)
		if ok && silence >= threshold {
			silent[n.Node] = now.Add(-silence)
		}
	}
	suppressed = len(r.Nodes) >= 2 && 2*len(silent) > len(r.Nodes)
	isolated = map[string]time.Time{}
	for name, since := range silent {
		if !suppressed || before[name] {
			isolated[name] = since
		}
	}
	return isolated, suppressed
}

// watchStorage polls the FenceBackend's connectivity report until ctx ends and turns
// it into isolation marks on the node tracker, queueing every node whose mark
// changed. Only the leader runs it. A back end that does not answer changes no
// mark: nothing can be fenced then anyway.
func (c *Controller) watchStorage(ctx context.Context) {
	if c.backend == nil {
		return
	}
	t := time.NewTicker(connectivityPoll)
	defer t.Stop()
	reachable, warnedSuppressed := true, false
	for {
		c.pollStorage(ctx, &reachable, &warnedSuppressed)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Controller) pollStorage(ctx context.Context, reachable, warnedSuppressed *bool) {
	log := klog.FromContext(ctx)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	rep, err := c.backend.Connectivity(pctx)
	cancel()
	if err != nil {
		c.metrics.DatapathReachable.Set(0)
		if *reachable && ctx.Err() == nil {
			log.Error(err, "fencing back end unreachable: storage isolation is not judged and nothing can be fenced until it answers", "driver", c.backend.Driver())
		}
		*reachable = false
		return
	}
	c.metrics.DatapathReachable.Set(1)
	if !*reachable {
		log.Info("fencing back end answers again", "driver", c.backend.Driver())
	}
	*reachable = true
	threshold := c.settings.DatapathConnectivityLossThreshold()
	now := c.now()
	before := c.nodes.isolatedNodes()
	isolated, suppressed := isolation(rep, threshold, before, now)
	if suppressed && !*warnedSuppressed {
		log.Info("most nodes are silent at the datapath at once: treating it as a storage-side problem, not judging any more node storage-isolated",
			"silentOver", threshold, "nodes", len(rep.Nodes))
	}
	*warnedSuppressed = suppressed
	for name := range before {
		if _, still := isolated[name]; !still {
			c.nodes.setIsolated(name, false, time.Time{})
			c.queue.Add(queueKey{kind: keyNode, name: name})
		}
	}
	for name, since := range isolated {
		if c.nodes.setIsolated(name, true, since) {
			ref := nodeRef(name)
			c.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventNodeStorageIsolated,
				fmt.Sprintf("node %s: its engine has sent no heartbeat to the datapath for %s (threshold %s)",
					name, now.Sub(since).Round(100*time.Millisecond), threshold))
			c.queue.Add(queueKey{kind: keyNode, name: name})
		}
	}
	c.metrics.NodesIsolated.Set(float64(len(isolated)))
	c.outage.setHeartbeating(rep, threshold)
	c.updateOutage(ctx)
	c.pollFailedVolumes(ctx)
	c.pollServerOutages(ctx)
}
