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

// ForcedMetadataKey, sent with GroupVolumes along with
// ReplicasMetadataKey, asks for each volume's last force
// (GroupVolumeList.WithForced). A server from before forces ignores it and
// answers without them; a client from before does not send it.
const ForcedMetadataKey = "vigil-forced"

// ForceRecord is a volume's last force in a GroupVolumeList.
type ForceRecord struct {
	By, Reason                           string
	AtUnix                               int64 // nanoseconds
	Forced, ReplicasBefore, InSyncBefore []string
	MemberEpoch                          uint64
}

// encForced writes the forced section: for each item, whether it was
// forced, then its record.
func encForced(e *encoder, items []GroupVolume) {
	for _, v := range items {
		e.boolean(v.Forced != nil)
		if f := v.Forced; f != nil {
			e.str(f.By)
			e.str(f.Reason)
			e.i64(f.AtUnix)
			encStrs(e, f.Forced)
			encStrs(e, f.ReplicasBefore)
			encStrs(e, f.InSyncBefore)
			e.u64(f.MemberEpoch)
		}
	}
}

// decForced reads the forced section.
func decForced(d *decoder, items []GroupVolume) {
	for i := 0; i < len(items) && d.err == nil; i++ {
		if !d.boolean("forced") {
			continue
		}
		f := &ForceRecord{By: d.str("forced_by"), Reason: d.str("forced_reason"), AtUnix: d.i64("forced_at")}
		f.Forced = decStrs(d, "forced_replicas")
		f.ReplicasBefore = decStrs(d, "forced_replicas_before")
		f.InSyncBefore = decStrs(d, "forced_in_sync_before")
		f.MemberEpoch = d.u64("forced_member_epoch")
		items[i].Forced = f
	}
}
