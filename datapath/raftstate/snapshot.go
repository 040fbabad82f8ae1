package raftstate

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// snapshotVersion is the format of an encoded snapshot; Restore refuses
// another one by name.
const snapshotVersion = 1

// snapshotDoc is the state as written in a snapshot (JSON, lists sorted, so
// two servers with the same state write the same bytes).
type snapshotDoc struct {
	Version int              `json:"version"`
	Applied appliedEntry     `json:"applied"`
	Volumes []snapshotVolume `json:"volumes"`
	Leaves  []Leave          `json:"leaves"`
	Servers []Server         `json:"servers"`
	// Abandoned: the data files committed as abandoned; absent when there
	// are none (so such a snapshot is byte for byte the releases' before).
	Abandoned []abandonedFile `json:"abandoned,omitempty"`
}

// abandonedFile is a data file committed as abandoned (OpAbandonFile).
type abandonedFile struct {
	ID     string `json:"id"`
	Server string `json:"server"`
}

type snapshotVolume struct {
	ID      string              `json:"id"`
	Name    string              `json:"name"`
	Size    int64               `json:"size"`
	Access  datapath.AccessMode `json:"access"`
	Created time.Time           `json:"created"`
	Server  string              `json:"server"`
	Epoch   uint64              `json:"epoch"`
	Rows    []ImportRow         `json:"rows"`
	// The replica set; absent for a single copy (so a snapshot of volumes
	// created without replicas is byte for byte the releases' before).
	Replicas    []string `json:"replicas,omitempty"`
	InSync      []string `json:"inSync,omitempty"`
	MemberEpoch uint64   `json:"memberEpoch,omitempty"`
	// Forced: the last force of its replica set; absent when never forced.
	Forced *ForceAudit `json:"forced,omitempty"`
}

func encodeSnapshot(s *state, last appliedEntry) ([]byte, error) {
	doc := snapshotDoc{Version: snapshotVersion, Applied: last, Volumes: []snapshotVolume{}, Leaves: []Leave{}, Servers: []Server{}}
	for _, vs := range s.vols {
		v := vs.vol
		sv := snapshotVolume{ID: v.ID, Name: v.Name, Size: v.Size, Access: v.Access, Created: v.Created, Server: v.Server, Epoch: v.Epoch, Rows: []ImportRow{},
			Replicas: v.Replicas, InSync: v.InSync, MemberEpoch: v.MemberEpoch, Forced: vs.forced}
		for n, r := range vs.rows {
			sv.Rows = append(sv.Rows, ImportRow{Node: n, Epoch: r.row.Epoch, State: r.row.State, Use: r.row.Use, Updated: r.updated})
		}
		sort.Slice(sv.Rows, func(i, j int) bool { return sv.Rows[i].Node < sv.Rows[j].Node })
		doc.Volumes = append(doc.Volumes, sv)
	}
	sort.Slice(doc.Volumes, func(i, j int) bool { return doc.Volumes[i].ID < doc.Volumes[j].ID })
	for _, l := range s.leaves {
		doc.Leaves = append(doc.Leaves, l)
	}
	sort.Slice(doc.Leaves, func(i, j int) bool { return doc.Leaves[i].Node < doc.Leaves[j].Node })
	for _, m := range s.servers {
		doc.Servers = append(doc.Servers, m)
	}
	sort.Slice(doc.Servers, func(i, j int) bool { return doc.Servers[i].ID < doc.Servers[j].ID })
	for id, server := range s.abandoned {
		doc.Abandoned = append(doc.Abandoned, abandonedFile{ID: id, Server: server})
	}
	sort.Slice(doc.Abandoned, func(i, j int) bool { return doc.Abandoned[i].ID < doc.Abandoned[j].ID })
	return json.Marshal(doc)
}

// decodeSnapshot reads a snapshot and checks it whole (shapes, names, no
// duplicates, no row above its volume's epoch), so a damaged snapshot is
// refused instead of half restored.
func decodeSnapshot(r io.Reader) (state, appliedEntry, error) {
	var doc snapshotDoc
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return state{}, appliedEntry{}, fmt.Errorf("restore snapshot: %w", err)
	}
	if doc.Version != snapshotVersion {
		return state{}, appliedEntry{}, fmt.Errorf("restore snapshot: format version %d; this server knows version %d only", doc.Version, snapshotVersion)
	}
	st := newState()
	for _, m := range doc.Servers {
		if err := m.validate(); err != nil {
			return state{}, appliedEntry{}, fmt.Errorf("restore snapshot: %w", err)
		}
		st.servers[m.ID] = m
	}
	for _, sv := range doc.Volumes {
		vs, err := restoreVolume(sv)
		if err != nil {
			return state{}, appliedEntry{}, fmt.Errorf("restore snapshot: volume %s: %w", sv.ID, err)
		}
		if _, dup := st.vols[sv.ID]; dup {
			return state{}, appliedEntry{}, fmt.Errorf("restore snapshot: volume %s appears twice", sv.ID)
		}
		if _, dup := st.names[sv.Name]; dup {
			return state{}, appliedEntry{}, fmt.Errorf("restore snapshot: volume name %q appears twice", sv.Name)
		}
		st.vols[sv.ID], st.names[sv.Name] = vs, sv.ID
	}
	for _, l := range doc.Leaves {
		if err := datapath.ValidNode(l.Node); err != nil {
			return state{}, appliedEntry{}, fmt.Errorf("restore snapshot: leave: %w", err)
		}
		st.leaves[l.Node] = l
	}
	for _, a := range doc.Abandoned {
		if err := firstErr(datapath.ValidVolumeID(a.ID), validServerID(a.Server)); err != nil {
			return state{}, appliedEntry{}, fmt.Errorf("restore snapshot: abandoned file: %w", err)
		}
		if _, named := st.vols[a.ID]; named {
			return state{}, appliedEntry{}, fmt.Errorf("restore snapshot: volume %s is also listed as an abandoned file", a.ID)
		}
		st.abandoned[a.ID] = a.Server
	}
	return st, doc.Applied, nil
}

func restoreVolume(sv snapshotVolume) (*volState, error) {
	if err := firstErr(datapath.ValidVolumeID(sv.ID), datapath.ValidVolume(sv.Name, sv.Size, sv.Access), validServerID(sv.Server)); err != nil {
		return nil, err
	}
	vs := &volState{vol: Volume{Volume: datapath.Volume{ID: sv.ID, Name: sv.Name, Size: sv.Size, Access: sv.Access, Created: sv.Created},
		Server: sv.Server, Epoch: sv.Epoch}, rows: map[string]rowState{}}
	if err := restoreReplicas(&vs.vol, sv.Replicas, sv.InSync, sv.MemberEpoch); err != nil {
		return nil, err
	}
	if sv.Forced != nil {
		if err := firstErr(ValidForceReason(sv.Forced.Reason), checkForceAudit(*sv.Forced, vs.vol)); err != nil {
			return nil, fmt.Errorf("forced: %w", err)
		}
		vs.forced = sv.Forced
	}
	for _, r := range sv.Rows {
		if err := r.check(sv.Epoch); err != nil {
			return nil, err
		}
		vs.rows[r.Node] = r.rowState()
	}
	return vs, nil
}

// snapshot is an encoded state, written by Persist.
type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("write snapshot: %w", err)
	}
	return sink.Close()
}

func (s snapshot) Release() {}
