package manager

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// statusView is `datapath status -o json`: the control group's servers,
// each as it reports itself, and its volumes with their replicas.
type statusView struct {
	Servers []serverView `json:"servers"`
	Volumes []volumeView `json:"volumes"`
}

type serverView struct {
	ID      string `json:"id"`
	Node    string `json:"node"`
	Address string `json:"address"`
	// Role is leader, follower, candidate or unreachable.
	Role string `json:"role"`
	// LastContact is the server's last contact with the leader (none for
	// the leader and for an unreachable server); AppliedIndex the last
	// log index it applied (none when unreachable).
	LastContact  *time.Time `json:"lastContact,omitempty"`
	AppliedIndex *uint64    `json:"appliedIndex,omitempty"`
}

type volumeView struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Epoch uint64 `json:"epoch"`
	// MemberEpoch counts the committed changes of the volume's replica
	// set (0 for a single copy).
	MemberEpoch uint64        `json:"memberEpoch"`
	Replicas    []replicaView `json:"replicas"`
}

// replicaView is one copy of a volume's data: the node and server holding
// it and its state (datapath.Replica...).
type replicaView struct {
	Node   string `json:"node"`
	Server string `json:"server"`
	State  string `json:"state"`
}

// statusOf builds the status from the group's servers (rows, as groupRows
// returns them; nil for a datapath without a group) and volumes: each
// volume's replicas are its recorded replica set (one copy, on the server
// holding it, for a volume without one), each unreachable when its server
// did not answer or is not a known member, else faulted when the set has
// it out of sync, else in sync. Without a group the one server holds every
// volume.
func statusOf(rows []datapath.ServerStatus, vols []datapath.GroupVolume) statusView {
	out := statusView{Servers: make([]serverView, 0, len(rows)), Volumes: make([]volumeView, 0, len(vols))}
	byID := make(map[string]datapath.ServerStatus, len(rows))
	for _, s := range rows {
		byID[s.ID] = s
		sv := serverView{ID: s.ID, Node: s.Node, Address: s.Address, Role: s.Role}
		if s.Role != datapath.RoleUnreachable {
			applied := s.AppliedIndex
			sv.AppliedIndex = &applied
			if s.Role != datapath.RoleLeader && !s.LastContact.IsZero() {
				contact := s.LastContact.UTC()
				sv.LastContact = &contact
			}
		}
		out.Servers = append(out.Servers, sv)
	}
	for _, v := range vols {
		set := v.ReplicaSet()
		vv := volumeView{ID: v.ID, Name: v.Name, Epoch: v.Epoch, MemberEpoch: set.MemberEpoch, Replicas: make([]replicaView, 0, len(set.Replicas))}
		for _, server := range set.Replicas {
			vv.Replicas = append(vv.Replicas, replicaOf(server, set, rows, byID))
		}
		out.Volumes = append(out.Volumes, vv)
	}
	return out
}

// replicaOf is the view of the replica of set on server.
func replicaOf(server string, set datapath.ReplicaSet, rows []datapath.ServerStatus, byID map[string]datapath.ServerStatus) replicaView {
	r := replicaView{Server: server, State: datapath.ReplicaFaulted}
	if slices.Contains(set.InSync, server) {
		r.State = datapath.ReplicaInSync
	}
	if rows != nil {
		s, known := byID[server]
		r.Node = s.Node
		if !known || s.Role == datapath.RoleUnreachable {
			r.State = datapath.ReplicaUnreachable
		}
	}
	return r
}

// writeStatusJSON prints the status as indented JSON.
func writeStatusJSON(out io.Writer, v statusView) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printReplicas prints the volumes' replicas of `datapath status`.
func printReplicas(out io.Writer, v statusView) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "VOLUME\tNAME\tEPOCH\tMEMBER EPOCH\tREPLICA NODE\tSERVER\tSTATE\n")
	replicas := 0
	for _, vol := range v.Volumes {
		for _, r := range vol.Replicas {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", vol.ID, vol.Name, vol.Epoch, vol.MemberEpoch, dash(r.Node), dash(r.Server), r.State)
			replicas++
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d volumes in the control group, %d replicas\n", len(v.Volumes), replicas)
	return err
}
