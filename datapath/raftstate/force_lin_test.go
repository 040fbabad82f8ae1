package raftstate

import (
	"github.com/anishathalye/porcupine"

	"github.com/vigil-storage/vigil/datapath"
)

// The linearizability check's model of a force (linearizability_test.go),
// written apart from forceSet so that a fault there shows too: a force is
// a member epoch step like the others.

// linForced are the sets a client forces: each replica alone, and two.
var linForced = [][3]bool{{true, false, false}, {false, true, false}, {false, false, true}, {true, true, false}, {true, false, true}}

// forcedIDs is the input's forced replicas as server ids, in order.
func (in linInput) forcedIDs() []string {
	var ids []string
	for i, f := range in.forced {
		if f {
			ids = append(ids, linServers[i])
		}
	}
	return ids
}

// replicas is R, the replicas a force has not dropped.
func (s linState) replicas() int {
	r := 0
	for _, d := range s.dropped {
		if !d {
			r++
		}
	}
	return r
}

// linForceStep: a force asked at another member epoch than the volume's is
// refused as stale; one of a single copy, naming a dropped replica, naming
// every replica left, or naming out-of-sync replicas next to in-sync ones
// is refused as invalid; any other makes the forced replicas the whole
// set, in sync, the holder kept if forced (else the first forced), and
// moves the member epoch on by one.
func linForceStep(s linState, in linInput, out linOutput) (bool, any) {
	next, n, inSync, dropped := s, 0, 0, false
	for i, f := range in.forced {
		if f {
			n++
			dropped = dropped || s.dropped[i]
			if !s.outOfSync[i] {
				inSync++
			}
		}
	}
	var wantErr error
	switch {
	case in.asked != s.memberEpoch:
		wantErr = datapath.ErrStaleMemberEpoch
	case s.replicas() == 1 || dropped || n >= s.replicas() || inSync > 0 && inSync < n:
		wantErr = datapath.ErrInvalidArgument
	default:
		for i, f := range in.forced {
			next.dropped[i], next.outOfSync[i] = !f, false
		}
		if !in.forced[s.holder] {
			for i, f := range in.forced {
				if f {
					next.holder = i
					break
				}
			}
		}
		next.memberEpoch++
	}
	switch {
	case out.unknown:
		return true, next
	case out.stale:
		return wantErr == datapath.ErrStaleMemberEpoch, s
	case out.invalid:
		return wantErr == datapath.ErrInvalidArgument, s
	case wantErr != nil || out.refused || out.quorum:
		return false, s
	}
	return out.memberEpoch == next.memberEpoch && out.inSync == next.inSync(), next
}

// forcesDone counts the forces acknowledged as done.
func forcesDone(ops []porcupine.Operation) int {
	n := 0
	for _, op := range ops {
		if in, out := op.Input.(linInput), op.Output.(linOutput); in.op == "force" && !out.unknown && !out.stale && !out.invalid && out.memberEpoch > in.asked {
			n++
		}
	}
	return n
}
