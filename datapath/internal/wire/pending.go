package wire

// MethodWaitApplied asks a server whether it applied a change of the
// control group (WaitAppliedRequest); the answer is Empty.
const MethodWaitApplied = "WaitApplied"

// MethodPrepareVolume asks a server to make the data file of a new volume
// (CreateVolumeRequest without ID and Server) for a create the client then
// commits at the leader naming it; the answer is a PreparedVolume.
const MethodPrepareVolume = "PrepareVolume"

// MethodPrepareReplica asks a server to make the data file of a replica of
// a new volume under the id its holder drew (CreateVolumeRequest with ID,
// without Server); the answer is a PreparedVolume.
const MethodPrepareReplica = "PrepareReplica"

// PreparedVolume is the answer to PrepareVolume: the new volume's id and
// the id of the server that holds its data file.
type PreparedVolume struct{ ID, Server string }

func (m *PreparedVolume) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.ID)
	e.str(m.Server)
	return e.b
}

func (m *PreparedVolume) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.ID = d.str("id")
	m.Server = d.str("server")
	return d.finish("PreparedVolume")
}

// ConfirmMetadataKey, sent with a change (Grant, Fence, Release,
// DeleteVolume, FenceNode), says the client confirms with every server
// that holds a touched volume's data that it applied the change
// (WaitApplied). The answer then carries a Pending after its own fields.
// A server from before it ignores the key, and a request without it gets
// the refusal of a change of a volume another server holds, as before.
const ConfirmMetadataKey = "vigil-confirm-applied"

// Pending says which servers hold the data of volumes a change touched, and
// the log entry (Index, Term) they must apply before the change takes
// effect: for a volume of one copy, its server unless it answered; for a
// replicated volume, every replica, the one that answered too, of which a
// majority must apply it.
type Pending struct {
	Index, Term uint64
	Holders     []PendingHolder
}

// PendingHolder is one server that must apply a change, at its datapath
// address, with the touched volumes whose data it holds.
type PendingHolder struct {
	ID, Address string
	Volumes     []string
}

// Empty reports whether no server need confirm.
func (m *Pending) Empty() bool { return m == nil || len(m.Holders) == 0 }

func (m *Pending) enc(e *encoder) {
	e.u64(m.Index)
	e.u64(m.Term)
	e.u64(uint64(len(m.Holders)))
	for _, h := range m.Holders {
		e.str(h.ID)
		e.str(h.Address)
		e.u64(uint64(len(h.Volumes)))
		for _, v := range h.Volumes {
			e.str(v)
		}
	}
}

func (m *Pending) dec(d *decoder) {
	m.Index = d.u64("pending_index")
	m.Term = d.u64("pending_term")
	n := d.count("pending_holders")
	m.Holders = make([]PendingHolder, n)
	for i := 0; i < n && d.err == nil; i++ {
		h := &m.Holders[i]
		h.ID = d.str("holder_id")
		h.Address = d.str("holder_address")
		k := d.count("holder_volumes")
		h.Volumes = make([]string, k)
		for j := 0; j < k && d.err == nil; j++ {
			h.Volumes[j] = d.str("holder_volume")
		}
	}
}

// decPending reads a Pending when bytes are left after a message's own
// fields (an answer to a request that asked to confirm).
func decPending(d *decoder) *Pending {
	if d.err != nil || len(d.b) == 0 {
		return nil
	}
	p := &Pending{}
	p.dec(d)
	return p
}

// PendingAnswer is the answer to Release and DeleteVolume when the request
// asked to confirm: a Pending, or nothing (Empty, from a server that
// ignored the key).
type PendingAnswer struct{ Pending *Pending }

func (m *PendingAnswer) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	if m.Pending != nil {
		m.Pending.enc(&e)
	}
	return e.b
}

func (m *PendingAnswer) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Pending = decPending(&d)
	return d.finish("PendingAnswer")
}

// WaitAppliedRequest asks a server to answer once it applied the control
// group's entry at Index of Term, waiting at most TimeoutNanos.
type WaitAppliedRequest struct {
	Index, Term  uint64
	TimeoutNanos int64
}

func (m *WaitAppliedRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.u64(m.Index)
	e.u64(m.Term)
	e.i64(m.TimeoutNanos)
	return e.b
}

func (m *WaitAppliedRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Index = d.u64("index")
	m.Term = d.u64("term")
	m.TimeoutNanos = d.i64("timeout")
	return d.finish("WaitAppliedRequest")
}

// MethodAddServer asks the leader to add a server to the control group
// (AddServerRequest): recorded with its addresses, then a voter; with
// Nonvoter, a non-voter only, not recorded. The answer is Empty.
const MethodAddServer = "AddServer"

// AddServerRequest names a server to add: its id, the host:port of its Raft
// transport and the host:port it serves clients at; Nonvoter asks to add it
// as a non-voter first (encoded only when set, so a request without it
// reads as the release's before; a server of that release refuses one with
// it as malformed).
type AddServerRequest struct {
	ID, RaftAddress, DatapathAddress string
	Nonvoter                         bool
}

func (m *AddServerRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.ID)
	e.str(m.RaftAddress)
	e.str(m.DatapathAddress)
	if m.Nonvoter {
		e.boolean(true)
	}
	return e.b
}

func (m *AddServerRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.ID = d.str("id")
	m.RaftAddress = d.str("raftAddress")
	m.DatapathAddress = d.str("datapathAddress")
	if d.err == nil && len(d.b) > 0 {
		m.Nonvoter = d.boolean("nonvoter")
	}
	return d.finish("AddServerRequest")
}
