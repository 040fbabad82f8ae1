package manager

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
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
	MemberEpoch uint64 `json:"memberEpoch"`
	// State is the volume's as datapath.JudgeQuorum judges it: ok,
	// degraded, no-quorum, server-down (its holder's server, which serves
	// its reads, does not answer) or invalid, with Problem saying what is
	// wrong.
	State    string        `json:"state"`
	Problem  string        `json:"problem,omitempty"`
	Replicas []replicaView `json:"replicas"`
	// Forced is the last force of its replica set (`force-replica`): who
	// asked, when, why, and the set before; absent when never forced.
	Forced *datapath.ForceRecord `json:"forced,omitempty"`
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
// it out of sync, else in sync; and each volume's state is JudgeQuorum's,
// a server that does not answer or is no known member counting as down.
// Without a group the one server holds every volume, and answered.
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
		q := datapath.JudgeQuorum(set, func(server string) bool { return answers(server, rows, byID) })
		vv := volumeView{ID: v.ID, Name: v.Name, Epoch: v.Epoch, MemberEpoch: set.MemberEpoch, State: q.State, Problem: q.Problem,
			Replicas: make([]replicaView, 0, len(set.Replicas)), Forced: v.Forced}
		for _, server := range set.Replicas {
			vv.Replicas = append(vv.Replicas, replicaOf(server, set, rows, byID))
		}
		out.Volumes = append(out.Volumes, vv)
	}
	return out
}

// answers says whether server answered: always without a group (rows nil),
// else when it is a known member that is not unreachable.
func answers(server string, rows []datapath.ServerStatus, byID map[string]datapath.ServerStatus) bool {
	s, known := byID[server]
	return rows == nil || known && s.Role != datapath.RoleUnreachable
}

// replicaOf is the view of the replica of set on server.
func replicaOf(server string, set datapath.ReplicaSet, rows []datapath.ServerStatus, byID map[string]datapath.ServerStatus) replicaView {
	r := replicaView{Server: server, State: datapath.ReplicaFaulted}
	if slices.Contains(set.InSync, server) {
		r.State = datapath.ReplicaInSync
	}
	r.Node = byID[server].Node
	if !answers(server, rows, byID) {
		r.State = datapath.ReplicaUnreachable
	}
	return r
}

// writeStatusJSON prints the status as indented JSON.
func writeStatusJSON(out io.Writer, v statusView) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printReplicas prints the volumes' replicas of `datapath status`, each
// row with its volume's state, then what is wrong with each invalid volume
// and a count of the volumes by state.
func printReplicas(out io.Writer, v statusView) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "VOLUME\tNAME\tVOLUME STATE\tEPOCH\tMEMBER EPOCH\tREPLICA NODE\tSERVER\tSTATE\n")
	replicas := 0
	byState := map[string]int{}
	for _, vol := range v.Volumes {
		byState[vol.State]++
		for _, r := range vol.Replicas {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", vol.ID, vol.Name, vol.State, vol.Epoch, vol.MemberEpoch, dash(r.Node), dash(r.Server), r.State)
			replicas++
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, vol := range v.Volumes {
		if vol.Problem != "" {
			fmt.Fprintf(out, "volume %s is %s: %s\n", vol.ID, vol.State, vol.Problem)
		}
		if f := vol.Forced; f != nil {
			fmt.Fprintf(out, "volume %s was forced to serve from %s at member epoch %d, at %s by %s: %q (replicas before: %s; in sync before: %s)\n",
				vol.ID, strings.Join(f.Forced, ", "), f.MemberEpoch, f.At.UTC().Format(time.RFC3339), f.By, f.Reason,
				strings.Join(f.ReplicasBefore, ", "), strings.Join(f.InSyncBefore, ", "))
		}
	}
	_, err := fmt.Fprintf(out, "%d volumes in the control group, %d replicas%s\n", len(v.Volumes), replicas, stateCounts(byState))
	return err
}

// stateCounts is ", N no-quorum, …" for each state other than ok that some
// volume is in, worst first; empty when every volume is ok.
func stateCounts(byState map[string]int) string {
	var s strings.Builder
	for _, st := range []string{datapath.VolumeNoQuorum, datapath.VolumeServerDown, datapath.VolumeInvalid, datapath.VolumeDegraded} {
		if byState[st] > 0 {
			fmt.Fprintf(&s, ", %d %s", byState[st], st)
		}
	}
	return s.String()
}
