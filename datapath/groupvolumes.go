package datapath

import (
	"fmt"
	"sort"
)

// States of a volume's replica (a copy of its data) as `datapath status`
// shows them: in sync or faulted (out of sync) as the group records it, or
// unreachable when its server does not answer. Each replica serves its I/O
// from the same recorded set, as it applied it (replicaio.go).
const (
	ReplicaInSync      = "in-sync"
	ReplicaRebuilding  = "rebuilding"
	ReplicaFaulted     = "faulted"
	ReplicaUnreachable = "unreachable"
)

// GroupVolume is a volume as the control group holds it, for a report of
// the whole group (GroupVolumes): its id and name, the server holding its
// data and the highest epoch issued for it.
type GroupVolume struct {
	ID, Name string
	// Server is the id of the group member holding the volume's data
	// (ServerStatus.ID); empty for a Store without a Control.
	Server string
	Epoch  uint64
	// Replicas, InSync and MemberEpoch are its recorded replica set
	// (ControlVolume); all empty for a single copy on Server.
	Replicas, InSync []string
	MemberEpoch      uint64
	// Forced is the record of the last force of its replica set
	// (forcereplica.go); nil when never forced.
	Forced *ForceRecord
}

// ReplicaSet is the volume's replica set; SingleCopy on Server when none
// is recorded.
func (v GroupVolume) ReplicaSet() ReplicaSet {
	return ControlVolume{Volume: Volume{ID: v.ID}, Server: v.Server, Replicas: v.Replicas, InSync: v.InSync, MemberEpoch: v.MemberEpoch}.ReplicaSet()
}

// GroupVolumes reports every volume of the control group, sorted by name,
// with the server holding each one's data; a Store without a Control
// reports its own volumes, with no server. With a Control it answers only
// as the leader and current (Control.Volumes): the fence back end takes the
// volumes a silent server holds from it, and a list that misses a volume
// created just before would hide a live grant, which the manager would take
// for proof that the node cannot write there. A follower refuses with
// ErrNotLeader naming the leader, which the client follows.
func (s *Store) GroupVolumes() ([]GroupVolume, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var out []GroupVolume
	if s.ctl != nil {
		ctx, cancel := s.ctlContext()
		defer cancel()
		cvs, err := s.ctl.Volumes(ctx)
		if err != nil {
			return nil, err
		}
		for _, cv := range cvs {
			out = append(out, GroupVolume{ID: cv.ID, Name: cv.Name, Server: cv.Server, Epoch: cv.Epoch,
				Replicas: cv.Replicas, InSync: cv.InSync, MemberEpoch: cv.MemberEpoch, Forced: s.forcedOf(cv.ID)})
		}
	} else {
		vs, err := s.ListVolumes()
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			e, err := s.Epoch(v.ID)
			if err != nil {
				continue // deleted meanwhile
			}
			out = append(out, GroupVolume{ID: v.ID, Name: v.Name, Epoch: e})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// GroupGrants is a node's rows across the control group when not every
// server answered (datapath/client's GroupNodeGrants): the rows of the
// volumes whose servers answered, and the volumes whose servers did not, on
// which nothing is known.
type GroupGrants struct {
	// Rows are the node's rows on the volumes of the servers that answered,
	// sorted by volume id; each is its holder's own word.
	Rows []Attachment
	// Unknown are the volumes held by the servers that did not answer,
	// sorted: the node may hold a live grant on any of them.
	Unknown []string
	// Silent are the addresses of the servers that did not answer.
	Silent []string
}

// AddServer adds a server to the control group, at the leader (a follower
// refuses with ErrNotLeader naming it): the group records it with its Raft
// and datapath addresses and makes it a voter (Control.AddMember). The
// server must be running, started to join (`serve --raft-join`), so that
// the group's majority does not wait for it. Adding a member again with the
// same addresses changes nothing. A store without a control group refuses.
func (s *Store) AddServer(id, raftAddress, datapathAddress string) error {
	if err := s.checkAddServer(id); err != nil {
		return err
	}
	if err := s.ctl.CheckLeader(); err != nil {
		return err
	}
	ctx, cancel := s.ctlContext()
	defer cancel()
	if err := s.ctl.AddMember(ctx, id, raftAddress, datapathAddress); err != nil {
		return fmt.Errorf("add server %s: %w", id, err)
	}
	return nil
}

// AddNonvoter adds a running server to the control group as a non-voter,
// at the leader (Control.AddNonvoter): it catches up on the log without
// counting for the majority; AddServer then makes it a voter. The datapath
// address is checked only (it is recorded by AddServer). A store without a
// control group refuses.
func (s *Store) AddNonvoter(id, raftAddress, datapathAddress string) error {
	if err := s.checkAddServer(id); err != nil {
		return err
	}
	if datapathAddress == "" {
		return fmt.Errorf("%w: server %s: no datapath address; give the host:port it serves clients at", ErrInvalidArgument, id)
	}
	if err := s.ctl.CheckLeader(); err != nil {
		return err
	}
	ctx, cancel := s.ctlContext()
	defer cancel()
	if err := s.ctl.AddNonvoter(ctx, id, raftAddress); err != nil {
		return fmt.Errorf("add server %s as a non-voter: %w", id, err)
	}
	return nil
}

// checkAddServer refuses to add server id to a closed store or to one
// without a control group.
func (s *Store) checkAddServer(id string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if s.ctl == nil {
		return fmt.Errorf("%w: add server %s: this server keeps its control state in datapath.db, not in a control group", ErrInvalidArgument, id)
	}
	return nil
}
