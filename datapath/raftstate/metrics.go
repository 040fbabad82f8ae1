package raftstate

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

// metricsSubsystem makes the group's metrics vigil_datapath_*.
const metricsSubsystem = "datapath"

// The states of vigil_datapath_servers{state}.
const (
	StateLeader      = "leader"
	StateFollower    = "follower"
	StateUnreachable = "unreachable"
)

// Metrics are the control group's Prometheus metrics, as one server sees
// the group.
type Metrics struct {
	leaderChanges prometheus.Counter
	commitSeconds prometheus.Histogram
	servers       *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg (nil:
// unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "leader_changes_total",
			Help: "Times this server saw the control group's leader change (an election won by another server, or by this one).",
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "commit_duration_seconds",
			Help:    "Time from proposing a change of the control state (create, grant, fence, release, leave, ...) to its commit by a majority and its application on this server; refused and uncommitted changes included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		servers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: vigil.MetricsNamespace, Subsystem: metricsSubsystem, Name: "servers",
			Help: "The control group's voting servers by state as this server sees them: the leader sees which followers miss its heartbeats (unreachable); " +
				"a follower counts the leader it knows and itself and the others as followers; a server that knows no leader counts the others as unreachable.",
		}, []string{"state"}),
	}
	if reg != nil {
		reg.MustRegister(m.leaderChanges, m.commitSeconds, m.servers)
	}
	return m
}

// serverCounts computes vigil_datapath_servers from this server's view:
// its role, the voters, and the followers that miss the leader's heartbeats.
func serverCounts(leads, knowsLeader bool, voters, unreachable int) map[string]int {
	switch {
	case leads:
		return map[string]int{StateLeader: 1, StateFollower: max(voters-1-unreachable, 0), StateUnreachable: unreachable}
	case knowsLeader:
		return map[string]int{StateLeader: 1, StateFollower: max(voters-1, 0), StateUnreachable: 0}
	}
	return map[string]int{StateLeader: 0, StateFollower: min(voters, 1), StateUnreachable: max(voters-1, 0)}
}

// watch follows the group for the metrics (m, when set) and GroupStatus:
// leader changes, and the followers that miss the leader's heartbeats (as
// leader). It returns the function that stops it.
func (g *Group) watch(m *Metrics) func() {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	g.raft.RegisterObserver(obs)
	var (
		mu          sync.Mutex
		last        raft.ServerID
		unreachable = map[raft.ServerID]bool{}
	)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case o := <-ch:
				mu.Lock()
				switch d := o.Data.(type) {
				case raft.LeaderObservation:
					if d.LeaderID != "" && d.LeaderID != last && m != nil {
						m.leaderChanges.Inc()
					}
					if d.LeaderID != "" {
						last = d.LeaderID
					}
					clear(unreachable)
				case raft.FailedHeartbeatObservation:
					unreachable[d.PeerID] = true
				case raft.ResumedHeartbeatObservation:
					delete(unreachable, d.PeerID)
				}
				mu.Unlock()
			}
		}
	}()
	g.unreachable = func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(unreachable)
	}
	g.unreachablePeers = func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]bool, len(unreachable))
		for id := range unreachable {
			out[string(id)] = true
		}
		return out
	}
	return func() {
		g.raft.DeregisterObserver(obs)
		close(done)
	}
}

// observeMetrics sets vigil_datapath_servers from this server's view; the
// server calls it before each scrape is served (UpdateMetrics).
func (g *Group) observeMetrics() {
	if g.metrics == nil {
		return
	}
	st := g.Status()
	leader, _ := g.Leader()
	unreachable := 0
	if g.unreachable != nil {
		unreachable = g.unreachable()
	}
	for state, n := range serverCounts(st.Role == StateLeader, leader != "", len(st.Voters), unreachable) {
		g.metrics.servers.WithLabelValues(state).Set(float64(n))
	}
}

// UpdateMetrics refreshes the gauges that describe the group now; the
// metrics endpoint calls it before each scrape.
func (g *Group) UpdateMetrics() { g.observeMetrics() }

// observeCommit records the time a change took from its proposal.
func (g *Group) observeCommit(start time.Time) {
	if g.metrics != nil {
		g.metrics.commitSeconds.Observe(time.Since(start).Seconds())
	}
}

// GroupStatus is every member recorded in the group (AddServer), sorted by
// id, as this server sees it: its own row complete (role, last contact with
// the leader, applied index); as leader, the others as followers or, when
// they miss its heartbeats, unreachable; as follower, the leader it knows
// marked, the others' roles unknown here (empty).
func (g *Group) GroupStatus() []datapath.ServerStatus {
	st := g.Status()
	leader, _ := g.Leader()
	unreachable := map[string]bool{}
	if g.unreachablePeers != nil {
		unreachable = g.unreachablePeers()
	}
	out := []datapath.ServerStatus{}
	members := g.fsm.Servers()
	if self := g.self.Load(); self != nil && !slices.ContainsFunc(members, func(m Server) bool { return m.ID == g.id }) {
		// Not recorded yet (a follower since its start): its own row all the same.
		members = append(members, *self)
		sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	}
	for _, m := range members {
		s := datapath.ServerStatus{ID: m.ID, Node: m.Node, Address: m.DatapathAddress, RaftAddress: m.RaftAddress}
		switch {
		case m.ID == g.id:
			s.Role, s.LastContact, s.AppliedIndex, s.Self = st.Role, st.LastContact, st.AppliedIndex, true
			if self := g.self.Load(); s.Node == "" && self != nil {
				s.Node = self.Node // recorded once it leads; its own all the same
			}
		case m.ID == leader:
			s.Role = datapath.RoleLeader
		case st.Role == StateLeader && unreachable[m.ID]:
			s.Role = datapath.RoleUnreachable
		case st.Role == StateLeader:
			s.Role = datapath.RoleFollower
		}
		out = append(out, s)
	}
	return out
}
