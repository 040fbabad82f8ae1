package datapath

import (
	"fmt"
	"time"
)

// Placement. A create names the server that holds the new volume's data. A
// client given the group's servers asks each for its free capacity, picks
// the one with the most among those that answer, and asks it to make the
// data file first (PrepareVolume: durable, its size reserved, the volume
// not yet in the group); then it commits the create at the leader naming
// that server and the prepared id (CreatePlacedVolume), and asks that
// server to confirm it applied the create (WaitApplied), which opens the
// prepared file (adopt). So no volume is ever committed whose data file is
// not durable on its server.
//
// A create that is never committed (the client died between, or the name
// was taken meanwhile by a volume elsewhere) leaves a data file no volume
// names. Its size stays promised for PrepareHold, so a retried create of the
// name finds the same prepared volume; after it, the promise is dropped and
// the file is kept for a create committed late, until it is AbandonedAfter
// old: then it is removed, once this server's state is settled and no
// volume of the group names it (abandoned.go), at once or after a restart.

// PrepareHold is how long a prepared volume's size stays promised while its
// create is not committed.
const PrepareHold = 2 * time.Minute

// prepareHold is PrepareHold; tests shorten it.
var prepareHold = PrepareHold

// preparedVolume is a volume whose data file PrepareVolume made.
type preparedVolume struct {
	rec   volumeRecord
	timer *time.Timer
}

// PrepareVolume makes the data file of a new volume on this server, durable
// and with its size reserved, for a create the client then commits at the
// leader naming this server (CreatePlacedVolume); it returns the volume and
// the server that holds it. It is idempotent by name: a volume of that name
// the group (as this server applied it) has, on any server, or this server
// prepared, is returned with its server, nothing made (ErrAlreadyExists if
// made with another size or mode). ErrNoSpace when this server cannot hold
// it; a store without a control group refuses.
func (s *Store) PrepareVolume(name string, size int64, mode AccessMode) (Volume, string, error) {
	if err := ValidVolume(name, size, mode); err != nil {
		return Volume{}, "", err
	}
	if s.ctl == nil {
		return Volume{}, "", fmt.Errorf("%w: prepare volume %q: this server keeps its control state in datapath.db, not in a control group; use CreateVolume", ErrInvalidArgument, name)
	}
	if cv, ok := s.appliedByName(name); ok {
		if cv.Size != size || cv.Access != mode {
			return Volume{}, "", fmt.Errorf("%w: volume %q is %s with %d bytes and mode %s on server %s; asked for %d bytes and mode %s",
				ErrAlreadyExists, name, cv.ID, cv.Size, cv.Access, cv.Server, size, mode)
		}
		return cv.Volume, cv.Server, nil // a create again: nothing to make
	}
	p, existing, err := s.beginPrepare(name, size, mode, "")
	if err != nil || p == nil {
		return existing, s.ctl.Self(), err
	}
	return s.makePrepared(p)
}

// makePrepared makes p's data file, durable, and keeps it prepared.
func (s *Store) makePrepared(p *pendingCreate) (Volume, string, error) {
	name := p.rec.Name
	f, err := s.createFile(p)
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		_, err = s.endCreate(p, nil, fmt.Errorf("prepare volume %q: %w", name, fileErr(err)))
		return Volume{}, "", err
	}
	s.prov.at("prepare:file", p.rec.ID)
	s.keepPrepared(p)
	return p.rec.volume(), s.ctl.Self(), nil
}

// appliedByName is the group's volume named name, as this server applied
// it.
func (s *Store) appliedByName(name string) (ControlVolume, bool) {
	for _, cv := range s.ctl.AppliedVolumes() {
		if cv.Name == name {
			return cv, true
		}
	}
	return ControlVolume{}, false
}

// beginPrepare is beginCreate that also finds a volume of the name this
// server prepared.
func (s *Store) beginPrepare(name string, size int64, mode AccessMode, id string) (*pendingCreate, Volume, error) {
	return s.onceNameFree(name, func() (*pendingCreate, Volume, error) { return s.preparedOrPromiseLocked(name, size, mode, id) })
}

// preparedOrPromiseLocked is beginPrepare once nothing of name is in flight;
// id as for promiseLocked.
func (s *Store) preparedOrPromiseLocked(name string, size int64, mode AccessMode, id string) (*pendingCreate, Volume, error) {
	pv := s.prov.prepared[name]
	if pv == nil {
		if err := s.checkReplicaIDLocked(name, id); err != nil {
			return nil, Volume{}, err
		}
		return s.promiseLocked(name, size, mode, id)
	}
	if id != "" && pv.rec.ID != id {
		return nil, Volume{}, fmt.Errorf("%w: volume %q is prepared on this server as %s; asked to prepare a replica of it as %s: one name, one id on every replica",
			ErrAlreadyExists, name, pv.rec.ID, id)
	}
	if r := pv.rec; r.Size != size || r.Access != mode {
		return nil, Volume{}, fmt.Errorf("%w: volume %q is prepared as %s with %d bytes and mode %s; asked for %d bytes and mode %s",
			ErrAlreadyExists, name, r.ID, r.Size, r.Access, size, mode)
	}
	return nil, pv.rec.volume(), nil
}

// keepPrepared ends p's create as prepared: its file stays, its id busy and
// its size promised until the group creates it here (adopt) or PrepareHold
// runs out.
func (s *Store) keepPrepared(p *pendingCreate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.prov.creating, p.rec.Name)
	close(p.done)
	pv := &preparedVolume{rec: p.rec}
	s.prov.prepared[p.rec.Name] = pv
	hold := prepareHold
	pv.timer = time.AfterFunc(hold, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.prov.prepared[p.rec.Name] == pv && s.unprepareLocked(p.rec.Name, p.rec.ID) {
			s.log.Warn("datapath: a prepared volume's create was not committed in time; its data file is no longer counted, and removed once abandoned",
				"volume", p.rec.ID, "name", p.rec.Name, "hold", hold, "removedAfter", AbandonedAfter)
		}
	})
}

// unprepareLocked drops the promise of the volume prepared as name under id,
// if there is one; its file stays. The caller holds s.mu.
func (s *Store) unprepareLocked(name, id string) bool {
	pv := s.prov.prepared[name]
	if pv == nil || pv.rec.ID != id {
		return false
	}
	pv.timer.Stop()
	delete(s.prov.prepared, name)
	delete(s.prov.fileOps, id)
	s.prov.promised -= pv.rec.Size
	return true
}

// CreatePlacedVolume commits, at the leader, a volume another server (or this
// one) prepared under id: the group records it with its data on server. It
// is idempotent by name, as CreateVolume is: a volume of that name already
// in the group is returned as it is (its id and server may differ). A server
// that is not a member is refused with ErrInvalidArgument naming the
// members. The server that holds the data opens the prepared file when it
// applies the create; the caller confirms that with it (WaitApplied).
func (s *Store) CreatePlacedVolume(id, name string, size int64, mode AccessMode, server string) (Volume, error) {
	return s.createPlaced(id, name, size, mode, server, nil)
}

func (s *Store) createPlaced(id, name string, size int64, mode AccessMode, server string, pend *pendingApply) (Volume, error) {
	if err := ValidVolume(name, size, mode); err != nil {
		return Volume{}, err
	}
	if err := validID(id); err != nil {
		return Volume{}, err
	}
	if server == "" {
		return Volume{}, fmt.Errorf("%w: create volume %q: no server named; a placed create names the server that prepared it", ErrInvalidArgument, name)
	}
	if s.ctl == nil {
		return Volume{}, fmt.Errorf("%w: create volume %q on server %s: this server has no control group", ErrInvalidArgument, name, server)
	}
	if err := s.ctl.CheckLeader(); err != nil {
		return Volume{}, err
	}
	ctx, cancel := s.ctlContext()
	defer cancel()
	cv, err := s.ctl.CreateVolumeWithID(ctx, id, name, size, mode, server)
	if err != nil {
		return Volume{}, fmt.Errorf("create volume %q on server %s: %w", name, server, err)
	}
	if pend != nil {
		pend.addVolume(s, cv.ID, cv.ReplicaSet().Replicas)
		pend.finish(s)
	}
	return cv.Volume, nil
}

// forgetPrepared drops the promise of a volume this server prepared under
// cv's name once the group created that name as another volume (cv, on
// another server): the prepared id can no longer be committed under it. Its
// file is removed once abandoned (RemoveAbandoned).
func (s *Store) forgetPrepared(cv ControlVolume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pv := s.prov.prepared[cv.Name]
	if pv == nil || pv.rec.ID == cv.ID || !s.unprepareLocked(cv.Name, pv.rec.ID) {
		return
	}
	s.log.Warn("datapath: the group created a prepared volume's name as another volume; the prepared data file is no longer counted, and removed once abandoned",
		"prepared", pv.rec.ID, "name", cv.Name, "volume", cv.ID, "server", cv.Server)
}
