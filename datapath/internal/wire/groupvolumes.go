package wire

// GroupVolume is one volume of the control group in a GroupVolumeList.
type GroupVolume struct {
	ID, Name string
	Server   string // the id of the server holding its data; "" without a group
	Epoch    uint64 // the highest epoch issued for it
	// Replicas, InSync and MemberEpoch are its recorded replica set, all
	// empty for a single copy on Server (and in an answer without
	// WithReplicas).
	Replicas, InSync []string
	MemberEpoch      uint64
	// Forced is its last force (force.go), in an answer WithForced.
	Forced *ForceRecord
}

// ReplicasMetadataKey, sent with GroupVolumes, asks for each volume's
// replica set (GroupVolumeList.WithReplicas). A server from before replica
// sets ignores it and answers without them; a client from before does not
// send it, so it gets the answer it decodes.
const ReplicasMetadataKey = "vigil-replicas"

// GroupVolumeList is the answer to GroupVolumes. With WithReplicas, a
// section follows the items: for each item in order, its member epoch, its
// replicas and its in-sync replicas. An answer without the section decodes
// with WithReplicas false and no replica sets.
type GroupVolumeList struct {
	Items        []GroupVolume
	WithReplicas bool
	// WithForced: the forced section (encForced) follows the replicas'.
	WithForced bool
}

func (m *GroupVolumeList) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.u64(uint64(len(m.Items)))
	for _, v := range m.Items {
		e.str(v.ID)
		e.str(v.Name)
		e.str(v.Server)
		e.u64(v.Epoch)
	}
	if m.WithReplicas {
		for _, v := range m.Items {
			e.u64(v.MemberEpoch)
			encStrs(&e, v.Replicas)
			encStrs(&e, v.InSync)
		}
		if m.WithForced {
			encForced(&e, m.Items)
		}
	}
	return e.b
}

func encStrs(e *encoder, ss []string) {
	e.u64(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}

func decStrs(d *decoder, field string) []string {
	n := d.count(field)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.str(field)
	}
	return out
}

func (m *GroupVolumeList) Unmarshal(b []byte) error {
	d := decoder{b: b}
	n := d.count("items")
	m.Items = make([]GroupVolume, n)
	for i := 0; i < n && d.err == nil; i++ {
		v := &m.Items[i]
		v.ID = d.str("id")
		v.Name = d.str("name")
		v.Server = d.str("server")
		v.Epoch = d.u64("epoch")
	}
	if d.err == nil && len(d.b) > 0 {
		m.WithReplicas = true
		for i := 0; i < n && d.err == nil; i++ {
			v := &m.Items[i]
			v.MemberEpoch = d.u64("member_epoch")
			v.Replicas = decStrs(&d, "replicas")
			v.InSync = decStrs(&d, "in_sync")
		}
		if d.err == nil && len(d.b) > 0 {
			m.WithForced = true
			decForced(&d, m.Items)
		}
	}
	return d.finish("GroupVolumeList")
}
