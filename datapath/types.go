package datapath

import (
	"fmt"
	"time"
)

// AccessMode says how many nodes may write a volume at once.
type AccessMode string

const (
	// AccessRWO (ReadWriteOnce): at most one node holds a live grant at a time.
	AccessRWO AccessMode = "rwo"
	// AccessRWX (ReadWriteMany): any number of nodes may hold live grants; each
	// node still has its own epoch and can be fenced on its own.
	AccessRWX AccessMode = "rwx"
)

// Validate reports whether m is one of the known access modes.
func (m AccessMode) Validate() error {
	switch m {
	case AccessRWO, AccessRWX:
		return nil
	}
	return fmt.Errorf("%w: access mode %q: allowed are %q and %q", ErrInvalidArgument, string(m), AccessRWO, AccessRWX)
}

// GrantUse says what a node does with its grant; the server records it with
// the grant and enforces it.
type GrantUse string

const (
	// UseReadWrite: reads and writes of the raw block device. On an RWX volume
	// several nodes may hold it at once; their applications coordinate, as on
	// any shared disk. A grant recorded before uses existed means this.
	UseReadWrite GrantUse = "rw"
	// UseFilesystemWriter: a filesystem mounted read-write. It is the volume's
	// only writer, whatever the access mode: a filesystem such as ext4 mounted
	// read-write on two nodes is corrupted, so while another node holds a live
	// writing grant it is refused with ErrAttachedElsewhere, and while it is
	// live no other node gets a writing grant.
	UseFilesystemWriter GrantUse = "rw-fs"
	// UseReadOnly: reads only; every write is refused with ErrReadOnly.
	UseReadOnly GrantUse = "ro"
)

// Validate reports whether u is one of the known uses.
func (u GrantUse) Validate() error {
	switch u {
	case UseReadWrite, UseFilesystemWriter, UseReadOnly:
		return nil
	}
	return fmt.Errorf("%w: grant use %q: allowed are %q, %q and %q", ErrInvalidArgument, string(u), UseReadWrite, UseFilesystemWriter, UseReadOnly)
}

// Writes reports whether a grant of this use may write.
func (u GrantUse) Writes() bool { return u != UseReadOnly }

// Volume is a block volume held by the server.
type Volume struct {
	// ID is assigned by the server ("vol-" and 16 hex digits) and never reused.
	ID string
	// Name is the caller's name for the volume (for CSI: the PV name); unique.
	Name string
	// Size is the volume size in bytes.
	Size int64
	// Access is the access mode fixed at creation.
	Access AccessMode
	// Created is when the server created the volume (UTC).
	Created time.Time
}

// AttachmentState is the state of one node's attachment to a volume.
type AttachmentState string

const (
	// StateGranted: the node holds a live grant; I/O with its epoch is accepted.
	StateGranted AttachmentState = "granted"
	// StateFenced: the node was fenced; every I/O from it is refused with ErrFenced
	// until it is granted again (with a new, higher epoch).
	StateFenced AttachmentState = "fenced"
	// StateReleased: the grant was released; I/O from the node is refused with
	// ErrFenced until it is granted again.
	StateReleased AttachmentState = "released"
)

// Attachment is one row of a volume's attachment table: the last thing that
// happened between the volume and one node.
type Attachment struct {
	VolumeID string
	Node     string
	// Epoch is the epoch of the node's grant, or for a fenced node the epoch the
	// volume moved to when the node was fenced.
	Epoch   uint64
	State   AttachmentState
	Updated time.Time
	// Use is what a live grant allows (see GrantUse). The Store fills it in;
	// the wire does not carry it yet, so the client leaves it empty.
	Use GrantUse
}

// Live reports whether the attachment is a grant that has been neither fenced nor
// released.
func (a Attachment) Live() bool { return a.State == StateGranted }

// Connectivity answers "is node N connected, and has it done I/O on volume V
// within T".
type Connectivity struct {
	Node     string
	VolumeID string
	// Window is the T the question was asked with.
	Window time.Duration
	// Connected is true when the node heartbeated, or did I/O on any volume,
	// within Window.
	Connected bool
	// LastHeartbeat is the node's last heartbeat seen by this server process; zero
	// if none since the server started.
	LastHeartbeat time.Time
	// IOActive is true when the node did I/O on VolumeID within Window (false when
	// VolumeID is empty).
	IOActive bool
	// LastIO is the node's last I/O on VolumeID (zero if none since start).
	LastIO time.Time
	// Now is the server's clock when it answered.
	Now time.Time
}

// FencedVolume is one volume fenced by FenceNode.
type FencedVolume struct {
	VolumeID string
	// Epoch is the volume's new epoch; the fenced node's I/O carries an older one.
	Epoch uint64
}

// NodeStatus is what the server knows about one node (see NodesReport).
type NodeStatus struct {
	Node string
	// LastHeartbeat is the node's last heartbeat seen by this server process;
	// zero if none since it started.
	LastHeartbeat time.Time
	// LastIO is the node's last read, write or flush on any volume seen by this
	// server process; zero if none since it started.
	LastIO time.Time
	// LeavingUntil, when not zero, is the end of a graceful stop the node
	// announced with Leave and has not yet cleared with a heartbeat. It may lie
	// in the past: the node's silence then counts from it.
	LeavingUntil time.Time
	// LiveGrants is the number of volumes on which the node holds a live grant.
	LiveGrants int
}

// LastSeen is the later of the node's last heartbeat and its last I/O.
func (n NodeStatus) LastSeen() time.Time {
	if n.LastIO.After(n.LastHeartbeat) {
		return n.LastIO
	}
	return n.LastHeartbeat
}

// NodesReport is the server's view of every node it knows (Nodes): each node
// that heartbeated or did I/O since the server started, holds a live grant, or
// announced a graceful stop that no heartbeat has cleared yet.
type NodesReport struct {
	// Now is the server's clock when it answered.
	Now time.Time
	// Started is when this server process opened its store: heartbeats and I/O
	// before it are not known.
	Started time.Time
	// Nodes are sorted by name.
	Nodes []NodeStatus
}

// Roles of a control group's server (ServerStatus.Role); unreachable is the
// role of one that did not answer (or, on the leader, misses its
// heartbeats).
const (
	RoleLeader      = "leader"
	RoleFollower    = "follower"
	RoleCandidate   = "candidate"
	RoleUnreachable = "unreachable"
)

// ServerStatus is one server of the control group.
type ServerStatus struct {
	ID string
	// Node is the Kubernetes node it runs on, when recorded.
	Node string
	// Address is where its datapath serves clients; RaftAddress its Raft
	// transport.
	Address     string
	RaftAddress string
	// Role is leader, follower, candidate or unreachable; empty when the
	// server that answered cannot tell (another follower).
	Role string
	// LastContact is the last time it heard from the leader (zero on the
	// leader, and when unknown); AppliedIndex the last log index it applied.
	// Both are known only for the server that answered (Self).
	LastContact  time.Time
	AppliedIndex uint64
	Self         bool
}

// ServersReport is the control group as one server sees it (Servers).
type ServersReport struct {
	Now     time.Time
	Servers []ServerStatus
}

// Limits enforced by the server (and checked early by the client).
const (
	// MaxIOSize is the largest read or write in one request.
	MaxIOSize = 4 << 20
	// MaxVolumeSize is the largest volume (8 TiB; ext4 caps a file at 16 TiB).
	MaxVolumeSize int64 = 8 << 40
	// MaxNameLen is the longest volume name.
	MaxNameLen = 256
	// MaxNodeLen is the longest node name (a Kubernetes node name is ≤ 253).
	MaxNodeLen = 253
	// MaxLeave is the longest graceful stop a node may announce with Leave; a
	// longer one is cut to it, so a node that never comes back is silent again
	// after at most this long.
	MaxLeave = 2 * time.Minute
	// LeaveSettle is how long after a Leave a heartbeat is still taken as one
	// sent before it (requests on different streams may be handled out of
	// order), so it does not clear the announcement.
	LeaveSettle = time.Second
)

// Transport settings shared by the server and the client.
const (
	// TokenMetadataKey is the gRPC metadata key carrying "Bearer <token>".
	TokenMetadataKey = "authorization"
	// WindowSize is the HTTP/2 stream and connection flow-control window: large
	// enough that a 1 MiB write is not throttled by window updates.
	WindowSize = 16 << 20
	// SocketBufferSize is gRPC's read and write buffer size per connection.
	SocketBufferSize = 256 << 10
)

// GroupStatus is the control group as a client that asked every server sees
// it (client.GroupStatus): each member as it reports itself, or in role
// unreachable when it did not answer; and the volumes with the server holding
// each, as the leader applied them.
type GroupStatus struct {
	Servers []ServerStatus
	// Volumes is known only when the leader answered (VolumesKnown).
	Volumes      []GroupVolume
	VolumesKnown bool
}
