package client

import (
	"errors"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// The datapath's control state lives in a Raft group of servers, and only
// its leader changes it: a server that is not the leader refuses a change
// with datapath.ErrNotLeader, naming the leader's address when it knows it.
// A client given the group's servers (WithServers) sends each change to the
// leader it knows, follows such a refusal to the leader it names (or, when
// it names none, or the server does not answer, tries the next server after
// a pause), a bounded number of times. Nothing was proposed when a server
// refuses as not the leader, so sending the call again is safe. Reads, I/O
// and write sessions go to the server holding the volume's data (holder.go),
// heartbeats to the address given to Dial.

// WithServers names the other servers of the datapath's control group
// (host:port each), besides the address given to Dial, among which the
// client finds the leader for creates, deletes, grants, fences, releases and
// announced stops.
func WithServers(addrs ...string) Option {
	return func(o *options) { o.servers = append(o.servers, addrs...) }
}

// leaderMethods are the calls only the leader answers: the changes of the
// control state, and the current list of the group's volumes.
var leaderMethods = map[string]bool{
	wire.MethodCreateVolume: true, wire.MethodDeleteVolume: true, wire.MethodGrant: true, wire.MethodFence: true,
	wire.MethodRelease: true, wire.MethodFenceNode: true, wire.MethodLeave: true, wire.MethodAddServer: true,
	wire.MethodMarkOutOfSync: true,
	wire.MethodForceReplicas: true,
	// Not a change, but answered only by the leader, current (Store.GroupVolumes).
	wire.MethodGroupVolumes: true,
}

// leaders is the client's view of the group: its servers, the one it takes
// for the leader, and a connection to each it used.
type leaders struct {
	mu      sync.Mutex
	servers []string // the Dial address first
	leader  string
	conns   map[string]*grpc.ClientConn
	nodes   map[string]string // server id -> its node, as last reported (GroupStatus)
}

// connFor returns the connection and address a method goes to.
func (c *Client) connFor(method string) (*grpc.ClientConn, string, error) {
	if !leaderMethods[method] || len(c.group.servers) < 2 {
		return c.conn, c.addr, nil
	}
	g := &c.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leader == c.addr {
		return c.conn, c.addr, nil
	}
	if conn := g.conns[g.leader]; conn != nil {
		return conn, g.leader, nil
	}
	conn, err := c.dialAt(g.leader)
	if err != nil {
		return nil, "", err
	}
	g.conns[g.leader] = conn
	return conn, g.leader, nil
}

// follow takes a failed change at addr to the next server to try: the
// leader the refusal names, or else the next server of the list. It
// reports false when err is not a matter of finding the leader.
func (c *Client) follow(method, addr string, err error) bool {
	if !leaderMethods[method] || len(c.group.servers) < 2 || status.Code(err) != codes.Unavailable {
		return false
	}
	var re *datapath.RemoteError
	remote := errors.As(datapath.FromStatus(err), &re)
	if remote && re.Sentinel != nil && !errors.Is(re, datapath.ErrNotLeader) {
		return false // not committed, or the credentials could not be checked: the same server again
	}
	g := &c.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leader != addr {
		return true // another call moved on already
	}
	if remote && re.LeaderAddress != "" && re.LeaderAddress != addr {
		g.leader = re.LeaderAddress
		return true
	}
	i := slices.Index(g.servers, addr)
	g.leader = g.servers[(i+1)%len(g.servers)]
	return true
}

// leaderAddr is the server the client takes for the leader.
func (c *Client) leaderAddr() string {
	c.group.mu.Lock()
	defer c.group.mu.Unlock()
	return c.group.leader
}

// maxRedirects bounds how often one call follows the leader.
func (c *Client) maxRedirects() int { return 2*len(c.group.servers) + 2 }

func (c *Client) closeGroup() error {
	c.group.mu.Lock()
	defer c.group.mu.Unlock()
	var errs []error
	for _, conn := range c.group.conns {
		errs = append(errs, conn.Close())
	}
	return errors.Join(errs...)
}
