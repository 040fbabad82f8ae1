package raftstate

import (
	"errors"

	"github.com/vigil-storage/vigil/datapath"
)

// Sentinel errors. The rules' refusals (datapath.ErrAttachedElsewhere,
// ErrNotFound, ErrInUse, ErrAlreadyExists, ErrInvalidArgument) pass through
// unchanged, so a caller tells them apart exactly as with a Store.
var (
	// ErrNotLeader: this server is not the leader, so it neither changed nor
	// read anything; the error names the leader when one is known. The
	// command was not proposed: retrying it at the leader is safe.
	ErrNotLeader = datapath.ErrNotLeader
	// ErrNotCommitted: the command was proposed but no majority confirmed it
	// in time (the leader was cut off from the others, lost its leadership,
	// or shut down). Its outcome is unknown: it may still be committed. A
	// grant retried gets the same epoch; a fence retried moves the epoch
	// once more; either is safe.
	ErrNotCommitted = datapath.ErrNotCommitted
	// ErrBadCommand: a log entry that is not a well-formed command (unknown
	// op, undecodable bytes, a field missing or malformed). It changes
	// nothing on any server.
	ErrBadCommand = errors.New("raftstate: bad command")
	// ErrHasState: Bootstrap at a server that already has Raft state: it
	// was bootstrapped before, or a leader reached it first. It rejoins its
	// group as it is; a server started with a bootstrap list every time may
	// take this error as success.
	ErrHasState = errors.New("raftstate: server already has Raft state")
	// ErrDiverged: this server applied a log entry that the group later
	// replaced (the Raft library can let a follower commit an old leader's
	// entry that was never committed, see the package documentation). Its
	// state is not the group's, so it answers nothing until its data
	// directory is removed and it is added again.
	ErrDiverged = errors.New("raftstate: this server's state diverged from the group's")
	// ErrClosed: the group was closed.
	ErrClosed = errors.New("raftstate: closed")
)
