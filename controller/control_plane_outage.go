package controller

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The control-plane outage rule: Kubernetes' verdict on a node is evidence only
// as long as the control plane that gives it works. When a load balancer in
// front of the API server fails for the kubelets, every node turns Unknown at
// once while every one of them is alive; the node lifecycle controller then
// stops evicting (full or partial disruption of a zone, its
// --unhealthy-zone-threshold). Vigil has better evidence than Kubernetes: the
// engines' heartbeats at the datapath. Where enough nodes are cut off from the
// API server while their engines still heartbeat, nothing is fenced or reaped
// on Kubernetes' verdict. One such node alone is a zombie and is fenced as
// before; a node silent at the datapath keeps its own rule (storage_watch.go).

// outageMinNodes is how many nodes must be cut off while heartbeating before a
// share of a zone or of the cluster counts as an outage: fewer are zombies,
// fenced one by one (the node lifecycle controller's partial disruption also
// needs more than two).
const outageMinNodes = 3

// outageSettle is how long a node held in an outage stays held once neither its
// zone nor the cluster qualifies any more, while Kubernetes still calls it
// down: when the control plane comes back, kubelets report again one by one,
// and the last ones must not be fenced because the first ones are back. The
// node lifecycle controller restarts its timers for the same reason when it
// leaves full disruption. It is the kubelet's default Lease duration.
const outageSettle = 40 * time.Second

// outageNode is what the outage rule knows about one node.
type outageNode struct {
	Name string
	// Zone is the node's topology.kubernetes.io/zone label; "" when it has
	// none (the unlabelled nodes form one zone).
	Zone string
	// Ready: Kubernetes' Ready condition is True (or not reported).
	Ready bool
	// LeaseStale: the node's Lease was not seen renewed for half its duration,
	// on the manager's clock. A kubelet cut off from the API server shows this
	// long before the node lifecycle controller calls it Unknown.
	LeaseStale bool
	// Heartbeating: its engine heartbeats to the datapath (silent for less than
	// the connectivity-loss threshold in the last report).
	Heartbeating bool
}

// cutOff reports whether Kubernetes has lost (or is losing) the node.
func (n *outageNode) cutOff() bool { return !n.Ready || n.LeaseStale }

// alive reports whether the node is cut off from Kubernetes while its engine
// proves it alive: the only nodes the rule can hold.
func (n *outageNode) alive() bool { return n.cutOff() && n.Heartbeating }

// outageScope is one zone, or the whole cluster, as the rule counts it.
type outageScope struct {
	Cluster bool
	Zone    string // with !Cluster; "" is the unlabelled nodes
	Nodes   int    // every node of the scope
	Alive   int    // cut off while heartbeating
	Ready   int    // not cut off
}

func (s *outageScope) count(n *outageNode) {
	s.Nodes++
	switch {
	case n.alive():
		s.Alive++
	case !n.cutOff():
		s.Ready++
	}
}

// qualifies is the rule for one scope: at least outageMinNodes nodes cut off
// while heartbeating, and at least thresholdPct percent of the scope's nodes;
// or no node of it Ready while one is cut off and heartbeating, for the whole
// cluster, or for a zone of at least outageMinNodes nodes (a one-node zone
// whose node is a zombie is still a zombie).
func (s *outageScope) qualifies(thresholdPct int) bool {
	if s.Alive == 0 {
		return false
	}
	if s.Alive >= outageMinNodes && s.Alive*100 >= thresholdPct*s.Nodes {
		return true
	}
	return s.Ready == 0 && (s.Cluster || s.Nodes >= outageMinNodes)
}

func (s *outageScope) String() string {
	name := "the cluster"
	switch {
	case !s.Cluster && s.Zone == "":
		name = "the nodes without a zone label"
	case !s.Cluster:
		name = "zone " + s.Zone
	}
	return fmt.Sprintf("%s: %d of %d nodes cut off from the API server while their engines heartbeat, %d Ready", name, s.Alive, s.Nodes, s.Ready)
}

// outageHold is one node held in an outage.
type outageHold struct {
	// ScopeEndedAt is when neither the node's zone nor the cluster qualified
	// any more while the node was still cut off; zero while one qualifies.
	ScopeEndedAt time.Time
}

// outageDecision is decideOutage's answer.
type outageDecision struct {
	// Held are the nodes held: nothing on them is fenced or reaped on
	// Kubernetes' verdict.
	Held map[string]outageHold
	// Scopes are the scopes that qualify now, the cluster first, then the
	// zones by name.
	Scopes []outageScope
}

// decideOutage applies the control-plane outage rule to every node. It is
// pure. A node is held while it is cut off and heartbeating and its zone or the
// cluster qualifies; once neither does, a node held before stays held for
// outageSettle while it is still cut off and heartbeating. A node that is back
// (Ready, its Lease fresh) or silent at the datapath is never held.
func decideOutage(nodes []outageNode, before map[string]outageHold, thresholdPct int, now time.Time) outageDecision {
	cluster := outageScope{Cluster: true}
	zones := map[string]*outageScope{}
	for i := range nodes {
		n := &nodes[i]
		z := zones[n.Zone]
		if z == nil {
			z = &outageScope{Zone: n.Zone}
			zones[n.Zone] = z
		}
		z.count(n)
		cluster.count(n)
	}
	d := outageDecision{Held: map[string]outageHold{}}
	if cluster.qualifies(thresholdPct) {
		d.Scopes = append(d.Scopes, cluster)
	}
	names := make([]string, 0, len(zones))
	for name := range zones {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if zones[name].qualifies(thresholdPct) {
			d.Scopes = append(d.Scopes, *zones[name])
		}
	}
	for i := range nodes {
		n := &nodes[i]
		if !n.alive() {
			continue
		}
		if cluster.qualifies(thresholdPct) || zones[n.Zone].qualifies(thresholdPct) {
			d.Held[n.Name] = outageHold{}
			continue
		}
		h, was := before[n.Name]
		if !was {
			continue
		}
		if h.ScopeEndedAt.IsZero() {
			h.ScopeEndedAt = now
		}
		if now.Sub(h.ScopeEndedAt) < outageSettle {
			d.Held[n.Name] = h
		}
	}
	return d
}

// describeScopes is the scopes of a decision in one line, for Events and logs.
func describeScopes(scopes []outageScope) string {
	parts := make([]string, 0, len(scopes))
	for i := range scopes {
		parts = append(parts, scopes[i].String())
	}
	return strings.Join(parts, "; ")
}
