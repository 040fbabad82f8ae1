package wire

// ServerStatus is one server of the control group in a ServerList. Times
// are Unix nanoseconds, 0 for none.
type ServerStatus struct {
	ID              string
	Node            string
	Address         string // its datapath address
	RaftAddress     string
	Role            string // "" when the answering server cannot tell
	LastContactUnix int64
	AppliedIndex    uint64
	Self            bool // the server that answered
}

// ServerList is the answer to Servers.
type ServerList struct {
	NowUnix int64
	Items   []ServerStatus
}

func (m *ServerList) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.i64(m.NowUnix)
	e.u64(uint64(len(m.Items)))
	for _, s := range m.Items {
		e.str(s.ID)
		e.str(s.Node)
		e.str(s.Address)
		e.str(s.RaftAddress)
		e.str(s.Role)
		e.i64(s.LastContactUnix)
		e.u64(s.AppliedIndex)
		e.boolean(s.Self)
	}
	return e.b
}

func (m *ServerList) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.NowUnix = d.i64("now")
	n := d.count("items")
	m.Items = make([]ServerStatus, n)
	for i := 0; i < n && d.err == nil; i++ {
		s := &m.Items[i]
		s.ID = d.str("id")
		s.Node = d.str("node")
		s.Address = d.str("address")
		s.RaftAddress = d.str("raft_address")
		s.Role = d.str("role")
		s.LastContactUnix = d.i64("last_contact")
		s.AppliedIndex = d.u64("applied_index")
		s.Self = d.boolean("self")
	}
	return d.finish("ServerList")
}
