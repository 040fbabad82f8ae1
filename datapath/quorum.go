package datapath

import (
	"errors"
	"fmt"
)

// States of a volume as a whole, judged from its replica set and which of
// its replicas' servers answer (JudgeQuorum). `datapath status` shows them
// and the manager counts them.
const (
	// VolumeOK: every replica is in sync and its server answers.
	VolumeOK = "ok"
	// VolumeDegraded: the volume has quorum, so it is served, but some
	// replica is out of sync or its server does not answer.
	VolumeDegraded = "degraded"
	// VolumeNoQuorum: a volume of R>1 replicas of which fewer than
	// WriteQuorum(R) are in sync on servers that answer: its I/O is
	// suspended until enough come back.
	VolumeNoQuorum = "no-quorum"
	// VolumeServerDown: the server of the volume's holder does not answer
	// (a single copy's one server, or the holder of a volume that keeps
	// its quorum): its reads go to the holder alone, so it waits for it,
	// the outage a volume of one replica has always had.
	VolumeServerDown = "server-down"
	// VolumeInvalid: the replica set as reported breaks the set's rules
	// (a server listed twice, an in-sync server that is not a replica…);
	// nothing is judged from it.
	VolumeInvalid = "invalid"
)

// Quorum is JudgeQuorum's verdict on one volume.
type Quorum struct {
	// State is one of the Volume constants.
	State string
	// Live is how many in-sync replicas are on servers that answer; Need
	// is WriteQuorum(R).
	Live, Need int
	// Problem says what is wrong with an invalid set; empty otherwise.
	Problem string
}

// JudgeQuorum judges a volume's replica set against which servers answer
// (reachable; a server it does not know is one that does not answer).
//
// The rule: the volume has quorum when at least WriteQuorum(R) of its
// IN-SYNC replicas are on servers that answer. Only an in-sync replica can
// acknowledge a write — a write is acknowledged once every in-sync replica
// and a majority took it — and only an in-sync one may serve a read, so an
// out-of-sync replica whose server answers does not count: it misses
// writes, and counting it would let a minority of current copies pass for a
// majority. An in-sync replica whose server does not answer does not count
// either: it cannot take the next write, and the in-sync set may shrink
// only by a commit that keeps WriteQuorum(R) in sync, so a volume below the
// count cannot go on writing without serving stale or losing acknowledged
// data. Without quorum a volume of R>1 is VolumeNoQuorum.
//
// With quorum, the holder still matters: it serves every read and cannot
// leave the in-sync set (checkHolder), so a volume whose holder's server
// does not answer waits for it, VolumeServerDown. A single copy (R=1)
// whose server does not answer is that too, not no-quorum: it is the
// outage one server has always been. Otherwise the volume is ok when every
// replica is in sync and answers, degraded when not. A set that breaks the set's rules (a duplicate replica,
// an in-sync server that is not a replica, the holder not a replica, more
// than MaxReplicas) is VolumeInvalid, with the problem named.
func JudgeQuorum(s ReplicaSet, reachable func(server string) bool) Quorum {
	r := len(s.Replicas)
	q := Quorum{Need: WriteQuorum(r)}
	if err := s.Validate(func(string) error { return nil }); err != nil && !errors.Is(err, ErrReplicaQuorum) {
		q.State, q.Problem = VolumeInvalid, err.Error()
		return q
	}
	for _, id := range s.InSync {
		if reachable(id) {
			q.Live++
		}
	}
	switch {
	case q.Live < q.Need && r > 1:
		q.State = VolumeNoQuorum
	case !reachable(s.Holder):
		q.State = VolumeServerDown
	case q.Live == r:
		q.State = VolumeOK
	default:
		q.State = VolumeDegraded
	}
	return q
}

// String says the verdict in a line: the state, and for a volume short of
// quorum how many in-sync replicas answer against how many are needed.
func (q Quorum) String() string {
	switch q.State {
	case VolumeInvalid:
		return fmt.Sprintf("%s: %s", q.State, q.Problem)
	case VolumeNoQuorum, VolumeDegraded:
		return fmt.Sprintf("%s: %d in-sync replicas answer, %d needed", q.State, q.Live, q.Need)
	}
	return q.State
}
