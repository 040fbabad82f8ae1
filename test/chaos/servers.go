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

// groupState is what the harness saw of the group.
type groupState struct {
	mu    sync.Mutex
	last  groupPoll
	watch *epochWatch
}

func (g *groupState) record(p groupPoll) {
	g.watch.observe(p)
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.Leader != "" || g.last.At.IsZero() {
		g.last = p
	}
}

// holders is, by volume id, the node of the server holding its data, as last
// seen.
func (g *groupState) holders() map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last.Holders
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

// pollGroup asks every server for its role and the one that says it leads
// for the group's volumes (the leader answers them only when current), and
// checks their epochs (epochWatch).
func (h *Harness) pollGroup(ctx context.Context) {
	if h.group == nil || ctx.Err() != nil {
		return
	}
	sts, err := h.sb.DatapathServers(ctx, time.Second)
	if err != nil {
		return
	}
	p := groupPoll{Roles: map[string]string{}}
	for _, s := range sts {
		p.Roles[s.Node] = s.Role
	}
	for _, s := range sts {
		if s.Role != datapath.RoleLeader {
			continue
		}
		vols, err := h.groupVolumesAt(ctx, s.StackServer)
		if err != nil {
			continue // a leader that lost its majority: it cannot answer current
		}
		p.Leader, p.Epochs, p.Holders = s.Node, map[string]uint64{}, map[string]string{}
		for _, v := range vols {
			p.Epochs[v.ID], p.Holders[v.ID] = v.Epoch, v.Server
		}
		break
	}
	p.At = time.Now()
	h.group.record(p)
}

func (h *Harness) groupVolumesAt(ctx context.Context, srv sandbox.StackServer) ([]datapath.GroupVolume, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := h.dialServer(ctx, srv, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.GroupVolumes(ctx)
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

// awaitLeader waits up to leaderBound for a server not on node not to lead.
func (h *Harness) awaitLeader(ctx context.Context, not string) (sandbox.DatapathServerStatus, error) {
	var leader sandbox.DatapathServerStatus
	err := sandbox.Poll(ctx, leaderBound, "a datapath leader not on "+not, func(ctx context.Context) (bool, string, error) {
		l, err := h.sb.DatapathLeader(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		leader = l
		return l.Node != not, "the leader is " + l.Node, nil
	}, nil)
	return leader, err
}

// awaitGroup waits up to groupBound until every server answers as leader or
// follower, one of them leads, and node's server has applied at least
// applied (the log as it was when it left): it is back in the group.
func (h *Harness) awaitGroup(ctx context.Context, node string, applied uint64) error {
	return sandbox.Poll(ctx, groupBound, node+"'s server back in the group", func(ctx context.Context) (bool, string, error) {
		sts, err := h.sb.DatapathServers(ctx, time.Second)
		if err != nil {
			return false, err.Error(), nil
		}
		var rows []string
		leaders, back := 0, false
		for _, s := range sts {
			rows = append(rows, fmt.Sprintf("%s %s applied %d", s.Node, s.Role, s.AppliedIndex))
			if s.Role == datapath.RoleLeader {
				leaders++
			}
			if s.Node == node && (s.Role == datapath.RoleLeader || s.Role == datapath.RoleFollower) && s.AppliedIndex >= applied {
				back = true
			}
			if s.Role != datapath.RoleLeader && s.Role != datapath.RoleFollower {
				back = false
				break
			}
		}
		return back && leaders == 1, strings.Join(rows, ", "), nil
	}, nil)
}

// leaderApplied is the leader's node and applied index now ("", 0 without one).
func (h *Harness) leaderApplied(ctx context.Context) (string, uint64) {
	l, err := h.sb.DatapathLeader(ctx)
	if err != nil {
		return "", 0
	}
	return l.Node, l.AppliedIndex
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
		if err := h.awaitGroup(ctx, node, applied); err != nil {
			errs = append(errs, err.Error())
			break
		}
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
