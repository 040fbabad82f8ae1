package client

import (
	"context"
	"fmt"
	"sort"

	"github.com/vigil-storage/vigil/datapath"
)

// GroupNodeGrants is NodeGrants for a caller that can use a partial answer
// (the manager's fence back end): every server is asked for the node's rows
// on the volumes it holds; those that do not answer are named, and so are
// the volumes they hold, as the leader places them (current: through a
// barrier, so no volume committed before the call is missing). It fails when no server answered, or when
// servers did not answer and the leader is not among those that did: which
// volumes the silent servers hold is then not known. Without WithServers,
// or when every server answered, Unknown and Silent are empty.
func (c *Client) GroupNodeGrants(ctx context.Context, node string) (datapath.GroupGrants, error) {
	if len(c.group.servers) < 2 {
		rows, err := c.nodeGrantsAt(ctx, "", node)
		return datapath.GroupGrants{Rows: rows}, err
	}
	rows := make([][]datapath.Attachment, len(c.group.servers))
	errs := c.each(func(i int, addr string) error {
		var err error
		rows[i], err = c.nodeGrantsAt(ctx, addr, node)
		return err
	})
	var out datapath.GroupGrants
	var answered []string
	for i, err := range errs {
		if err != nil {
			out.Silent = append(out.Silent, c.group.servers[i])
			continue
		}
		answered = append(answered, c.group.servers[i])
		out.Rows = append(out.Rows, rows[i]...)
	}
	sort.Slice(out.Rows, func(i, j int) bool { return out.Rows[i].VolumeID < out.Rows[j].VolumeID })
	if len(out.Silent) == 0 {
		return out, nil
	}
	if len(answered) == 0 {
		return datapath.GroupGrants{}, fmt.Errorf("grants of node %s: no datapath server answered (%v): %w", node, out.Silent, errs[0])
	}
	unknown, err := c.volumesOf(ctx, answered, out.Silent)
	if err != nil {
		return datapath.GroupGrants{}, fmt.Errorf("grants of node %s: datapath servers %v did not answer, and which volumes they hold is not known: %w", node, out.Silent, err)
	}
	out.Unknown = unknown
	return out, nil
}

// volumesOf returns the volumes the servers at silent hold, as the leader
// places them, asked of the leader among the servers at answered.
func (c *Client) volumesOf(ctx context.Context, answered, silent []string) ([]string, error) {
	var leader string
	var members []datapath.ServerStatus
	for _, addr := range answered {
		rep, err := c.serversAt(ctx, addr)
		if err != nil {
			continue
		}
		for _, s := range rep.Servers {
			if s.Self && s.Role == datapath.RoleLeader {
				leader, members = addr, rep.Servers
			}
		}
	}
	if leader == "" {
		return nil, fmt.Errorf("the leader of the control group is not among the servers that answered (%v)", answered)
	}
	silentIDs := map[string]bool{}
	for _, m := range members {
		for _, a := range silent {
			if m.Address == a {
				silentIDs[m.ID] = true
			}
		}
	}
	vols, err := c.groupVolumesAt(ctx, leader, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range vols {
		if silentIDs[v.Server] {
			out = append(out, v.ID)
		}
	}
	sort.Strings(out)
	return out, nil
}
