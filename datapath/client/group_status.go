package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// GroupStatus asks every server of the group (the Dial address and
// WithServers) at once for the group as it sees it, and returns each member
// as it reports itself, or in role unreachable (no last contact, no applied
// index) when it did not answer; a member not among the client's servers is
// shown as the answering servers list it. The members are the leader's list
// when the leader answered, else the first answering server's. Asked for
// the volumes, and given the leader's answer, it adds the group's volumes
// and the server holding each, as the leader applied them (VolumesKnown);
// without the leader's answer they are not known. A server's node is as it
// reports it (its --node-name) or as the group records it; one that does
// not answer keeps the node this client last learned for it. It fails only
// when no server answered. A datapath without a group (a release before
// it) reports no servers and no volumes.
func (c *Client) GroupStatus(ctx context.Context, volumes bool) (datapath.GroupStatus, error) {
	reps := make([]datapath.ServersReport, len(c.group.servers))
	errs := c.each(func(i int, addr string) error {
		var err error
		reps[i], err = c.serversAt(ctx, addr)
		return err
	})
	self := map[string]datapath.ServerStatus{}
	asked := map[string]bool{}
	members, leader := []datapath.ServerStatus(nil), ""
	var failed []error
	for i, err := range errs {
		addr := c.group.servers[i]
		asked[addr] = true
		if err != nil {
			failed = append(failed, fmt.Errorf("datapath %s: %w", addr, err))
			continue
		}
		for _, s := range reps[i].Servers {
			if !s.Self {
				continue
			}
			self[s.ID] = s
			if s.Role == datapath.RoleLeader {
				members, leader = reps[i].Servers, addr
			}
		}
		if members == nil {
			members = reps[i].Servers
		}
	}
	if len(failed) == len(errs) {
		return datapath.GroupStatus{}, fmt.Errorf("group status: no datapath server answered: %w", errors.Join(failed...))
	}
	out := datapath.GroupStatus{Servers: make([]datapath.ServerStatus, 0, len(members))}
	for _, m := range members {
		switch s, ok := self[m.ID]; {
		case ok:
			m = s
		case asked[m.Address]:
			m.Role, m.LastContact, m.AppliedIndex = datapath.RoleUnreachable, time.Time{}, 0
		}
		m.Node = c.group.nodeOf(m.ID, m.Node)
		m.Self = false
		out.Servers = append(out.Servers, m)
	}
	if volumes && leader != "" {
		vols, err := c.groupVolumesAt(ctx, leader, true)
		if err == nil {
			out.Volumes, out.VolumesKnown = vols, true
		}
	}
	return out, nil
}

// nodeOf returns the node of server id: node when known (and remembered),
// else the one last remembered for it.
func (g *leaders) nodeOf(id, node string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if node != "" {
		if g.nodes == nil {
			g.nodes = map[string]string{}
		}
		g.nodes[id] = node
		return node
	}
	return g.nodes[id]
}
