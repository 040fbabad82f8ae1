package fencebackend

import (
	"context"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/fenceapi"
)

// GroupStatuser is implemented by a Datapath of several servers
// (datapath/client.Client): the group's members as the client reached
// them, and the volumes with their holders from the leader.
type GroupStatuser interface {
	GroupStatus(ctx context.Context, volumes bool) (datapath.GroupStatus, error)
}

// ServerPlacement reports the datapath's servers, each unreachable when it
// did not answer, and which one holds each volume's data (Holders nil when
// the leader did not answer). A datapath of one server, or one without a
// control group, reports no servers: there is no server to lose but the
// datapath itself.
func (b *Backend) ServerPlacement(ctx context.Context) (fenceapi.Placement, error) {
	g, ok := b.dp.(GroupStatuser)
	if !ok {
		return fenceapi.Placement{}, nil
	}
	st, err := g.GroupStatus(ctx, true)
	if err != nil {
		return fenceapi.Placement{}, wrap("group status", err)
	}
	return placement(st), nil
}

// Servers reports the datapath's servers as ServerPlacement does, without
// asking where the volumes are: for a view of the servers, polled often.
func (b *Backend) Servers(ctx context.Context) ([]fenceapi.Server, error) {
	g, ok := b.dp.(GroupStatuser)
	if !ok {
		return nil, nil
	}
	st, err := g.GroupStatus(ctx, false)
	if err != nil {
		return nil, wrap("group status", err)
	}
	return placement(st).Servers, nil
}

// placement is a group status in the fence API's terms.
func placement(st datapath.GroupStatus) fenceapi.Placement {
	if len(st.Servers) == 0 {
		return fenceapi.Placement{}
	}
	p := fenceapi.Placement{Servers: make([]fenceapi.Server, len(st.Servers))}
	for i, s := range st.Servers {
		p.Servers[i] = fenceapi.Server{ID: s.ID, Node: s.Node, Address: s.Address, Role: role(s.Role)}
		if s.Role == datapath.RoleFollower || s.Role == datapath.RoleCandidate {
			p.Servers[i].LastContact = s.LastContact
		}
	}
	if st.VolumesKnown {
		p.Holders = make(map[string]string, len(st.Volumes))
		for _, v := range st.Volumes {
			p.Holders[v.ID] = v.Server
		}
	}
	return p
}

// role maps a datapath server role; one this manager does not know (a newer
// server's, or none) is shown as it is.
func role(r string) string {
	switch r {
	case datapath.RoleLeader:
		return fenceapi.RoleLeader
	case datapath.RoleFollower:
		return fenceapi.RoleFollower
	case datapath.RoleCandidate:
		return fenceapi.RoleCandidate
	case datapath.RoleUnreachable:
		return fenceapi.RoleUnreachable
	}
	return r
}
