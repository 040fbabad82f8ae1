package datapath

import (
	"errors"
	"fmt"
)

// With a control group each volume's data is on one server, its holder
// (ControlVolume.Server), and only the holder serves its I/O. Another
// server of the group that gets a read, a write, a flush, a write session
// or a read of one volume (GetVolume, Attachments, Connectivity,
// ClearFailure) for it refuses with ErrNotHolder, naming the holder's
// datapath address (NotHolderError), before anything is read or written:
// the client sends the volume's calls there (datapath/client). A volume the
// group does not know is ErrNotFound, as without a group.

// lookupHeld is lookup for the calls only the holder serves: a volume this
// server does not hold but the group places on another server is refused
// with a NotHolderError naming that server.
func (s *Store) lookupHeld(id string) (*volume, error) {
	v, err := s.lookup(id)
	if errors.Is(err, ErrNotFound) {
		if nh := s.heldElsewhere(id); nh != nil {
			return nil, nh
		}
	}
	return v, err
}

// heldElsewhere returns a NotHolderError when the control group places
// volume id's data on another server; nil without a group, for a volume
// the group does not know, and for one of this server's.
func (s *Store) heldElsewhere(id string) error {
	if s.ctl == nil {
		return nil
	}
	cv, _, ok := s.ctl.AppliedVolume(id)
	if !ok || cv.Server == s.ctl.Self() {
		return nil
	}
	addr := ""
	for _, m := range s.ctl.GroupStatus() {
		if m.ID == cv.Server {
			addr = m.Address
		}
	}
	where := "at " + addr
	if addr == "" {
		where = "whose address the group does not record"
	}
	return &NotHolderError{VolumeID: id, HolderID: cv.Server, HolderAddress: addr,
		Msg: fmt.Sprintf("%v: volume %s: its data is on datapath server %s (%s), not on this one (%s); nothing was read or written: send its I/O there",
			ErrNotHolder, id, cv.Server, where, s.ctl.Self())}
}
