package raftstate

import (
	"fmt"
	"sort"

	"github.com/vigil-storage/vigil/datapath"
)

// The FSM's reads return this server's applied state. Group's reads make
// it current first (a barrier through the leader); read an FSM directly only
// for what may be stale (a status page).

// Volume returns one volume.
func (f *FSM) Volume(id string) (Volume, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	vs, ok := f.st.vols[id]
	if !ok {
		return Volume{}, fmt.Errorf("%w: volume %s", datapath.ErrNotFound, id)
	}
	return vs.vol, nil
}

// Volumes returns every volume sorted by name.
func (f *FSM) Volumes() []Volume {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Volume, 0, len(f.st.vols))
	for _, vs := range f.st.vols {
		out = append(out, vs.vol)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Attachments returns the volume's attachment table sorted by node.
func (f *FSM) Attachments(id string) ([]datapath.Attachment, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	vs, ok := f.st.vols[id]
	if !ok {
		return nil, fmt.Errorf("%w: volume %s", datapath.ErrNotFound, id)
	}
	return vs.attachments(), nil
}

// VolumeTable returns one volume and its attachment table, read together.
func (f *FSM) VolumeTable(id string) (Volume, []datapath.Attachment, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	vs, ok := f.st.vols[id]
	if !ok {
		return Volume{}, nil, false
	}
	return vs.vol, vs.attachments(), true
}

func (vs *volState) attachments() []datapath.Attachment {
	out := make([]datapath.Attachment, 0, len(vs.rows))
	for n, r := range vs.rows {
		out = append(out, attachment(vs.vol.ID, n, r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// NodeGrants returns node's row on every volume that has one, sorted by
// volume id.
func (f *FSM) NodeGrants(node string) []datapath.Attachment {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []datapath.Attachment
	for id, vs := range f.st.vols {
		if r, ok := vs.rows[node]; ok {
			out = append(out, attachment(id, node, r))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolumeID < out[j].VolumeID })
	return out
}

func attachment(id, node string, r rowState) datapath.Attachment {
	return datapath.Attachment{VolumeID: id, Node: node, Epoch: r.row.Epoch, State: r.row.State, Use: r.row.GrantedUse(), Updated: r.updated}
}

// Leaves returns the announced stops, sorted by node; some may have run
// out (compare Until with the reader's clock).
func (f *FSM) Leaves() []Leave {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Leave, 0, len(f.st.leaves))
	for _, l := range f.st.leaves {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Servers returns the members recorded with AddServer, sorted by id.
func (f *FSM) Servers() []Server {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Server, 0, len(f.st.servers))
	for _, m := range f.st.servers {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
