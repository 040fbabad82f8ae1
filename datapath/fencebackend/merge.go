package fencebackend

import (
	"context"
	"math"
	"sort"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/fenceapi"
)

// ServerNodes is implemented by a Datapath of several servers
// (datapath/client.Client given the group's servers): the Nodes report of
// each server that answered, and an error only when none did.
type ServerNodes interface {
	ServerNodes(ctx context.Context) ([]datapath.NodesReport, error)
}

// report is a datapath Nodes report as the fence API's connectivity report.
func report(r datapath.NodesReport) fenceapi.Report {
	out := fenceapi.Report{Now: r.Now, Since: r.Started, Nodes: make([]fenceapi.NodeConnectivity, len(r.Nodes))}
	for i, n := range r.Nodes {
		out.Nodes[i] = fenceapi.NodeConnectivity{Node: n.Node, LastHeartbeat: n.LastSeen(), LeavingUntil: n.LeavingUntil}
	}
	return out
}

// mergeReports is the connectivity of the datapath's group from the reports
// of the servers that answered (at least one; a server that did not answer
// is simply absent, never read as "every node is silent"): a node is as
// silent as the server that heard it last says, and leaving when any server
// says it announced a stop that has not run out. Each report's times are on
// its own server's clock, so what is merged is durations measured there
// (silence, time left of a stop, time since the start); the result is on
// the first report's clock, its Since the longest-running server's start,
// and its nodes sorted by name. A node only some servers list is taken from
// those.
func mergeReports(reps []fenceapi.Report) fenceapi.Report {
	if len(reps) == 1 {
		return reps[0]
	}
	type heard struct {
		silence time.Duration // the least, or math.MaxInt64: only leaving
		left    time.Duration // the most time left of an announced stop
		leaving bool
	}
	nodes := map[string]*heard{}
	var uptime time.Duration
	for _, r := range reps {
		uptime = max(uptime, r.Now.Sub(r.Since))
		for _, n := range r.Nodes {
			h := nodes[n.Node]
			if h == nil {
				h = &heard{silence: math.MaxInt64}
				nodes[n.Node] = h
			}
			if n.LeavingUntil.After(r.Now) {
				h.leaving, h.left = true, max(h.left, n.LeavingUntil.Sub(r.Now))
				continue
			}
			if d, ok := r.Silence(n.Node); ok {
				h.silence = min(h.silence, d)
			}
		}
	}
	now := reps[0].Now
	out := fenceapi.Report{Now: now, Since: now.Add(-uptime), Nodes: make([]fenceapi.NodeConnectivity, 0, len(nodes))}
	for name, h := range nodes {
		n := fenceapi.NodeConnectivity{Node: name}
		if h.silence != math.MaxInt64 {
			n.LastHeartbeat = now.Add(-h.silence)
		}
		if h.leaving {
			n.LeavingUntil = now.Add(h.left)
		}
		out.Nodes = append(out.Nodes, n)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
	return out
}
