package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// Connectivity is soft state each server of the group keeps for itself (the
// heartbeats and I/O it received), so a client given the group's servers
// heartbeats to every one of them, and the manager reads every one's Nodes
// report (ServerNodes) and takes a node as heard if any server heard it: one
// server that is down or cut off then neither silences every node nor speaks
// for them.

// heartbeatAll heartbeats node to every server of the group at once, each
// with the client's retries within ctx; it succeeds when at least one server
// took the heartbeat, and otherwise returns every server's error.
func (c *Client) heartbeatAll(ctx context.Context, node string) error {
	errs := c.each(func(_ int, addr string) error {
		return c.callTo(ctx, "", addr, wire.MethodHeartbeat, &wire.NodeRef{Node: node}, &wire.Empty{}, retrySafe)
	})
	var failed []error
	for _, err := range errs {
		if err == nil {
			return nil
		}
		failed = append(failed, err)
	}
	return fmt.Errorf("heartbeat of node %s: no datapath server took it: %w", node, errors.Join(failed...))
}

// ServerNodes asks every server of the group (the Dial address and
// WithServers) for its Nodes report at once and returns the reports of the
// servers that answered, in the order of the servers; a server that does not
// answer, or not within serverNodesGrace of the first answer, contributes
// nothing. It fails only when none answered, with every
// server's error. Without WithServers it is Nodes.
func (c *Client) ServerNodes(ctx context.Context) ([]datapath.NodesReport, error) {
	reports := make([]datapath.NodesReport, len(c.group.servers))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var first sync.Once
	errs := c.each(func(i int, addr string) error {
		var err error
		reports[i], err = c.nodesAt(ctx, addr)
		if err == nil {
			// The reports are measured when they are taken: waiting long
			// for a server that does not answer would age the others'.
			first.Do(func() { time.AfterFunc(serverNodesGrace, cancel) })
		}
		return err
	})
	var out []datapath.NodesReport
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("datapath %s: %w", c.group.servers[i], err))
			continue
		}
		out = append(out, reports[i])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nodes: no datapath server answered: %w", errors.Join(failed...))
	}
	return out, nil
}

// nodeGrantsAll is NodeGrants of a group: every server reports the node's
// rows on the volumes whose data it holds, which are the rows that decide
// whether the node's I/O is accepted there, and the answer is their union,
// sorted by volume id. A server that does not answer may hold a live grant
// of the node, so then there is no answer: the error names it, and nothing
// may be taken as proof that the node cannot write.
func (c *Client) nodeGrantsAll(ctx context.Context, node string) ([]datapath.Attachment, error) {
	rows := make([][]datapath.Attachment, len(c.group.servers))
	errs := c.each(func(i int, addr string) error {
		var err error
		rows[i], err = c.nodeGrantsAt(ctx, addr, node)
		return err
	})
	var out []datapath.Attachment
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("grants of node %s at datapath server %s, which may hold some of them (every server must answer for its own volumes): %w",
				node, c.group.servers[i], err)
		}
		out = append(out, rows[i]...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolumeID < out[j].VolumeID })
	return out, nil
}

// failedVolumesAll is FailedVolumes of a group: the union of every
// server's failed volumes, sorted by volume id, or an error naming a server
// that did not answer.
func (c *Client) failedVolumesAll(ctx context.Context) ([]datapath.FailedVolume, error) {
	lists := make([][]datapath.FailedVolume, len(c.group.servers))
	errs := c.each(func(i int, addr string) error {
		var err error
		lists[i], err = c.failedVolumesAt(ctx, addr)
		return err
	})
	out := []datapath.FailedVolume{}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("failed volumes at datapath server %s: %w", c.group.servers[i], err)
		}
		out = append(out, lists[i]...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolumeID < out[j].VolumeID })
	return out, nil
}

// serverNodesGrace is how long ServerNodes waits for the other servers once
// one answered.
const serverNodesGrace = 300 * time.Millisecond

// each runs fn for every server of the group at once and returns their
// errors in the order of the servers.
func (c *Client) each(fn func(i int, addr string) error) []error {
	return eachOf(c.group.servers, fn)
}

// eachOf runs fn for every server of servers at once and returns their
// errors in their order.
func eachOf(servers []string, fn func(i int, addr string) error) []error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, addr := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i, addr)
		}()
	}
	wg.Wait()
	return errs
}
