// Package fenceapi is the contract between the controller and a fence back
// end: a storage that can fence a node out of a volume (revoke its grant, so
// its writes are refused) and say what it knows of nodes and volumes. It owns
// the contract's value types (Grant, Fenced, Report, FailedVolume) and
// ErrUnavailable, and nothing else: no behaviour, no dependencies. The
// controller declares the interface it calls (controller.FenceBackend); each
// back end implements it (datapath/fencebackend for the datapath) and must
// pass fenceapi/fenceapitest's conformance suite. Neither side imports the
// other.
package fenceapi

import (
	"errors"
	"time"
)

// ErrUnavailable is returned (wrapped) by a back end that cannot be reached or
// cannot answer: nothing is proven, and the caller must not act on a guess.
var ErrUnavailable = errors.New("fencing: back end unavailable")

// State is one node's standing on one volume.
type State string

const (
	// StateGranted: the node holds a live grant and can do I/O.
	StateGranted State = "granted"
	// StateFenced: the node was fenced; every I/O from it is refused.
	StateFenced State = "fenced"
	// StateReleased: the node's grant ended cleanly; every I/O from it is refused.
	StateReleased State = "released"
	// StateUnknown: the back end could not ask the part of itself that
	// holds the volume (a datapath server that does not answer): the node
	// may hold a live grant, so it counts as live.
	StateUnknown State = "unknown"
)

// Live reports whether a node in this state can still write (or, unknown,
// may).
func (s State) Live() bool { return s == StateGranted || s == StateUnknown }

// Grant is one node's row for one volume: the last thing that happened between
// them on the back end.
type Grant struct {
	// Handle is the CSI volume handle (the PV's spec.csi.volumeHandle).
	Handle string
	// Epoch is the epoch of the grant or, for a fenced node, the epoch the volume
	// moved to when the node was fenced.
	Epoch uint64
	State State
	// Updated is when the row last changed, on the back end's clock.
	Updated time.Time
}

// Fenced is one volume fenced by FenceNode or FenceVolumes.
type Fenced struct {
	Handle string
	// Epoch is the volume's new epoch; the fenced node's I/O carries an older one.
	Epoch uint64
}

// NodeConnectivity is what a back end knows about one node's link to the
// storage: when its per-node agent last proved it is alive.
type NodeConnectivity struct {
	Node string
	// LastHeartbeat is the node's last heartbeat (or I/O) seen by the back end
	// since Report.Since; zero if none.
	LastHeartbeat time.Time
	// LeavingUntil, when after Report.Now, says the node's agent announced a
	// graceful stop (a rolling update): its silence until then is not a failure.
	LeavingUntil time.Time
}

// Report is a back end's view of every node it has heard from.
type Report struct {
	// Now is the back end's clock when it answered; ages are measured against it,
	// so the caller's clock does not matter.
	Now time.Time
	// Since is when the back end started watching (its process start): a node
	// silent since then may simply not have spoken yet.
	Since time.Time
	Nodes []NodeConnectivity
}

// Silence is how long node has been silent at r.Now: since its last heartbeat,
// or since r.Since when it has not spoken since the back end started. ok is
// false when the node announced a graceful stop that has not run out, or when
// the report does not name the node at all (it never had an agent here).
func (r Report) Silence(node string) (d time.Duration, ok bool) {
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if n.Node != node {
			continue
		}
		if n.LeavingUntil.After(r.Now) {
			return 0, false
		}
		last := n.LastHeartbeat
		if last.Before(r.Since) {
			last = r.Since
		}
		if n.LeavingUntil.After(last) {
			last = n.LeavingUntil
		}
		return max(r.Now.Sub(last), 0), true
	}
	return 0, false
}

// FailedVolume is a volume the back end refuses all I/O on until an operator
// acts: writing its data to disk failed, so writes it acknowledged may be
// lost.
type FailedVolume struct {
	// Handle is the CSI volume handle (the PV's spec.csi.volumeHandle).
	Handle string
	// Since is when it failed, on the back end's clock.
	Since time.Time
	// Reason says what failed, in the back end's words.
	Reason string
	// Clear is what an operator runs, after checking the disk and the
	// volume's data, to let the volume take I/O again.
	Clear string
}

// Roles of a storage server (Server.Role).
const (
	RoleLeader      = "leader"
	RoleFollower    = "follower"
	RoleCandidate   = "candidate"
	RoleUnreachable = "unreachable"
)

// Server is one server of a storage back end made of several (the
// datapath's control group), as the manager reached it.
type Server struct {
	ID, Node, Address string
	// Role is one of the Role constants: RoleUnreachable when the server
	// did not answer the manager.
	Role string
	// LastContact is the server's last contact with the group's leader:
	// zero for the leader, an unreachable server, and when unknown.
	LastContact time.Time
}

// Placement is which server holds each volume's data, for a back end whose
// servers each hold some volumes: losing a server makes only its volumes
// unavailable.
type Placement struct {
	// Servers are the back end's servers; none for a back end of one.
	Servers []Server
	// Holders maps a volume's handle to the ID of the server holding its
	// data; nil when it is not known now (the group's leader did not
	// answer), which proves nothing about any volume.
	Holders map[string]string
	// Replicas maps the handle of a volume with more than one replica (or
	// a replica set the back end found invalid) to its replicas and state.
	// A volume not in it is a single copy on its holder, as before
	// replicas existed; nil when Holders is.
	Replicas map[string]VolumeReplicas
}

// States of a volume of several replicas (VolumeReplicas.State).
const (
	// VolumeOK: every replica is in sync and its server answers.
	VolumeOK = "ok"
	// VolumeDegraded: a majority of the replicas are in sync on servers
	// that answer, the holder's among them, so the volume is served, but
	// not all of them.
	VolumeDegraded = "degraded"
	// VolumeNoQuorum: fewer than a majority of the replicas are in sync on
	// servers that answer: the volume's I/O is suspended.
	VolumeNoQuorum = "no-quorum"
	// VolumeServerDown: the server of the volume's holder, which serves
	// its reads, does not answer; a majority of its replicas is in sync on
	// servers that do.
	VolumeServerDown = "server-down"
	// VolumeInvalid: the replica set as reported breaks its rules;
	// Problem says how, and nothing is judged from it.
	VolumeInvalid = "invalid"
)

// Replica is one copy of a volume's data: the ID of the server holding it
// (a Server's ID, or one no Server has) and whether it is in sync.
type Replica struct {
	Server string
	InSync bool
}

// VolumeReplicas is one volume's replicas, in their recorded order (the
// holder first), and its state as the back end judged it from them and
// from which servers answer.
type VolumeReplicas struct {
	Replicas []Replica
	// State is one of the Volume constants.
	State string
	// Live is how many in-sync replicas are on servers that answer; Need
	// how many the volume must have to be served (a majority).
	Live, Need int
	// Problem says what is wrong with an invalid replica set.
	Problem string
}
