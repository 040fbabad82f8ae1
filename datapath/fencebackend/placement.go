package fencebackend

import (
	"context"
	"slices"

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
		p.Replicas = map[string]fenceapi.VolumeReplicas{}
		answers := make(map[string]bool, len(st.Servers))
		for _, s := range st.Servers {
			answers[s.ID] = s.Role != datapath.RoleUnreachable
		}
		for _, v := range st.Volumes {
			p.Holders[v.ID] = v.Server
			if r, ok := replicasOf(v, answers); ok {
				p.Replicas[v.ID] = r
			}
		}
	}
	return p
}

// replicasOf is v's replicas and its state (datapath.JudgeQuorum's), a
// server that is not a member counting as one that does not answer; not ok
// for a single copy, which the placement leaves to its holder.
func replicasOf(v datapath.GroupVolume, answers map[string]bool) (fenceapi.VolumeReplicas, bool) {
	set := v.ReplicaSet()
	q := datapath.JudgeQuorum(set, func(id string) bool { return answers[id] })
	if len(set.Replicas) == 1 && q.State != datapath.VolumeInvalid {
		return fenceapi.VolumeReplicas{}, false
	}
	r := fenceapi.VolumeReplicas{State: volumeState(q.State), Live: q.Live, Need: q.Need, Problem: q.Problem,
		Replicas: make([]fenceapi.Replica, len(set.Replicas))}
	for i, id := range set.Replicas {
		r.Replicas[i] = fenceapi.Replica{Server: id, InSync: slices.Contains(set.InSync, id)}
	}
	return r, true
}

// volumeState maps a datapath volume state; one this manager does not know
// is shown as it is.
func volumeState(s string) string {
	switch s {
	case datapath.VolumeOK:
		return fenceapi.VolumeOK
	case datapath.VolumeDegraded:
		return fenceapi.VolumeDegraded
	case datapath.VolumeNoQuorum:
		return fenceapi.VolumeNoQuorum
	case datapath.VolumeServerDown:
		return fenceapi.VolumeServerDown
	case datapath.VolumeInvalid:
		return fenceapi.VolumeInvalid
	}
	return s
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
