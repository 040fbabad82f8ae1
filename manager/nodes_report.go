package manager

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/fenceapi"
	"github.com/vigil-storage/vigil/httpapi"
)

// nodesInput is everything the nodes view is made of, read at one instant.
type nodesInput struct {
	// Nodes are the Node objects (the informer's slim copies).
	Nodes []*corev1.Node
	// Leading: this replica holds the Lease, so Statuses are the verdicts in
	// force. A standby's controllers judge nothing.
	Leading  bool
	Statuses []controller.NodeStatus
	// Storage is the last poll of the datapath; nil when the manager runs
	// without one.
	Storage *storagePoll
	// PVs maps a CSI volume handle of Vigil's driver to its PV's name.
	PVs map[string]string
}

// storagePoll is what the datapath said at one poll.
type storagePoll struct {
	// At is the manager's clock when the answer came.
	At time.Time
	// Err is why the poll failed (nothing else is set then).
	Err error
	// Conn is each node's link to the datapath, by node.
	Conn map[string]nodeLink
	// Grants are each node's rows, by node.
	Grants map[string][]fenceapi.Grant
	// Servers are the datapath's servers, each unreachable when it did not
	// answer; none for a datapath of one server.
	Servers []fenceapi.Server
}

// nodeLink is one node's link to the datapath, on the manager's clock.
type nodeLink struct {
	// LastBeat is the node's last heartbeat (or I/O), moved onto the manager's
	// clock; zero when it has not spoken since the datapath started.
	LastBeat time.Time
	// Leaving: its engine announced a graceful stop that has not run out.
	Leaving bool
}

// linkOf reads a connectivity report taken when the manager's clock read at:
// times on the datapath's clock become times on the manager's, so ages hold
// whatever the two clocks say.
func linkOf(r fenceapi.Report, at time.Time) map[string]nodeLink {
	out := make(map[string]nodeLink, len(r.Nodes))
	for _, n := range r.Nodes {
		l := nodeLink{Leaving: n.LeavingUntil.After(r.Now)}
		if !n.LastHeartbeat.IsZero() {
			l.LastBeat = at.Add(n.LastHeartbeat.Sub(r.Now))
		}
		out[n.Node] = l
	}
	return out
}

// Notes of the nodes view.
const (
	noteStandby = "This replica is a standby: only the leader judges nodes, so the verdicts here are the Node objects' Ready condition. " +
		"The leader's page shows Vigil's own verdicts."
	noteNoDatapath = "The manager runs without --datapath: there are no heartbeats, fences or grants to show, " +
		"and Vigil fences nothing (only Kubernetes' own proofs count: a deleted node, the out-of-service taint)."
	noteDatapathDown = "The datapath could not be read at %s: %v. Heartbeats, fences and grants are not shown until it answers."
)

// nodesReport builds the nodes view at now. It is pure: every input is read
// before, and now is a parameter.
func nodesReport(in nodesInput, now time.Time) httpapi.NodesReport {
	rep := httpapi.NodesReport{Verdicts: httpapi.VerdictsKubernetes, Datapath: httpapi.DatapathNone, Nodes: []httpapi.NodeView{}}
	if in.Leading {
		rep.Verdicts = httpapi.VerdictsController
	} else {
		rep.Notes = append(rep.Notes, noteStandby)
	}
	storage := in.Storage
	switch {
	case storage == nil:
		rep.Notes = append(rep.Notes, noteNoDatapath)
	case storage.Err != nil:
		rep.Datapath = httpapi.DatapathUnavailable
		rep.Notes = append(rep.Notes, fmt.Sprintf(noteDatapathDown, storage.At.UTC().Format("15:04:05Z"), storage.Err))
		storage = nil
	default:
		rep.Datapath = httpapi.DatapathConnected
	}
	byName := map[string]*corev1.Node{}
	for _, n := range in.Nodes {
		byName[n.Name] = n
	}
	statuses := map[string]*controller.NodeStatus{}
	if in.Leading {
		for i := range in.Statuses {
			st := &in.Statuses[i]
			statuses[st.Name] = st
			if byName[st.Name] == nil {
				byName[st.Name] = nil // deleted, still judged
			}
		}
	}
	for name, n := range byName {
		v := nodeView(name, n, statuses[name], in.Leading)
		if storage != nil {
			addStorage(&v, storage, statuses[name], in.PVs, now)
		}
		rep.Nodes = append(rep.Nodes, v)
	}
	sort.Slice(rep.Nodes, func(i, j int) bool { return rep.Nodes[i].Name < rep.Nodes[j].Name })
	return rep
}

// nodeView is a node's verdict: the controllers' when this replica leads and
// they have an opinion, else the Node's Ready condition.
func nodeView(name string, n *corev1.Node, st *controller.NodeStatus, leading bool) httpapi.NodeView {
	v := httpapi.NodeView{Name: name, Volumes: []httpapi.VolumeGrant{}}
	if n != nil {
		v.Unschedulable = n.Spec.Unschedulable
		v.Tainted = hasTaint(n, vigil.FencedTaintKey)
	}
	switch {
	case st != nil:
		controllerVerdict(&v, st)
	case n == nil:
		v.Verdict, v.Reason = httpapi.VerdictUnknown, "no Node object"
	default:
		kubernetesVerdict(&v, n)
		if leading && v.Verdict == httpapi.VerdictReady {
			v.Verdict = httpapi.VerdictUp
		}
	}
	return v
}

// controllerVerdict copies the controllers' opinion of a node.
func controllerVerdict(v *httpapi.NodeView, st *controller.NodeStatus) {
	v.Reason = st.State.String()
	var since time.Time
	switch {
	case st.State.Down():
		v.Verdict, since = httpapi.VerdictDown, st.Since
	case st.State == controller.NodeNotReadyDebouncing, st.State == controller.NodeHeldControlPlaneOutage:
		v.Verdict, since = httpapi.VerdictSuspect, st.NotReadySince
	case st.State == controller.NodeStorageIsolated:
		v.Verdict, since = httpapi.VerdictSuspect, st.SilentSince
	default:
		v.Verdict = httpapi.VerdictUp
	}
	v.Since = timePtr(since)
	if !st.FencedAt.IsZero() {
		v.Fenced, v.FencedAt = true, timePtr(st.FencedAt)
	}
}

// kubernetesVerdict reads a Node's Ready condition: ready, not-ready or
// unknown, and since its last transition; the out-of-service taint is named.
func kubernetesVerdict(v *httpapi.NodeView, n *corev1.Node) {
	v.Verdict, v.Reason = httpapi.VerdictUnknown, "no Ready condition"
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		v.Reason = "Ready=" + string(c.Status)
		switch c.Status {
		case corev1.ConditionTrue:
			v.Verdict = httpapi.VerdictReady
		case corev1.ConditionFalse:
			v.Verdict = httpapi.VerdictNotReady
		}
		if !c.LastTransitionTime.IsZero() {
			v.Since = timePtr(c.LastTransitionTime.UTC())
		}
	}
	if hasTaint(n, vigil.OutOfServiceTaintKey) {
		v.Reason += ", out-of-service"
	}
}

// addStorage fills in what the datapath says of the node: heartbeat age,
// graceful stop, and its rows. Live grants are always shown; rows it was fenced
// on only while this failure lasts (down, fenced by Vigil or still tainted),
// since the datapath keeps a fenced row until the node is granted that volume
// again; released rows never.
func addStorage(v *httpapi.NodeView, s *storagePoll, st *controller.NodeStatus, pvs map[string]string, now time.Time) {
	if l, ok := s.Conn[v.Name]; ok {
		if !l.LastBeat.IsZero() {
			age := max(now.Sub(l.LastBeat), 0).Seconds()
			v.HeartbeatAgeSeconds = &age
		}
		v.Leaving = l.Leaving
		if l.Leaving && v.Verdict != httpapi.VerdictDown {
			v.Verdict, v.Reason = httpapi.VerdictLeaving, "graceful stop announced"
		}
	}
	failure := v.Tainted || v.Fenced || (st != nil && st.Down)
	fencedRows := false
	for _, g := range s.Grants[v.Name] {
		switch {
		case g.State.Live(): // granted, or unknown: its server does not answer
		case g.State == fenceapi.StateFenced && failure:
			fencedRows = true
		default:
			continue
		}
		v.Volumes = append(v.Volumes, httpapi.VolumeGrant{Handle: g.Handle, PV: pvs[g.Handle], Epoch: g.Epoch, State: string(g.State)})
	}
	// A standby, or a leader that has not fenced in this failure yet, still
	// sees the fence the datapath holds on a node that has not cleaned up.
	if fencedRows && v.Tainted {
		v.Fenced = true
	}
	v.DatapathServer = serverOn(v.Name, s.Servers)
}

// serverOn is the datapath server running on node, or nil.
func serverOn(node string, servers []fenceapi.Server) *httpapi.DatapathServer {
	for _, s := range servers {
		if s.Node == node {
			return &httpapi.DatapathServer{ID: s.ID, Address: s.Address, Role: s.Role, LastContact: timePtr(s.LastContact)}
		}
	}
	return nil
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// pvsByHandle maps the CSI handle of every PV of Vigil's driver to the PV's name.
func pvsByHandle(pvs []*corev1.PersistentVolume) map[string]string {
	out := make(map[string]string, len(pvs))
	for _, pv := range pvs {
		if csi := pv.Spec.CSI; csi != nil && csi.Driver == vigil.DriverName {
			out[csi.VolumeHandle] = pv.Name
		}
	}
	return out
}
