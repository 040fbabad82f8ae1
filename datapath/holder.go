package datapath

import (
	"errors"
	"fmt"
	"os"
)

// With a control group each volume's data is on the servers of its replica
// set (one, its holder, for a volume of one copy), and only they serve its
// I/O (replicaio.go). Another server of the group that gets a read, a
// write, a flush, a write session or a read of one volume (GetVolume,
// Attachments, Connectivity, ClearFailure) for it refuses with
// ErrNotHolder, naming the holder's datapath address (NotHolderError),
// before anything is read or written: the client sends the volume's calls
// there (datapath/client). A volume the group does not know is ErrNotFound,
// as without a group, unless this server has a data file of that id
// (notAppliedYet).

// lookupHeld is lookup for the calls only a replica serves: a volume of
// which this server holds no replica but the group places on another server is refused
// with a NotHolderError naming that server. Nothing is answered before the
// server has caught up with the group since it started (caughtup.go).
func (s *Store) lookupHeld(id string) (*volume, error) {
	if err := s.errNotCaughtUp(); err != nil {
		return nil, err
	}
	v, err := s.lookup(id)
	if errors.Is(err, ErrNotFound) {
		if nh := s.heldElsewhere(id); nh != nil {
			return nil, nh
		}
		if na := s.notAppliedYet(id); na != nil {
			return nil, na
		}
	}
	return v, err
}

// notAppliedYet returns ErrNotApplied when this server has a data file of
// volume id that its applied state of the group does not name: a server
// started again answers before it has applied the group's log (a follower
// serves once it knows a leader), and the volumes it holds whose create it
// has not applied yet are not open; it opens each as it applies its create
// (adopt). ErrNotFound there would be a false, definitive answer from a
// state that is behind: an engine fails the kernel's I/O on it at once, and
// ext4 takes an EIO on its journal as fatal, so the volume stays unusable
// after the server has caught up (the chaos suite's power cut of the
// leader's node found it). ErrNotApplied is Unavailable: the caller sends
// it again. nil without a group and without such a file.
func (s *Store) notAppliedYet(id string) error {
	if s.ctl == nil {
		return nil
	}
	if _, err := os.Stat(s.imgPath(id)); err != nil {
		return nil
	}
	return fmt.Errorf("%w: volume %s: server %s has its data file but has not applied its create yet (catching up with the group's log after a start); nothing was read or written: send it again",
		ErrNotApplied, id, s.ctl.Self())
}

// heldElsewhere returns a NotHolderError when the control group places
// volume id's data on another server and no replica of it on this one; nil
// without a group, for a volume the group does not know, and for one this
// server holds. A replica of this server that is not open (its data file
// is missing, or it was replaced here) is ErrNotApplied.
func (s *Store) heldElsewhere(id string) error {
	if s.ctl == nil {
		return nil
	}
	cv, _, ok := s.ctl.AppliedVolume(id)
	if !ok || cv.Server == s.ctl.Self() {
		return nil
	}
	if s.isReplicaHere(cv) {
		if _, err := s.lookup(id); err == nil {
			return nil // its copy is open here
		}
		return s.replicaNotOpen(id)
	}
	addr := s.addresses()[cv.Server]
	where := "at " + addr
	if addr == "" {
		where = "whose address the group does not record"
	}
	return &NotHolderError{VolumeID: id, HolderID: cv.Server, HolderAddress: addr,
		Msg: fmt.Sprintf("%v: volume %s: its data is on datapath server %s (%s), not on this one (%s); nothing was read or written: send its I/O there",
			ErrNotHolder, id, cv.Server, where, s.ctl.Self())}
}

// replicaNotOpen is the refusal of I/O at a replica of volume id whose copy
// this server does not have open.
func (s *Store) replicaNotOpen(id string) error {
	return fmt.Errorf("%w: volume %s: server %s is one of its replicas but has no open copy of its data (its data file was not made here, or cannot be opened); nothing was read or written: use another replica",
		ErrNotApplied, id, s.ctl.Self())
}
