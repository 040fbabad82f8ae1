package manager

import (
	"encoding/json"
	"fmt"
	"io"
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
	ID       string        `json:"id"`
	Name     string        `json:"name"`
	Epoch    uint64        `json:"epoch"`
	Replicas []replicaView `json:"replicas"`
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
// volume's one replica is on the server holding it, in sync when that
// server answered, unreachable when it did not or is not a known member.
// Without a group the one server holds every volume.
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
		r := replicaView{Server: v.Server, State: datapath.ReplicaInSync}
		if rows != nil {
			s, known := byID[v.Server]
			r.Node = s.Node
			if !known || s.Role == datapath.RoleUnreachable {
				r.State = datapath.ReplicaUnreachable
			}
		}
		out.Volumes = append(out.Volumes, volumeView{ID: v.ID, Name: v.Name, Epoch: v.Epoch, Replicas: []replicaView{r}})
	}
	return out
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
	fmt.Fprintf(w, "VOLUME\tNAME\tEPOCH\tREPLICA NODE\tSERVER\tSTATE\n")
	for _, vol := range v.Volumes {
		for _, r := range vol.Replicas {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", vol.ID, vol.Name, vol.Epoch, dash(r.Node), dash(r.Server), r.State)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d volumes in the control group, one replica each\n", len(v.Volumes))
	return err
}
