package wire

// MethodForceReplicas asks the leader to let a volume that lost a majority
// of its replicas serve from the ones left (ForceReplicasRequest), the
// controller role only; with DryRun it only says what it would do. The
// answer is ForceReplicasReport.
const MethodForceReplicas = "ForceReplicas"

// ForceReplicasRequest names the volume, the replicas to keep (server ids),
// the member epoch the operator decided at and the operator's reason.
type ForceReplicasRequest struct {
	VolumeID    string
	Replicas    []string
	MemberEpoch uint64
	Reason      string
	DryRun      bool
}

func (m *ForceReplicasRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.VolumeID)
	encStrs(&e, m.Replicas)
	e.u64(m.MemberEpoch)
	e.str(m.Reason)
	e.boolean(m.DryRun)
	return e.b
}

func (m *ForceReplicasRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.VolumeID = d.str("volumeID")
	m.Replicas = decStrs(&d, "replicas")
	m.MemberEpoch = d.u64("memberEpoch")
	m.Reason = d.str("reason")
	m.DryRun = d.boolean("dryRun")
	return d.finish("ForceReplicasRequest")
}

// ForceReplicasReport is a force as the leader decided it: the volume's
// replica set before (Holder, Replicas, InSync, MemberEpoch), the replicas
// whose servers do not answer the leader, and the set after (NewHolder,
// Forced, NewMemberEpoch); Done says it was committed (not a dry run).
type ForceReplicasReport struct {
	VolumeID, Name   string
	Holder           string
	Replicas, InSync []string
	MemberEpoch      uint64
	Unreachable      []string
	NewHolder        string
	Forced           []string
	NewMemberEpoch   uint64
	Done             bool
}

func (m *ForceReplicasReport) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.VolumeID)
	e.str(m.Name)
	e.str(m.Holder)
	encStrs(&e, m.Replicas)
	encStrs(&e, m.InSync)
	e.u64(m.MemberEpoch)
	encStrs(&e, m.Unreachable)
	e.str(m.NewHolder)
	encStrs(&e, m.Forced)
	e.u64(m.NewMemberEpoch)
	e.boolean(m.Done)
	return e.b
}

func (m *ForceReplicasReport) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.VolumeID = d.str("volumeID")
	m.Name = d.str("name")
	m.Holder = d.str("holder")
	m.Replicas = decStrs(&d, "replicas")
	m.InSync = decStrs(&d, "inSync")
	m.MemberEpoch = d.u64("memberEpoch")
	m.Unreachable = decStrs(&d, "unreachable")
	m.NewHolder = d.str("newHolder")
	m.Forced = decStrs(&d, "forced")
	m.NewMemberEpoch = d.u64("newMemberEpoch")
	m.Done = d.boolean("done")
	return d.finish("ForceReplicasReport")
}
