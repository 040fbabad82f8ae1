package raftstate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/vigil-storage/vigil/datapath"
)

// Op names a command of the state machine.
type Op string

// The commands. Each is one Raft log entry; its time (At) and any id it
// creates travel in it, so every server applies it alike.
const (
	OpCreateVolume Op = "create-volume"
	OpDeleteVolume Op = "delete-volume"
	OpGrant        Op = "grant"
	OpFence        Op = "fence"
	OpFenceNode    Op = "fence-node"
	OpRelease      Op = "release"
	OpLeave        Op = "leave"
	OpClearLeave   Op = "clear-leave"
	OpAddServer    Op = "add-server"
	OpRemoveServer Op = "remove-server"
	// OpImportVolume records a volume with its epoch and attachment table
	// as a data directory of the release before the group held them (its
	// datapath.db); a volume already recorded is left as it is.
	OpImportVolume Op = "import-volume"
	// OpReplicaOutOfSync, OpReplicaInSync and OpReplaceReplica change a
	// volume's replica set by datapath.ReplicaSet's rules, each moving its
	// member epoch on. A server of a release before them refuses them as
	// bad commands, so nothing may propose them until every server of the
	// group runs this release (nothing does yet: no volume is created with
	// more than one replica outside tests).
	OpReplicaOutOfSync Op = "replica-out-of-sync"
	OpReplicaInSync    Op = "replica-in-sync"
	OpReplaceReplica   Op = "replace-replica"
	// OpAbandonFile records that the data file prepared under VolumeID on
	// Server will be removed, no volume naming it: refused if a volume has
	// that id, and from then on a create of that id is refused. A server
	// of a release before it refuses it as a bad command (its state then
	// lacks the record, and it would apply a later create of the id that
	// the others refuse): it is proposed only for a file at least
	// datapath.AbandonedAfter old, which no create reuses in practice.
	OpAbandonFile Op = "abandon-file"
	// OpForceReplicas makes the named replicas of a volume its whole
	// replica set, in sync, at its next member epoch, bypassing the floor,
	// and records who asked, when and why (force.go). Proposed only by an
	// operator's `vigil-datapath force-replica`; a server of a release
	// before it refuses it as a bad command.
	OpForceReplicas Op = "force-replicas"
)

var ops = []Op{OpCreateVolume, OpDeleteVolume, OpGrant, OpFence, OpFenceNode, OpRelease, OpLeave, OpClearLeave, OpAddServer, OpRemoveServer, OpImportVolume,
	OpReplicaOutOfSync, OpReplicaInSync, OpReplaceReplica, OpAbandonFile, OpForceReplicas}

// commandVersion is the first byte of every encoded command: the encoding
// that follows (1: JSON). A server that meets a higher one refuses the entry
// by name rather than guessing.
const commandVersion = 1

// maxCommand bounds an encoded command (a create's name is at most
// datapath.MaxNameLen bytes; nothing else is long).
const maxCommand = 16 << 10

// Command is one change of the control state.
type Command struct {
	Op Op `json:"op"`
	// At is the proposing leader's clock: the time recorded with the change.
	At time.Time `json:"at"`
	// VolumeID: create (the new volume's id, chosen by the proposer), delete,
	// grant, fence, release.
	VolumeID string `json:"volumeID,omitempty"`
	// Name, Size, Access, Server: create. Server is the member that holds the
	// volume's data (abandon-file: the one that holds the file).
	Name   string              `json:"name,omitempty"`
	Size   int64               `json:"size,omitempty"`
	Access datapath.AccessMode `json:"access,omitempty"`
	Server string              `json:"server,omitempty"`
	// Node: grant, fence, fence-node, release, leave, clear-leave.
	Node string `json:"node,omitempty"`
	// Use: grant.
	Use datapath.GrantUse `json:"use,omitempty"`
	// Until: leave (already cut to datapath.MaxLeave by the proposer).
	Until time.Time `json:"until,omitempty"`
	// Member: add-server; remove-server uses its ID only.
	Member *Server `json:"member,omitempty"`
	// Created, Epoch, Rows: import-volume (with VolumeID, Name, Size,
	// Access, Server): the volume's creation time, its highest epoch and its
	// attachment table, as the release before recorded them.
	Created time.Time   `json:"created,omitempty"`
	Epoch   uint64      `json:"epoch,omitempty"`
	Rows    []ImportRow `json:"rows,omitempty"`
	// Replicas: create of a volume with more than one copy (Server first,
	// the holder); absent, Server's is the one copy. Absent in every entry
	// of the releases before replica sets, which therefore read unchanged.
	Replicas []string `json:"replicas,omitempty"`
	// Replica, With, MemberEpoch: replica-out-of-sync, replica-in-sync and
	// replace-replica (With: the server that takes Replica's place); the
	// change was decided at MemberEpoch, and is refused at any other.
	// replica-out-of-sync asked by a volume's writer also carries its Node
	// and attach Epoch, and is refused unless that grant is live.
	Replica     string `json:"replica,omitempty"`
	With        string `json:"with,omitempty"`
	MemberEpoch uint64 `json:"memberEpoch,omitempty"`
	// By and Reason: force-replicas (with VolumeID, MemberEpoch and the
	// forced servers in Replicas): the caller as the proposing server
	// authenticated it, and the operator's reason.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ImportRow is one row of an attachment table as the log records it (an
// imported volume's) and as snapshots do.
type ImportRow struct {
	Node    string                   `json:"node"`
	Epoch   uint64                   `json:"epoch"`
	State   datapath.AttachmentState `json:"state"`
	Use     datapath.GrantUse        `json:"use,omitempty"`
	Updated time.Time                `json:"updated"`
}

// validateImport checks an imported volume: its record, and rows of known
// nodes, states and uses, none listed twice nor with an epoch above the
// volume's.
func (c Command) validateImport() error {
	if err := firstErr(datapath.ValidVolumeID(c.VolumeID), datapath.ValidVolume(c.Name, c.Size, c.Access), validServerID(c.Server)); err != nil {
		return err
	}
	if c.Created.IsZero() {
		return fmt.Errorf("%w: volume %s has no creation time", datapath.ErrInvalidArgument, c.VolumeID)
	}
	seen := map[string]bool{}
	for _, r := range c.Rows {
		if seen[r.Node] {
			return fmt.Errorf("%w: volume %s: node %s has two rows", datapath.ErrInvalidArgument, c.VolumeID, r.Node)
		}
		if err := r.check(c.Epoch); err != nil {
			return fmt.Errorf("volume %s: %w", c.VolumeID, err)
		}
		seen[r.Node] = true
	}
	return nil
}

// check refuses a row of an unknown node, state or use, or with an epoch
// above its volume's.
func (r ImportRow) check(volumeEpoch uint64) error {
	if err := datapath.ValidNode(r.Node); err != nil {
		return err
	}
	switch {
	case r.Epoch > volumeEpoch:
		return fmt.Errorf("%w: node %s has epoch %d above the volume's %d", datapath.ErrInvalidArgument, r.Node, r.Epoch, volumeEpoch)
	case r.State != datapath.StateGranted && r.State != datapath.StateFenced && r.State != datapath.StateReleased:
		return fmt.Errorf("%w: node %s has unknown state %q; known are %s, %s and %s", datapath.ErrInvalidArgument, r.Node, r.State,
			datapath.StateGranted, datapath.StateFenced, datapath.StateReleased)
	}
	if r.Use != "" {
		return r.Use.Validate()
	}
	return nil
}

// rowState is the row as the state machine holds it.
func (r ImportRow) rowState() rowState {
	return rowState{row: datapath.AttachRow{Epoch: r.Epoch, State: r.State, Use: r.Use}, updated: r.Updated.UTC()}
}

// Server is one member of the group: its Raft identity and address, and
// where its datapath serves clients.
type Server struct {
	ID string `json:"id"`
	// RaftAddress is host:port of the Raft transport.
	RaftAddress string `json:"raftAddress"`
	// Node is the Kubernetes node it runs on (may be empty outside a cluster).
	Node string `json:"node,omitempty"`
	// DatapathAddress is host:port of its datapath service (may be empty).
	DatapathAddress string `json:"datapathAddress,omitempty"`
}

// encode is the command as a log entry.
func (c Command) encode() ([]byte, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode %s command: %w", c.Op, err)
	}
	return append([]byte{commandVersion}, data...), nil
}

// decodeCommand reads a log entry strictly (known version, known fields,
// known op, the op's fields present and well formed), so a malformed entry
// changes nothing and says what was wrong.
func decodeCommand(data []byte) (Command, error) {
	var c Command
	switch {
	case len(data) == 0:
		return c, fmt.Errorf("%w: empty entry", ErrBadCommand)
	case len(data) > maxCommand:
		return c, fmt.Errorf("%w: %d bytes; at most %d are allowed", ErrBadCommand, len(data), maxCommand)
	case data[0] != commandVersion:
		return c, fmt.Errorf("%w: encoding version %d; this server knows version %d only", ErrBadCommand, data[0], commandVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data[1:]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Command{}, fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	if dec.More() {
		return Command{}, fmt.Errorf("%w: data after the command", ErrBadCommand)
	}
	if err := c.validate(); err != nil {
		return Command{}, err
	}
	return c, nil
}

// validate checks that the command carries what its op needs, well formed.
func (c Command) validate() error {
	if c.At.IsZero() {
		return fmt.Errorf("%w: %s command without a time", ErrBadCommand, c.Op)
	}
	var err error
	switch c.Op {
	case OpCreateVolume:
		err = firstErr(datapath.ValidVolumeID(c.VolumeID), datapath.ValidVolume(c.Name, c.Size, c.Access), validServerID(c.Server), c.validateReplicas())
	case OpReplicaOutOfSync, OpReplicaInSync, OpReplaceReplica:
		err = c.validateReplicaChange()
	case OpForceReplicas:
		err = c.validateForce()
	case OpImportVolume:
		err = c.validateImport()
	case OpDeleteVolume:
		err = datapath.ValidVolumeID(c.VolumeID)
	case OpAbandonFile:
		err = firstErr(datapath.ValidVolumeID(c.VolumeID), validServerID(c.Server))
	case OpGrant:
		err = firstErr(datapath.ValidVolumeID(c.VolumeID), datapath.ValidNode(c.Node), c.Use.Validate())
	case OpFence, OpRelease:
		err = firstErr(datapath.ValidVolumeID(c.VolumeID), datapath.ValidNode(c.Node))
	case OpFenceNode, OpClearLeave:
		err = datapath.ValidNode(c.Node)
	case OpLeave:
		err = datapath.ValidNode(c.Node)
		if err == nil && !c.Until.After(c.At) {
			err = fmt.Errorf("%w: leave of node %s ends at %s, not after the command's time %s", ErrBadCommand, c.Node, c.Until, c.At)
		}
	case OpAddServer:
		if c.Member == nil {
			return fmt.Errorf("%w: add-server without a member", ErrBadCommand)
		}
		err = c.Member.validate()
	case OpRemoveServer:
		if c.Member == nil {
			return fmt.Errorf("%w: remove-server without a member", ErrBadCommand)
		}
		err = validServerID(c.Member.ID)
	default:
		return fmt.Errorf("%w: unknown op %q; known are %s", ErrBadCommand, c.Op, opList())
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadCommand, c.Op, err)
	}
	return nil
}

func opList() string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// validate checks a member's id and addresses.
func (s Server) validate() error {
	if err := validServerID(s.ID); err != nil {
		return err
	}
	if err := validAddress("raft address of server "+s.ID, s.RaftAddress); err != nil {
		return err
	}
	if s.Node != "" {
		if err := datapath.ValidNode(s.Node); err != nil {
			return err
		}
	}
	if s.DatapathAddress != "" {
		return validAddress("datapath address of server "+s.ID, s.DatapathAddress)
	}
	return nil
}

// maxServerID bounds a server id (a pod or node name fits).
const maxServerID = 253

func validServerID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: server id is empty; it must be 1 to %d printable characters without white space", datapath.ErrInvalidArgument, maxServerID)
	case len(id) > maxServerID:
		return fmt.Errorf("%w: server id %.32q... is %d bytes; at most %d are allowed", datapath.ErrInvalidArgument, id, len(id), maxServerID)
	case strings.ContainsFunc(id, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }):
		return fmt.Errorf("%w: server id %q contains white space or a non-printable character", datapath.ErrInvalidArgument, id)
	}
	return nil
}

// validAddress checks host:port with a port from 1 to 65535.
func validAddress(what, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %v; want host:port", datapath.ErrInvalidArgument, what, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%w: %s %q: port %q; want 1 to 65535", datapath.ErrInvalidArgument, what, addr, port)
	}
	if host == "" {
		return fmt.Errorf("%w: %s %q has no host; want host:port", datapath.ErrInvalidArgument, what, addr)
	}
	return nil
}

// validListenAddress is validAddress with port 0 (any free port) allowed.
func validListenAddress(addr string) error {
	if host, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		return validAddress("raft address", net.JoinHostPort(host, "1"))
	}
	return validAddress("raft address", addr)
}
