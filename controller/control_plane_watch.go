package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/vigil-storage/vigil/fenceapi"
)

// defaultLeaseDuration is a node Lease's duration when it names none (the
// kubelet's default).
const defaultLeaseDuration = 40 * time.Second

// controlPlaneWatch holds what the control-plane outage rule reads besides the
// Node cache, and the holds in force: which engines heartbeat (the last
// connectivity report that answered), when each node Lease was last seen
// renewed on the manager's own clock (never the kubelet's), and which nodes
// are held. The storage watch refreshes it at every poll; a fence on
// Kubernetes' verdict refreshes it first.
type controlPlaneWatch struct {
	mu           sync.Mutex
	heartbeating map[string]bool
	leases       map[string]leaseSeen
	holds        map[string]outageHold
}

// leaseSeen is one node Lease as the manager saw it.
type leaseSeen struct {
	renew    time.Time // spec.renewTime as written: compared, never measured against
	duration time.Duration
	seenAt   time.Time // the manager's clock when renew last changed
}

func newControlPlaneWatch() *controlPlaneWatch {
	return &controlPlaneWatch{leases: map[string]leaseSeen{}, holds: map[string]outageHold{}}
}

// observeLease notes a node Lease; a renewal (a new renewTime) is dated now.
func (w *controlPlaneWatch) observeLease(l *coordinationv1.Lease, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var renew time.Time
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Time
	}
	d := defaultLeaseDuration
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	prev, ok := w.leases[l.Name]
	if ok && prev.renew.Equal(renew) {
		prev.duration = d
		w.leases[l.Name] = prev
		return
	}
	w.leases[l.Name] = leaseSeen{renew: renew, duration: d, seenAt: now}
}

func (w *controlPlaneWatch) forgetLease(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.leases, name)
}

// leaseStale reports whether the node's Lease was not seen renewed for half
// its duration. No Lease seen: not stale (nothing to say). Call with mu held.
func (w *controlPlaneWatch) leaseStale(name string, now time.Time) bool {
	l, ok := w.leases[name]
	return ok && now.Sub(l.seenAt) > l.duration/2
}

// setHeartbeating records which engines heartbeat in a report that answered:
// silent for less than threshold, and not announcing a graceful stop.
func (w *controlPlaneWatch) setHeartbeating(rep fenceapi.Report, threshold time.Duration) {
	hb := make(map[string]bool, len(rep.Nodes))
	for _, n := range rep.Nodes {
		if silence, ok := rep.Silence(n.Node); ok && silence < threshold {
			hb[n.Node] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.heartbeating = hb
}

// held reports whether the node is held in a control-plane outage.
func (w *controlPlaneWatch) held(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.holds[name]
	return ok
}

func (c *Controller) onLease(obj any) {
	if l, ok := obj.(*coordinationv1.Lease); ok {
		c.outage.observeLease(l, c.now())
	}
}

func (c *Controller) onLeaseDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		c.outage.forgetLease(l.Name)
	}
}

// updateOutage applies the control-plane outage rule to every cached node: a
// node newly held gets a Warning Event, and every node whose hold began or
// ended is queued to be judged again.
func (c *Controller) updateOutage(ctx context.Context) {
	nodes, err := c.listers.nodes.List(everything)
	if err != nil {
		return
	}
	pct := c.settings.ControlPlaneOutageThreshold()
	now := c.now()
	w := c.outage
	w.mu.Lock()
	defer w.mu.Unlock()
	in := make([]outageNode, 0, len(nodes))
	ready := map[string]bool{}
	for _, n := range nodes {
		on := outageNode{Name: n.Name, Zone: n.Labels[corev1.LabelTopologyZone], Ready: isNodeReady(n),
			LeaseStale: w.leaseStale(n.Name, now), Heartbeating: w.heartbeating[n.Name]}
		ready[n.Name] = on.Ready
		in = append(in, on)
	}
	d := decideOutage(in, w.holds, pct, now)
	log := klog.FromContext(ctx)
	if len(d.Scopes) > 0 && len(w.holds) == 0 {
		log.Info("control-plane outage: nodes cut off from the API server while their engines heartbeat; "+
			"nothing on them is fenced or reaped on Kubernetes' verdict", "scopes", describeScopes(d.Scopes), "thresholdPercent", pct)
	}
	for name := range w.holds {
		if _, still := d.Held[name]; !still {
			log.Info("node no longer held in a control-plane outage", "node", name)
			c.queue.Add(queueKey{kind: keyNode, name: name})
		}
	}
	for name := range d.Held {
		if _, was := w.holds[name]; was {
			continue
		}
		how := "not Ready"
		if ready[name] {
			how = "Ready, but its Lease is no longer renewed"
		}
		ref := nodeRef(name)
		c.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventControlPlaneOutage,
			fmt.Sprintf("node %s: Kubernetes calls it %s while its engine still heartbeats to the datapath, and so do others (%s; threshold %d%%): "+
				"taken for a control-plane outage, not a node failure; nothing on the node is fenced or reaped on Kubernetes' verdict while it lasts",
				name, how, describeScopes(d.Scopes), pct))
		c.queue.Add(queueKey{kind: keyNode, name: name})
	}
	w.holds = d.Held
	outage := 0.0
	if len(d.Scopes) > 0 {
		outage = 1
	}
	c.metrics.ControlPlaneOutage.Set(outage)
	c.metrics.NodesHeldOutage.Set(float64(len(d.Held)))
}
