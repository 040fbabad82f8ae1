package datapath

import (
	"fmt"
	"os"

	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// Creating a volume with R replicas. The client places them
// (PlaceReplicas over the servers' free capacity), has the first - the
// holder - make its data file (PrepareVolume, which draws the id), then
// every other replica make its own under that same id (PrepareReplica), and
// commits the create at the leader naming them all
// (CreateReplicatedVolume). Each replica opens its prepared file when it
// applies the create (adopt), and the client confirms with every one of
// them that it did (WaitApplied). A file prepared for a create that is never
// committed is an abandoned file like any other (abandoned.go).

// PrepareReplica is PrepareVolume for a replica of a volume whose id the
// holder drew: the data file is made under id. It is idempotent by name as
// PrepareVolume is; a volume of that name the group has or this server
// prepared, or an open volume or data file of that id, under another id or
// name, is refused with ErrAlreadyExists saying which, nothing made.
func (s *Store) PrepareReplica(id, name string, size int64, mode AccessMode) (Volume, error) {
	if err := ValidVolume(name, size, mode); err != nil {
		return Volume{}, err
	}
	if err := validID(id); err != nil {
		return Volume{}, fmt.Errorf("prepare a replica of volume %q: %w", name, err)
	}
	if s.ctl == nil {
		return Volume{}, fmt.Errorf("%w: prepare a replica of volume %q: this server keeps its control state in datapath.db, not in a control group", ErrInvalidArgument, name)
	}
	if cv, ok := s.appliedByName(name); ok {
		if cv.ID != id || cv.Size != size || cv.Access != mode {
			return Volume{}, fmt.Errorf("%w: volume %q is %s with %d bytes and mode %s in the group; asked to prepare a replica of it as %s with %d bytes and mode %s",
				ErrAlreadyExists, name, cv.ID, cv.Size, cv.Access, id, size, mode)
		}
		return cv.Volume, nil // a create again: nothing to make
	}
	p, existing, err := s.beginPrepare(name, size, mode, id)
	if err != nil || p == nil {
		return existing, err
	}
	v, _, err := s.makePrepared(p)
	return v, err
}

// checkReplicaIDLocked refuses to prepare a volume name under id when id is
// taken: an open volume or a create of another name, or a data file of
// that id on disk. Nothing to check for a new id (""). The caller holds
// s.mu.
func (s *Store) checkReplicaIDLocked(name, id string) error {
	if id == "" {
		return nil
	}
	if v := s.vols[id]; v != nil && v.rec.Name != name {
		return fmt.Errorf("%w: prepare a replica of volume %q as %s: that id is volume %q on this server", ErrAlreadyExists, name, id, v.rec.Name)
	}
	if other, ok := s.names[name]; ok && other != id {
		return fmt.Errorf("%w: prepare a replica of volume %q as %s: volume %q is %s on this server: one name, one id on every replica", ErrAlreadyExists, name, id, name, other)
	}
	if _, busy := s.prov.fileOps[id]; busy {
		return fmt.Errorf("%w: prepare a replica of volume %q as %s: that id is prepared for another volume on this server, or a create or delete of it is in flight", ErrAlreadyExists, name, id)
	}
	if _, err := os.Stat(s.imgPath(id)); err == nil && s.vols[id] == nil {
		return fmt.Errorf("%w: prepare a replica of volume %q as %s: this server has a data file of that id that no volume of this name holds (an earlier create's)", ErrAlreadyExists, name, id)
	}
	return nil
}

// createReplicated commits, at the leader, a volume whose replicas
// (the first its holder, distinct members, 1 to MaxReplicas) each prepared
// its data file under id. Idempotent by name as CreatePlacedVolume is. The
// replicas open their files as they apply it; the caller confirms with them
// (pend).
func (s *Store) createReplicated(id, name string, size int64, mode AccessMode, replicas []string, pend *pendingApply) (Volume, error) {
	if err := firstError(ValidVolume(name, size, mode), validID(id)); err != nil {
		return Volume{}, err
	}
	if len(replicas) == 0 || len(replicas) > MaxReplicas {
		return Volume{}, fmt.Errorf("%w: create volume %q with %d replicas; 1 to %d are allowed", ErrInvalidArgument, name, len(replicas), MaxReplicas)
	}
	if s.ctl == nil {
		return Volume{}, fmt.Errorf("%w: create volume %q with replicas: this server has no control group", ErrInvalidArgument, name)
	}
	if err := s.ctl.CheckLeader(); err != nil {
		return Volume{}, err
	}
	ctx, cancel := s.ctlContext()
	defer cancel()
	cv, err := s.ctl.CreateReplicatedVolume(ctx, id, name, size, mode, replicas)
	if err != nil {
		return Volume{}, fmt.Errorf("create volume %q on servers %v: %w", name, replicas, err)
	}
	if pend != nil {
		pend.addVolume(s, cv.ID, cv.ReplicaSet().Replicas)
		pend.finish(s)
	}
	return cv.Volume, nil
}

// createReplicatedWire is the CreateVolume call with replicas: its server
// must be the first of them.
func createReplicatedWire(s *Store, r *wire.CreateVolumeRequest, p *pendingApply) (wire.Message, error) {
	if r.Server != r.Replicas[0] {
		return nil, fmt.Errorf("%w: create volume %q: its server %q must be its first replica (%q), the holder", ErrInvalidArgument, r.Name, r.Server, r.Replicas[0])
	}
	v, err := s.createReplicated(r.ID, r.Name, r.Size, AccessMode(r.Access), r.Replicas, p)
	out := volumeToWire(v)
	out.Pending = p.toWire()
	return out, err
}

// selfID is this server's id in its control group ("" without one).
func (s *Store) selfID() string {
	if s.ctl == nil {
		return ""
	}
	return s.ctl.Self()
}
