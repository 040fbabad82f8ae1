package wire

// The messages of the per-node calls: NodeGrants, FenceNode, Leave, Nodes.

// NodeGrant is one node's row on one volume.
type NodeGrant struct {
	VolumeID    string
	Epoch       uint64
	State       string
	UpdatedUnix int64
}

// NodeGrantList is the answer to NodeGrants.
type NodeGrantList struct {
	Node  string
	Items []NodeGrant
}

func (m *NodeGrantList) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.Node)
	e.u64(uint64(len(m.Items)))
	for _, g := range m.Items {
		e.str(g.VolumeID)
		e.u64(g.Epoch)
		e.str(g.State)
		e.i64(g.UpdatedUnix)
	}
	return e.b
}

func (m *NodeGrantList) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Node = d.str("node")
	n := d.count("items")
	m.Items = make([]NodeGrant, n)
	for i := 0; i < n && d.err == nil; i++ {
		g := &m.Items[i]
		g.VolumeID = d.str("volume_id")
		g.Epoch = d.u64("epoch")
		g.State = d.str("state")
		g.UpdatedUnix = d.i64("updated")
	}
	return d.finish("NodeGrantList")
}

// FencedVolume is one volume FenceNode fenced, with its new epoch.
type FencedVolume struct {
	VolumeID string
	Epoch    uint64
}

// FencedList is the answer to FenceNode. Pending follows the items only
// when the request asked to confirm (ConfirmMetadataKey).
type FencedList struct {
	Items   []FencedVolume
	Pending *Pending
}

func (m *FencedList) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.u64(uint64(len(m.Items)))
	for _, f := range m.Items {
		e.str(f.VolumeID)
		e.u64(f.Epoch)
	}
	if m.Pending != nil {
		m.Pending.enc(&e)
	}
	return e.b
}

func (m *FencedList) Unmarshal(b []byte) error {
	d := decoder{b: b}
	n := d.count("items")
	m.Items = make([]FencedVolume, n)
	for i := 0; i < n && d.err == nil; i++ {
		m.Items[i].VolumeID = d.str("volume_id")
		m.Items[i].Epoch = d.u64("epoch")
	}
	m.Pending = decPending(&d)
	return d.finish("FencedList")
}

// LeaveRequest announces that Node's agent stops on purpose for up to
// DurationNanos. The answer is an Int: when the announcement runs out (Unix
// nanoseconds, server clock).
type LeaveRequest struct {
	Node          string
	DurationNanos int64
}

func (m *LeaveRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.Node)
	e.i64(m.DurationNanos)
	return e.b
}

func (m *LeaveRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Node = d.str("node")
	m.DurationNanos = d.i64("duration")
	return d.finish("LeaveRequest")
}

// NodeStatus is one node of a NodeList. Times are Unix nanoseconds, 0 for
// none.
type NodeStatus struct {
	Node          string
	LastHeartbeat int64
	LastIO        int64
	LeavingUntil  int64
	LiveGrants    uint64
}

// NodeList is the answer to Nodes.
type NodeList struct {
	NowUnix     int64
	StartedUnix int64
	Items       []NodeStatus
}

func (m *NodeList) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.i64(m.NowUnix)
	e.i64(m.StartedUnix)
	e.u64(uint64(len(m.Items)))
	for _, n := range m.Items {
		e.str(n.Node)
		e.i64(n.LastHeartbeat)
		e.i64(n.LastIO)
		e.i64(n.LeavingUntil)
		e.u64(n.LiveGrants)
	}
	return e.b
}

func (m *NodeList) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.NowUnix = d.i64("now")
	m.StartedUnix = d.i64("started")
	n := d.count("items")
	m.Items = make([]NodeStatus, n)
	for i := 0; i < n && d.err == nil; i++ {
		s := &m.Items[i]
		s.Node = d.str("node")
		s.LastHeartbeat = d.i64("last_heartbeat")
		s.LastIO = d.i64("last_io")
		s.LeavingUntil = d.i64("leaving_until")
		s.LiveGrants = d.u64("live_grants")
	}
	return d.finish("NodeList")
}
