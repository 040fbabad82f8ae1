package wire

// MethodDirtyRegions asks an in-sync replica of a volume for its
// dirty-region map of another replica, out of sync: the regions written
// since that replica left, which a delta resync copies.
const MethodDirtyRegions = "DirtyRegions"

// DirtyRegionsRequest asks for the map of Replica (a server id) of
// VolumeID, from byte From on, as the writer Node at its attach Epoch (Node
// empty and Epoch 0: the controller).
type DirtyRegionsRequest struct {
	VolumeID, Replica string
	Node              string
	Epoch             uint64
	From              int64
}

func (m *DirtyRegionsRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.VolumeID)
	e.str(m.Replica)
	e.str(m.Node)
	e.u64(m.Epoch)
	e.i64(m.From)
	return e.b
}

func (m *DirtyRegionsRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.VolumeID = d.str("volume_id")
	m.Replica = d.str("replica")
	m.Node = d.str("node")
	m.Epoch = d.u64("epoch")
	m.From = d.i64("from")
	return d.finish("DirtyRegionsRequest")
}

// DirtyRange is Len bytes of a volume from Off.
type DirtyRange struct{ Off, Len int64 }

// DirtyRegionsAnswer is the map: the member epoch it started at (Since),
// the one the server applied, whether every region is dirty, the dirty
// bytes of the whole map, and its ranges from the request's From on, in
// order, at most MaxDirtyRanges of them; Next, when not 0, is the From to
// ask for the rest.
type DirtyRegionsAnswer struct {
	Since, MemberEpoch uint64
	All                bool
	Bytes              int64
	Ranges             []DirtyRange
	Next               int64
}

// MaxDirtyRanges is the most ranges one DirtyRegionsAnswer carries.
const MaxDirtyRanges = 1 << 16

func (m *DirtyRegionsAnswer) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.u64(m.Since)
	e.u64(m.MemberEpoch)
	e.boolean(m.All)
	e.i64(m.Bytes)
	e.u64(uint64(len(m.Ranges)))
	for _, r := range m.Ranges {
		e.i64(r.Off)
		e.i64(r.Len)
	}
	e.i64(m.Next)
	return e.b
}

func (m *DirtyRegionsAnswer) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Since = d.u64("since")
	m.MemberEpoch = d.u64("member_epoch")
	m.All = d.boolean("all")
	m.Bytes = d.i64("bytes")
	n := d.count("ranges")
	m.Ranges = nil
	if n > 0 {
		m.Ranges = make([]DirtyRange, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		m.Ranges[i].Off = d.i64("off")
		m.Ranges[i].Len = d.i64("len")
	}
	m.Next = d.i64("next")
	return d.finish("DirtyRegionsAnswer")
}
