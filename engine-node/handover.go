package enginenode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vigil-storage/vigil/engine-node/fdkeeper"
	"github.com/vigil-storage/vigil/engine-node/fusedisk"
	"github.com/vigil-storage/vigil/engine-node/loopdev"
)

// FDKeeper holds the FUSE connections of staged volumes across engine
// restarts (package fdkeeper; fdkeeper.Client satisfies it). Errors for a
// volume it holds nothing for satisfy errors.Is(err, fdkeeper.ErrNotFound).
type FDKeeper interface {
	Put(volume string, fd int, meta any) error
	Get(volume string, meta any) (int, error)
	Drop(volume string) error
	List() ([]fdkeeper.Entry, error)
}

// keptDisk is what the engine deposits with a volume's descriptor: the
// disk's negotiated connection and the epoch its stack was built for.
type keptDisk struct {
	Disk  fusedisk.Meta `json:"disk"`
	Epoch uint64        `json:"epoch"`
}

// deposit hands the keeper the connection of a freshly mounted disk. A
// keeper that cannot take it costs the volume its survival of an engine
// restart, not its stage: that is said in a log line.
func (n *NodeServer) deposit(rec StageRecord, d *fusedisk.Disk) {
	if n.cfg.Keeper == nil {
		return
	}
	if err := n.cfg.Keeper.Put(rec.VolumeID, d.Fd(), keptDisk{Disk: d.Meta(), Epoch: rec.Epoch}); err != nil {
		n.log.Warn("the fd keeper did not take the volume's FUSE connection: an engine restart will break its I/O",
			"volume", rec.VolumeID, "err", err)
	}
}

// dropKept makes the keeper let go of a volume's connection (after its disk
// is unmounted, or when it is not adopted).
func (n *NodeServer) dropKept(volumeID string) {
	if n.cfg.Keeper == nil {
		return
	}
	if err := n.cfg.Keeper.Drop(volumeID); err != nil && !errors.Is(err, fdkeeper.ErrNotFound) {
		n.log.Warn("the fd keeper did not drop the volume's FUSE connection", "volume", volumeID, "err", err)
	}
}

// adopt serves a staged volume again after a restart without touching its
// stack: when the keeper holds the FUSE connection of the same epoch, and
// the FUSE mount, the loop device over it and (Filesystem mode) the staging
// mount are all still there, a new backend at the journaled epoch serves
// the same connection, and the pods' open files never notice. It reports
// false, having let go of what it got, when any of that is missing: the
// caller then takes the stack down and builds it again.
func (n *NodeServer) adopt(rec StageRecord) bool {
	if n.cfg.Keeper == nil {
		return false
	}
	var kept keptDisk
	fd, err := n.cfg.Keeper.Get(rec.VolumeID, &kept)
	if err != nil {
		if !errors.Is(err, fdkeeper.ErrNotFound) {
			n.log.Warn("could not ask the fd keeper for the volume's FUSE connection", "volume", rec.VolumeID, "err", err)
		}
		return false
	}
	if why := n.whyNotAdopt(rec, kept); why != "" {
		unix.Close(fd)
		n.log.Info("not adopting the kept FUSE connection; the volume's stack is built again", "volume", rec.VolumeID, "why", why)
		return false
	}
	st := &stack{backend: n.newBackend(rec),
		loop: &loopdev.Device{Path: rec.LoopDevice}}
	st.disk, err = fusedisk.Adopt(fd, kept.Disk, st.backend, fusedisk.Options{OnError: n.logIOError(rec.VolumeID), Log: n.log})
	if err != nil {
		unix.Close(fd)
		n.log.Warn("could not adopt the kept FUSE connection; the volume's stack is built again", "volume", rec.VolumeID, "err", err)
		return false
	}
	n.setLive(rec.VolumeID, st)
	return true
}

// whyNotAdopt says what keeps a kept connection from being served on, or "".
func (n *NodeServer) whyNotAdopt(rec StageRecord, kept keptDisk) string {
	if kept.Epoch != rec.Epoch || kept.Disk.Dir != rec.DiskDir || kept.Disk.Size != rec.Size {
		return fmt.Sprintf("the keeper's connection is of epoch %d at %s (%d bytes), the journal's stage of epoch %d at %s (%d bytes)",
			kept.Epoch, kept.Disk.Dir, kept.Disk.Size, rec.Epoch, rec.DiskDir, rec.Size)
	}
	if m, ok, err := mountAt(rec.DiskDir); err != nil || !ok || m.FsType != fusedisk.FsType {
		return fmt.Sprintf("no FUSE disk mounted at %s (%v)", rec.DiskDir, err)
	}
	devs, err := loopdev.Under(rec.DiskDir)
	if err != nil || rec.LoopDevice == "" || !slices.Contains(devs, rec.LoopDevice) {
		return fmt.Sprintf("loop device %q is not attached to the disk (attached: %v, %v)", rec.LoopDevice, devs, err)
	}
	if rec.Block {
		return ""
	}
	if m, ok, err := mountAt(rec.StagingPath); err != nil || !ok || !strings.HasPrefix(m.Source, rec.LoopDevice) {
		return fmt.Sprintf("%s is not mounted from %s (%+v, %v)", rec.StagingPath, rec.LoopDevice, m, err)
	}
	return ""
}

// rebindMissing binds again the published targets of an adopted volume that
// are no longer mounted (their bind mounts normally outlive the engine).
func (n *NodeServer) rebindMissing(rec StageRecord, pubs []PublishRecord) error {
	source := rec.StagingPath
	if rec.Block {
		source = rec.LoopDevice
	}
	for _, p := range pubs {
		if _, ok, err := mountAt(p.TargetPath); err != nil || ok {
			continue
		}
		if err := bindTarget(source, p); err != nil {
			return fmt.Errorf("publish volume %s at %s again: %w", rec.VolumeID, p.TargetPath, err)
		}
	}
	return nil
}

// dropUnkept makes the keeper let go of every connection no live stack
// serves: volumes unstaged while no engine ran, or left by a failed unstage.
func (n *NodeServer) dropUnkept() error {
	if n.cfg.Keeper == nil {
		return nil
	}
	held, err := n.cfg.Keeper.List()
	if err != nil {
		n.log.Warn("could not list the fd keeper's connections; those of unstaged volumes stay held", "err", err)
		return nil
	}
	for _, e := range held {
		if n.live(e.Volume) == nil {
			n.dropKept(e.Volume)
		}
	}
	return nil
}

// StopServing stops every live disk after the requests it read are
// answered, leaving its connection to the keeper; the next engine adopts
// it. Without a keeper it does nothing: the connections end with this
// process, as the journal's restart path expects.
func (n *NodeServer) StopServing() {
	if n.cfg.Keeper == nil {
		return
	}
	n.mu.Lock()
	stacks := make([]*stack, 0, len(n.stacks))
	for _, st := range n.stacks {
		stacks = append(stacks, st)
	}
	n.mu.Unlock()
	for _, st := range stacks {
		st.disk.Stop()
		// The writes the backend keeps to send again after a reboot of the
		// datapath's machine end with this process: flush them first, so
		// the next engine has nothing to keep.
		ctx, cancel := context.WithTimeout(context.Background(), handoverFlushTimeout)
		if err := st.backend.flush(ctx); err != nil {
			n.log.Warn("could not flush the volume before handing it over; its unflushed writes are lost if the datapath's machine loses power before the next flush",
				"volume", st.backend.volumeID, "err", err)
		}
		cancel()
	}
}

// handoverFlushTimeout bounds the flush of each volume at a graceful stop.
const handoverFlushTimeout = 5 * time.Second
