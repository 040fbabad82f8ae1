package wire

// MethodMarkOutOfSync asks the control group's leader to take a replica of
// a volume out of its in-sync set: the writer's engine asks it for a
// replica that missed a write's deadline, before it acknowledges the write
// without that replica.
const MethodMarkOutOfSync = "MarkReplicaOutOfSync"

// MarkOutOfSyncRequest takes Replica (a server id) of VolumeID out of the
// in-sync set, a change decided at MemberEpoch, asked by the writer Node at
// its attach Epoch (Node empty and Epoch 0: the controller).
type MarkOutOfSyncRequest struct {
	VolumeID, Replica string
	MemberEpoch       uint64
	Node              string
	Epoch             uint64
}

func (m *MarkOutOfSyncRequest) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.VolumeID)
	e.str(m.Replica)
	e.u64(m.MemberEpoch)
	e.str(m.Node)
	e.u64(m.Epoch)
	return e.b
}

func (m *MarkOutOfSyncRequest) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.VolumeID = d.str("volume_id")
	m.Replica = d.str("replica")
	m.MemberEpoch = d.u64("member_epoch")
	m.Node = d.str("node")
	m.Epoch = d.u64("epoch")
	return d.finish("MarkOutOfSyncRequest")
}

// ReplicaSetAnswer is a volume's replica set: its holder, its replicas,
// those in sync, and its member epoch.
type ReplicaSetAnswer struct {
	Holder           string
	Replicas, InSync []string
	MemberEpoch      uint64
}

func (m *ReplicaSetAnswer) MarshalAppend(b []byte) []byte {
	e := encoder{b}
	e.str(m.Holder)
	encStrs(&e, m.Replicas)
	encStrs(&e, m.InSync)
	e.u64(m.MemberEpoch)
	return e.b
}

func (m *ReplicaSetAnswer) Unmarshal(b []byte) error {
	d := decoder{b: b}
	m.Holder = d.str("holder")
	m.Replicas = decStrs(&d, "replicas")
	m.InSync = decStrs(&d, "in_sync")
	m.MemberEpoch = d.u64("member_epoch")
	return d.finish("ReplicaSetAnswer")
}
