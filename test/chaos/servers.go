package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
)

// A run with CHAOS_DATAPATH_SERVERS=3 has the datapath as a group of three
// servers, one a process of each of node-1 to node-3 (sandbox's
// StackConfig.DatapathServers). This file polls the group and injects the
// ServerKinds.

// Bounds of the group, in the sandbox's timings.
const (
	// leaderBound: a group that lost its leader (power cut, partition)
	// has a new one within this.
	leaderBound = 20 * time.Second
	// groupBound: a server started again or healed is back in the group
	// (answers as leader or follower, caught up with the log as it was
	// when it left) within this.
	groupBound = 60 * time.Second
	// serverStopTimeout: a server stopped with SIGTERM is gone within this,
	// or it gets SIGKILL (and the cycle a violation).
	serverStopTimeout = 30 * time.Second
	// probeNode is the node name the partition's probe volumes are granted
	// to: no node of the sandbox, so that no engine or manager acts on it.
	probeNode = "chaos-probe"
)

// groupState is what the harness saw of the group, and a client of each
// server alone (its node's name the key), kept for the run: a poll every
// 500 ms through fresh connections cost more than a second each.
type groupState struct {
	mu      sync.Mutex
	last    groupPoll
	watch   *epochWatch
	clients map[string]*dpclient.Client
	// pollMu makes the background poll and a fault's own polls take turns.
	pollMu sync.Mutex
}

func (g *groupState) record(p groupPoll) {
	g.watch.observe(p)
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.Leader != "" || g.last.At.IsZero() {
		g.last = p
	}
}

// sets is, by volume id, its replica set, as last seen.
func (g *groupState) sets() map[string]datapath.ReplicaSet {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last.Sets
}

func (g *groupState) close() {
	for _, c := range g.clients {
		c.Close()
	}
}

// dialGroup dials the stack's datapath as the manager: all its servers, the
// first dialled first.
func dialGroup(ctx context.Context, stk *sandbox.Stack, opts ...dpclient.Option) (*dpclient.Client, error) {
	addrs := stk.DatapathAddrs()
	opts = append([]dpclient.Option{dpclient.WithTokenFile(stk.TokenFile), dpclient.WithCAFile(stk.CAFile),
		dpclient.WithServers(addrs[1:]...)}, opts...)
	return dpclient.Dial(ctx, addrs[0], "", opts...)
}

// dialServer dials one server only, as the manager: no other server is
// tried, so what it answers is its own answer.
func (h *Harness) dialServer(ctx context.Context, srv sandbox.StackServer, timeout time.Duration) (*dpclient.Client, error) {
	return dpclient.Dial(ctx, srv.Address, "", dpclient.WithTokenFile(h.stk.TokenFile), dpclient.WithCAFile(h.stk.CAFile),
		dpclient.WithTimeout(timeout), dpclient.WithRetries(0))
}

// newGroupState dials each server of the stack alone.
func (h *Harness) newGroupState(ctx context.Context) (*groupState, error) {
	g := &groupState{watch: newEpochWatch(), clients: map[string]*dpclient.Client{}}
	for _, srv := range h.stk.DatapathServers {
		c, err := h.dialServer(ctx, srv, time.Second)
		if err != nil {
			g.close()
			return nil, fmt.Errorf("datapath server on %s: %w", srv.Node, err)
		}
		g.clients[srv.Node] = c
	}
	return g, nil
}

// selves asks every server at once, within a second, for its own row of
// the group (datapath.ServerStatus with Self set); a server that does not
// answer is RoleUnreachable.
func (h *Harness) selves(ctx context.Context) map[string]datapath.ServerStatus {
	out := make(map[string]datapath.ServerStatus, len(h.group.clients))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, c := range h.group.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := datapath.ServerStatus{Node: node, Role: datapath.RoleUnreachable}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if rep, err := c.Servers(cctx); err == nil {
				for _, m := range rep.Servers {
					if m.Self {
						st = m
						st.Node = node
					}
				}
			}
			mu.Lock()
			out[node] = st
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// leaderOf is the node of the one server that says it leads, "" if none
// does or more than one (a cut-off leader that has not noticed yet).
func leaderOf(sts map[string]datapath.ServerStatus) string {
	leader := ""
	for node, s := range sts {
		if s.Role == datapath.RoleLeader {
			if leader != "" {
				return ""
			}
			leader = node
		}
	}
	return leader
}

// pollGroup asks every server for its role and the one that says it leads
// for the group's volumes (the leader answers them only when current), and
// checks their epochs (epochWatch).
func (h *Harness) pollGroup(ctx context.Context) {
	if h.group == nil || ctx.Err() != nil {
		return
	}
	h.group.pollMu.Lock()
	defer h.group.pollMu.Unlock()
	sts := h.selves(ctx)
	p := groupPoll{Roles: map[string]string{}}
	for node, s := range sts {
		p.Roles[node] = s.Role
		if s.Role != datapath.RoleLeader || p.Leader != "" {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		vols, err := h.group.clients[node].GroupVolumes(cctx)
		cancel()
		if err != nil {
			continue // a leader that lost its majority: it cannot answer current
		}
		p.Leader, p.Epochs, p.Sets = node, map[string]uint64{}, map[string]datapath.ReplicaSet{}
		for _, v := range vols {
			p.Epochs[v.ID], p.Sets[v.ID] = v.Epoch, v.ReplicaSet()
		}
	}
	p.At = time.Now()
	h.group.record(p)
}

// serverOf is the stack's server on node.
func (h *Harness) serverOf(node string) sandbox.StackServer {
	for _, s := range h.stk.DatapathServers {
		if s.Node == node {
			return s
		}
	}
	return sandbox.StackServer{Node: node}
}

// awaitLeader waits up to leaderBound for one server, not on node not, to
// say it leads, and returns its row.
func (h *Harness) awaitLeader(ctx context.Context, not string) (datapath.ServerStatus, error) {
	var leader datapath.ServerStatus
	err := sandbox.Poll(ctx, leaderBound, "a datapath leader not on "+not, func(ctx context.Context) (bool, string, error) {
		sts := h.selves(ctx)
		l := leaderOf(sts)
		leader = sts[l]
		return l != "" && l != not, describeSelves(sts), nil
	}, nil)
	return leader, err
}

func describeSelves(sts map[string]datapath.ServerStatus) string {
	nodes := make([]string, 0, len(sts))
	for n := range sts {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	rows := make([]string, len(nodes))
	for i, n := range nodes {
		rows[i] = fmt.Sprintf("%s %s applied %d", n, sts[n].Role, sts[n].AppliedIndex)
	}
	return strings.Join(rows, ", ")
}

// awaitGroup waits up to groupBound until every server answers as leader or
// follower, exactly one of them leads, and node's server is back in the
// group: it leads, or it follows and heard from the leader after since; and
// it applied at least applied (the log as it was when it left).
func (h *Harness) awaitGroup(ctx context.Context, node string, applied uint64, since time.Time) error {
	return sandbox.Poll(ctx, groupBound, node+"'s server back in the group", func(ctx context.Context) (bool, string, error) {
		sts := h.selves(ctx)
		for _, s := range sts {
			if s.Role != datapath.RoleLeader && s.Role != datapath.RoleFollower {
				return false, describeSelves(sts), nil
			}
		}
		s := sts[node]
		back := s.AppliedIndex >= applied && (s.Role == datapath.RoleLeader || s.LastContact.After(since))
		return back && leaderOf(sts) != "", describeSelves(sts), nil
	}, nil)
}

// leaderApplied is the leader's node and applied index now ("", 0 without one).
func (h *Harness) leaderApplied(ctx context.Context) (string, uint64) {
	sts := h.selves(ctx)
	l := leaderOf(sts)
	return l, sts[l].AppliedIndex
}

// runServerFault injects a fault of ServerKinds.
func (h *Harness) runServerFault(ctx context.Context, f Fault, r *CycleResult, before map[string]string) error {
	switch f.Kind {
	case DatapathLeaderPowerCut:
		return h.runLeaderPowerCut(ctx, f, r, before)
	case DatapathServerPartition:
		return h.runServerPartition(ctx, f, r)
	case DatapathRollingRestart:
		return h.runRollingRestart(ctx, f, r)
	}
	return fmt.Errorf("fault %s is no fault of the datapath's servers", f.Kind)
}

// note records one fact of a server fault in the cycle's result and the log.
func (h *Harness) note(r *CycleResult, format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.Group = append(r.Group, s)
	h.Logf("chaos: cycle %d: %s", r.Fault.Cycle, s)
}

// awaitTransientEnd: after a fault that needs no failover, every writer
// writes again within progressBound of the fault's end.
func (h *Harness) awaitTransientEnd(ctx context.Context, r *CycleResult) error {
	if err := h.awaitProgress(ctx, r.FaultEnd, progressBound); err != nil {
		return fmt.Errorf("writers did not write again within %s of the fault's end: %w", progressBound, err)
	}
	r.Recovery = h.firstAcksAfter(r.FaultEnd, nil)
	return nil
}

// runRollingRestart stops each server in turn with SIGTERM (a leader hands
// its leadership over), starts it again and waits for it to be back in the
// group before the next.
func (h *Harness) runRollingRestart(ctx context.Context, f Fault, r *CycleResult) error {
	nodes := make([]string, len(h.stk.DatapathServers))
	for i, s := range h.stk.DatapathServers {
		nodes[i] = s.Node
	}
	sort.Strings(nodes)
	first := max(0, slices.Index(nodes, f.Node))
	var errs []string
	for i := range nodes {
		node := nodes[(first+i)%len(nodes)]
		h.pollGroup(ctx)
		leader, applied := h.leaderApplied(ctx)
		t0 := time.Now()
		res, err := h.sb.RestartProcess(node, sandbox.StackDatapath, serverStopTimeout)
		if err != nil {
			errs = append(errs, fmt.Sprintf("restart the server on %s: %v", node, err))
			break
		}
		if res.Killed {
			errs = append(errs, fmt.Sprintf("the server on %s outlived SIGTERM by %s and was SIGKILLed", node, serverStopTimeout))
		}
		if err := h.awaitGroup(ctx, node, applied, t0); err != nil {
			errs = append(errs, err.Error())
			break
		}
		h.pollGroup(ctx)
		now, _ := h.leaderApplied(ctx)
		h.note(r, "%s (leader before: %s) stopped in %.2fs, back in the group %.2fs after SIGTERM; leader now %s",
			node, leader, res.Stopped.Seconds(), time.Since(t0).Seconds(), now)
	}
	r.FaultEnd = time.Now()
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return h.awaitTransientEnd(ctx, r)
}
