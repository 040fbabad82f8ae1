package wire

// Message is implemented by every request and response.
type Message interface {
	// MarshalAppend appends the encoding of the message to b.
	MarshalAppend(b []byte) []byte
	// Unmarshal decodes b into the message. Byte fields may alias b.
	Unmarshal(b []byte) error
}

// Empty is the request or response of calls that carry nothing.
type Empty struct{}

func (*Empty) MarshalAppend(b []byte) []byte { return b }
func (*Empty) Unmarshal(b []byte) error {
	d := decoder{b: b}
	return d.finish("Empty")
}

// CreateVolumeRequest asks for a volume, idempotently by name.
// ID and Server, set together, commit a volume a server prepared
// (PrepareVolume) under that id with its data on that server; they are
// encoded only when set, so a request without them is the one clients sent
// before placement.
//
// Replicas, set with ID and Server (its first), commits a volume each of
// whose replicas prepared its data file under ID; encoded only when set, so
// a server from before refuses such a request as malformed rather than
// creating one copy.
type CreateVolumeRequest struct {
	Name     string
	Size     int64
	Access   string
	ID       string
	Server   string
	Replicas []string
}

func (m *CreateVolumeRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.Name)
	e.i64(m.Size)
	e.str(m.Access)
	if m.ID != "" || m.Server != "" || len(m.Replicas) > 0 {
		e.str(m.ID)
		e.str(m.Server)
	}
	if len(m.Replicas) > 0 {
		encStrs(&e, m.Replicas)
	}
	return e.b
}

func (m *CreateVolumeRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Name = d.str("name")
	m.Size = d.i64("size")
	m.Access = d.str("access")
	if d.err == nil && len(d.b) > 0 {
		m.ID = d.str("id")
		m.Server = d.str("server")
	}
	if d.err == nil && len(d.b) > 0 {
		m.Replicas = decStrs(&d, "replicas")
	}
	return d.finish("CreateVolumeRequest")
}

// Volume describes one volume. Pending follows it, as the answer to a
// placed create that asked to confirm, only when set (never in a list).
type Volume struct {
	ID, Name    string
	Size        int64
	Access      string
	CreatedUnix int64 // nanoseconds since the Unix epoch
	Pending     *Pending
}

func (m *Volume) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	m.enc(&e)
	if m.Pending != nil {
		m.Pending.enc(&e)
	}
	return e.b
}

func (m *Volume) enc(e *encoder) {
	e.str(m.ID)
	e.str(m.Name)
	e.i64(m.Size)
	e.str(m.Access)
	e.i64(m.CreatedUnix)
}

func (m *Volume) dec(d *decoder) {
	m.ID = d.str("id")
	m.Name = d.str("name")
	m.Size = d.i64("size")
	m.Access = d.str("access")
	m.CreatedUnix = d.i64("created")
}

func (m *Volume) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.dec(&d)
	m.Pending = decPending(&d)
	return d.finish("Volume")
}

// VolumeList is the answer to ListVolumes.
type VolumeList struct{ Volumes []Volume }

func (m *VolumeList) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.u64(uint64(len(m.Volumes)))
	for i := range m.Volumes {
		m.Volumes[i].enc(&e)
	}
	return e.b
}

func (m *VolumeList) Unmarshal(b []byte) error {
	d := decoder{b: b}
	n := d.count("volumes")
	m.Volumes = make([]Volume, n)
	for i := 0; i < n && d.err == nil; i++ {
		m.Volumes[i].dec(&d)
	}
	return d.finish("VolumeList")
}

// VolumeRef names a volume by id (DeleteVolume, GetVolume, Attachments).
type VolumeRef struct{ ID string }

func (m *VolumeRef) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.ID)
	return e.b
}

func (m *VolumeRef) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.ID = d.str("id")
	return d.finish("VolumeRef")
}

// Int is a single signed number (Capacity's answer; Leave's: when the
// announcement runs out, Unix nanoseconds).
type Int struct{ Value int64 }

func (m *Int) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.i64(m.Value)
	return e.b
}

func (m *Int) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Value = d.i64("value")
	return d.finish("Int")
}

// AttachRequest names a (volume, node) pair: Grant, Fence, Release. Use, for
// Grant only, is the grant's use; it is encoded only when set, so a request
// without it is the one clients sent before uses existed (read-write).
type AttachRequest struct{ VolumeID, Node, Use string }

func (m *AttachRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.VolumeID)
	e.str(m.Node)
	if m.Use != "" {
		e.str(m.Use)
	}
	return e.b
}

func (m *AttachRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.VolumeID = d.str("volume_id")
	m.Node = d.str("node")
	if d.err == nil && len(d.b) > 0 {
		m.Use = d.str("use")
	}
	return d.finish("AttachRequest")
}

// Epoch is the answer to Grant and Fence. Pending follows the epoch only
// when the request asked to confirm (ConfirmMetadataKey).
type Epoch struct {
	Epoch   uint64
	Pending *Pending
}

func (m *Epoch) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.u64(m.Epoch)
	if m.Pending != nil {
		m.Pending.enc(&e)
	}
	return e.b
}

func (m *Epoch) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Epoch = d.u64("epoch")
	m.Pending = decPending(&d)
	return d.finish("Epoch")
}

// Attachment is one row of an attachment table.
type Attachment struct {
	Node        string
	Epoch       uint64
	State       string
	UpdatedUnix int64
}

// AttachmentList is the answer to Attachments.
type AttachmentList struct {
	VolumeID string
	Items    []Attachment
}

func (m *AttachmentList) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.VolumeID)
	e.u64(uint64(len(m.Items)))
	for _, a := range m.Items {
		e.str(a.Node)
		e.u64(a.Epoch)
		e.str(a.State)
		e.i64(a.UpdatedUnix)
	}
	return e.b
}

func (m *AttachmentList) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.VolumeID = d.str("volume_id")
	n := d.count("items")
	m.Items = make([]Attachment, n)
	for i := 0; i < n && d.err == nil; i++ {
		a := &m.Items[i]
		a.Node = d.str("node")
		a.Epoch = d.u64("epoch")
		a.State = d.str("state")
		a.UpdatedUnix = d.i64("updated")
	}
	return d.finish("AttachmentList")
}

// IOTarget is what every I/O carries: the volume and the (node, epoch) it claims.
type IOTarget struct {
	VolumeID string
	Node     string
	Epoch    uint64
}

func (t *IOTarget) enc(e *encoder) {
	e.str(t.VolumeID)
	e.str(t.Node)
	e.u64(t.Epoch)
}

func (t *IOTarget) dec(d *decoder) {
	t.VolumeID = d.str("volume_id")
	t.Node = d.str("node")
	t.Epoch = d.u64("epoch")
}

// WriteRequest writes Data at Offset under generation Gen of the write
// session of (VolumeID, Node, Epoch), at MemberEpoch, the member epoch of
// the volume's replica set the writer holds. Data comes after the fixed
// fields, so the codec can send it without copying (see Payload); the
// member epoch follows it only when it is not 0 (Trailer), so a request of a
// client from before member epochs is a write at member epoch 0, as a single
// copy is, and a server from before refuses a write at any other member
// epoch as malformed (trailing bytes) instead of writing it unchecked.
type WriteRequest struct {
	IOTarget
	Gen         uint64
	Offset      int64
	Data        []byte
	MemberEpoch uint64

	released []chan struct{} // one per marshal: closed when gRPC frees Data
}

// Header encodes everything but the payload bytes themselves.
func (m *WriteRequest) Header(b []byte) []byte {
	e := encoder{b}
	m.IOTarget.enc(&e)
	e.u64(m.Gen)
	e.i64(m.Offset)
	e.u64(uint64(len(m.Data)))
	return e.b
}

// Payload is the data that follows Header on the wire.
func (m *WriteRequest) Payload() []byte { return m.Data }

// Trailer appends what follows the payload: the member epoch, when it is
// not 0.
func (m *WriteRequest) Trailer(b []byte) []byte {
	if m.MemberEpoch == 0 {
		return b
	}
	e := encoder{b}
	e.u64(m.MemberEpoch)
	return e.b
}

func (m *WriteRequest) MarshalAppend(b []byte) []byte {
	return m.Trailer(append(m.Header(b), m.Data...))
}

func (m *WriteRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.IOTarget.dec(&d)
	m.Gen = d.u64("gen")
	m.Offset = d.i64("offset")
	m.Data = d.bytes("data")
	m.MemberEpoch = decMemberEpoch(&d)
	return d.finish("WriteRequest")
}

// decMemberEpoch reads the optional member epoch at the end of a request:
// absent is 0; present, it is a varint of at most MaxMemberEpoch.
func decMemberEpoch(d *decoder) uint64 {
	if d.err != nil || len(d.b) == 0 {
		return 0
	}
	m := d.u64("member_epoch")
	if d.err == nil && m > MaxMemberEpoch {
		d.fail("member_epoch", "%d is negative or over the limit; allowed are 0 to %d", m, MaxMemberEpoch)
	}
	return m
}

// OpenSessionRequest opens a new generation of the write session of
// (VolumeID, Node, Epoch).
type OpenSessionRequest struct{ IOTarget }

func (m *OpenSessionRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	m.IOTarget.enc(&e)
	return e.b
}

func (m *OpenSessionRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.IOTarget.dec(&d)
	return d.finish("OpenSessionRequest")
}

// Generation is the write session generation an OpenSessionRequest opened.
type Generation struct{ Gen uint64 }

func (m *Generation) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.u64(m.Gen)
	return e.b
}

func (m *Generation) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Gen = d.u64("gen")
	return d.finish("Generation")
}

// ReadRequest reads Length bytes at Offset.
type ReadRequest struct {
	IOTarget
	Offset int64
	Length int64
}

func (m *ReadRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	m.IOTarget.enc(&e)
	e.i64(m.Offset)
	e.i64(m.Length)
	return e.b
}

func (m *ReadRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.IOTarget.dec(&d)
	m.Offset = d.i64("offset")
	m.Length = d.i64("length")
	return d.finish("ReadRequest")
}

// Data is the answer to a read.
type Data struct{ Data []byte }

// Header encodes the payload's length.
func (m *Data) Header(b []byte) []byte {
	e := encoder{b}
	e.u64(uint64(len(m.Data)))
	return e.b
}

// Payload is the data that follows Header on the wire.
func (m *Data) Payload() []byte { return m.Data }

func (m *Data) MarshalAppend(b []byte) []byte { return append(m.Header(b), m.Data...) }

func (m *Data) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Data = d.bytes("data")
	return d.finish("Data")
}

// FlushRequest makes every write acknowledged so far durable.
type FlushRequest struct{ IOTarget }

func (m *FlushRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	m.IOTarget.enc(&e)
	return e.b
}

func (m *FlushRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.IOTarget.dec(&d)
	return d.finish("FlushRequest")
}

// NodeRef names a node (Heartbeat).
type NodeRef struct{ Node string }

func (m *NodeRef) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.Node)
	return e.b
}

func (m *NodeRef) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Node = d.str("node")
	return d.finish("NodeRef")
}

// ConnectivityRequest asks about a node and, optionally, one volume.
type ConnectivityRequest struct {
	Node, VolumeID string
	WithinNanos    int64
}

func (m *ConnectivityRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.Node)
	e.str(m.VolumeID)
	e.i64(m.WithinNanos)
	return e.b
}

func (m *ConnectivityRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Node = d.str("node")
	m.VolumeID = d.str("volume_id")
	m.WithinNanos = d.i64("within")
	return d.finish("ConnectivityRequest")
}

// Connectivity is the answer to ConnectivityRequest. Times are Unix nanoseconds,
// 0 for never.
type Connectivity struct {
	Connected     bool
	LastHeartbeat int64
	IOActive      bool
	LastIO        int64
	Now           int64
}

func (m *Connectivity) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.boolean(m.Connected)
	e.i64(m.LastHeartbeat)
	e.boolean(m.IOActive)
	e.i64(m.LastIO)
	e.i64(m.Now)
	return e.b
}

func (m *Connectivity) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Connected = d.boolean("connected")
	m.LastHeartbeat = d.i64("last_heartbeat")
	m.IOActive = d.boolean("io_active")
	m.LastIO = d.i64("last_io")
	m.Now = d.i64("now")
	return d.finish("Connectivity")
}
