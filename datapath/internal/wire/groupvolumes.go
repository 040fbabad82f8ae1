package wire

// GroupVolume is one volume of the control group in a GroupVolumeList.
type GroupVolume struct {
	ID, Name string
	Server   string // the id of the server holding its data; "" without a group
	Epoch    uint64 // the highest epoch issued for it
}

// GroupVolumeList is the answer to GroupVolumes.
type GroupVolumeList struct {
	Items []GroupVolume
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
	return e.b
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
	return d.finish("GroupVolumeList")
}
