package datapath

import "errors"

// ClearFailureCommand is what an operator runs, followed by the volume's id,
// to end a volume's failure (ErrVolumeFailed).
const ClearFailureCommand = "vigil-datapath clear-failure"

// Sentinel errors. Every error the server or the client returns for one of these
// conditions satisfies errors.Is against the sentinel, on both sides of the wire.
var (
	// ErrNotFound: no volume with that id.
	ErrNotFound = errors.New("datapath: volume not found")
	// ErrAlreadyExists: a volume of that name exists with a different size or
	// access mode.
	ErrAlreadyExists = errors.New("datapath: volume already exists with different parameters")
	// ErrFenced: the I/O carried a stale epoch, or the node was fenced or
	// released; nothing was read or written.
	ErrFenced = errors.New("datapath: fenced")
	// ErrAttachedElsewhere: an RWO volume is held by another node's live grant.
	ErrAttachedElsewhere = errors.New("datapath: volume attached to another node")
	// ErrInUse: the volume still has a live grant, so it cannot be deleted.
	ErrInUse = errors.New("datapath: volume in use")
	// ErrOutOfRange: an offset or length reaches outside the volume.
	ErrOutOfRange = errors.New("datapath: out of range")
	// ErrInvalidArgument: a malformed request (bad name, size, mode, node,
	// oversize I/O, undecodable message).
	ErrInvalidArgument = errors.New("datapath: invalid argument")
	// ErrUnauthenticated: the token is missing, malformed, unknown, expired or
	// for another audience.
	ErrUnauthenticated = errors.New("datapath: unauthenticated")
	// ErrPermissionDenied: the caller proved who it is, but that identity may
	// not make this call (an engine granting or fencing, or acting as
	// another node; the controller writing or heartbeating as a node).
	ErrPermissionDenied = errors.New("datapath: permission denied")
	// ErrAuthUnavailable: the caller's credentials could not be checked now
	// (the Kubernetes API server did not answer a TokenReview); the call was
	// refused and may be retried.
	ErrAuthUnavailable = errors.New("datapath: cannot check credentials now")
	// ErrNoSpace: the server's capacity cannot hold the requested volume.
	ErrNoSpace = errors.New("datapath: no space")
	// ErrReadOnly: a write under a read-only grant (UseReadOnly); nothing was
	// written.
	ErrReadOnly = errors.New("datapath: read-only grant")
	// ErrStaleSession: a write (bulk or gRPC) carried a write session
	// generation that is not the last one opened for its (volume, node,
	// epoch), or none; nothing was written. The client that gave up on a write opens a new generation
	// before it sends anything else, so a late copy of that write is refused
	// with this error instead of landing after a newer one. Sending the write
	// again under the current generation is safe.
	ErrStaleSession = errors.New("datapath: stale write session")
	// ErrVolumeFailed: a flush of the volume's data file to disk failed, so
	// writes acknowledged before it may be lost; every read, write and flush
	// is refused until an operator clears the failure (ClearFailureCommand).
	ErrVolumeFailed = errors.New("datapath: volume failed")
	// ErrNotLeader: the server is not the leader of the control group (a
	// Control, datapath/raftstate), so it neither changed nor read the
	// control state; the message names the leader when one is known.
	// Nothing was proposed: the call may be sent to the leader.
	ErrNotLeader = errors.New("datapath: not the leader of the control group")
	// ErrNotCommitted: a change was proposed to the control group but no
	// majority confirmed it in time (the leader was cut off or lost its
	// leadership). Its outcome is unknown: it may still be committed.
	// Retrying is safe (a grant retried gets the same epoch; a fence retried
	// moves the epoch once more).
	ErrNotCommitted = errors.New("datapath: not committed by a majority of the control group")
	// ErrHeldElsewhere: a change (a grant, fence, release, delete, or a
	// node's fence on every volume) of a volume whose data another server
	// of the control group holds, from a client that does not confirm
	// with that server that it applied the change (a client from before
	// WaitApplied): it would report the change done too early. Nothing was
	// changed; the message names the server.
	ErrHeldElsewhere = errors.New("datapath: volume's data is held by another datapath server")
	// ErrNotHolder: I/O (a read, write, flush or write session) or a read of
	// one volume (GetVolume, Attachments, Connectivity, ClearFailure) reached
	// a server of the control group that does not hold the volume's data.
	// Nothing was read or written; the message names the server that holds
	// it, and a NotHolderError its datapath address, where the call may be
	// sent.
	ErrNotHolder = errors.New("datapath: this datapath server does not hold the volume's data")
	// ErrNotApplied: a change is committed by the control group, but the
	// server that holds the volume's data has not confirmed that it
	// applied it (it is down, cut off, or behind) within the bound. The
	// change is not done yet: that server serves the volume's I/O from
	// the table it applied, so a fenced node may still write there until
	// it applies the fence. The message names the server and its address;
	// calling again (a fence moves the epoch once more) confirms once the
	// server is back.
	ErrNotApplied = errors.New("datapath: committed, not yet applied by the server that holds the data")
	// ErrStaleMemberEpoch: a change of a volume's replica set, or a write
	// to one of its replicas, carried a member epoch that is not the
	// volume's current one: a committed change of its replicas or of
	// which are in sync has replaced the caller's view. Nothing was
	// changed or written; the caller reads the volume again.
	ErrStaleMemberEpoch = errors.New("datapath: stale member epoch")
	// ErrReplicaQuorum: a change of a volume's replica set would leave
	// fewer than a majority of its replicas in sync (or none). Nothing was
	// changed: the volume's I/O waits for a replica to return instead.
	ErrReplicaQuorum = errors.New("datapath: a majority of the volume's replicas must stay in sync")
	// ErrReplicaNotInSync: a read reached a replica of the volume whose
	// copy is not in the in-sync set at the member epoch this server
	// applied, so its data may be stale. Nothing was read; a
	// ReplicaNotInSyncError names the in-sync replicas' datapath
	// addresses, where the read may be sent.
	ErrReplicaNotInSync = errors.New("datapath: this replica of the volume is not in sync")
)

// NotLeaderError is ErrNotLeader naming the leader the server knows: its id
// and the address its datapath serves clients at (empty when unknown). On
// the wire the address travels in the ErrorInfo's metadata
// (LeaderAddressKey), so a client can send the call there.
type NotLeaderError struct {
	Msg           string
	LeaderID      string
	LeaderAddress string
}

func (e *NotLeaderError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// LeaderAddressKey is the ErrorInfo metadata key of a NOT_LEADER refusal
// that holds the leader's datapath address.
const LeaderAddressKey = "leaderAddress"

// NotHolderError is ErrNotHolder naming the server that holds the volume's
// data: its id and the address its datapath serves clients at (empty when
// the group recorded none). On the wire the address travels in the
// ErrorInfo's metadata (HolderAddressKey), and on the bulk channel as the
// first line of the message (BulkError), so a client can send the volume's
// I/O there.
type NotHolderError struct {
	Msg           string
	VolumeID      string
	HolderID      string
	HolderAddress string
}

func (e *NotHolderError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrNotHolder) hold.
func (e *NotHolderError) Is(target error) bool { return target == ErrNotHolder }

// HolderAddressKey is the ErrorInfo metadata key of a NOT_HOLDER refusal
// that holds the datapath address of the server holding the volume.
const HolderAddressKey = "holderAddress"

// ReplicaNotInSyncError is ErrReplicaNotInSync naming the datapath
// addresses of the volume's in-sync replicas (those the group records).
// On the wire they travel in the ErrorInfo's metadata
// (InSyncAddressesKey), comma-separated.
type ReplicaNotInSyncError struct {
	Msg             string
	VolumeID        string
	InSyncAddresses []string
}

func (e *ReplicaNotInSyncError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrReplicaNotInSync) hold.
func (e *ReplicaNotInSyncError) Is(target error) bool { return target == ErrReplicaNotInSync }

// InSyncAddressesKey is the ErrorInfo metadata key of a REPLICA_NOT_IN_SYNC
// refusal that holds the in-sync replicas' datapath addresses.
const InSyncAddressesKey = "inSyncAddresses"
