package enginenode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vigil-storage/vigil/engine-node/loopdev"
)

// Recover makes the node agree with its journal after a start.
//
// After a reboot (rebooted: the journal's boot id is not this boot's) nothing
// of an earlier boot is valid: every publish and stage recorded in another
// boot is taken down (whatever is still mounted, as in the sandbox where a
// "reboot" keeps the host's mounts) and forgotten. Only once none is left is
// this boot recorded in the journal (Journal.RecordBoot): when that cleanup
// fails, the next start sees the reboot again and retries it, instead of
// serving the earlier boot's stages as after a restart. Records this boot
// wrote meanwhile are treated as after a restart.
//
// After a plain restart, operations cut short by the kill (phase staging,
// unstaging, publishing) are rolled back, and every staged volume is served
// again: the dead layers (the FUSE disk died with the process) are taken down
// and rebuilt with the recorded epoch, and its published targets are bound
// again. A volume that cannot be served again stays journaled as staged but not
// live: the next NodeStageVolume rebuilds it, NodeUnstageVolume removes it.
//
// Finally FUSE disks and loop devices under the state directory that no record
// accounts for are removed.
func (n *NodeServer) Recover(ctx context.Context, rebooted bool) error {
	stages, err := n.journal.Stages()
	if err != nil {
		return err
	}
	pubs, err := n.journal.Publishes()
	if err != nil {
		return err
	}
	if len(stages)+len(pubs) > 0 {
		n.log.Info("recovering node journal", "rebooted", rebooted, "stages", len(stages), "publishes", len(pubs))
	}
	earlier := func(boot string) bool { return rebooted && boot != n.cfg.BootID }
	staged := map[string]StageRecord{}
	for _, s := range stages {
		if s.Phase == PhaseStaged && !earlier(s.Boot) {
			staged[s.VolumeID] = s
		}
	}
	var errs []error
	for _, p := range pubs {
		if _, ok := staged[p.VolumeID]; ok && p.Phase == PhasePublished && !earlier(p.Boot) {
			continue
		}
		errs = append(errs, n.count(n.forgetPublish(p)))
	}
	for _, s := range stages {
		if _, ok := staged[s.VolumeID]; ok {
			errs = append(errs, n.reserve(ctx, s))
			continue
		}
		err := n.teardownRecord(s)
		if err == nil {
			err = n.journal.DeleteStage(s.VolumeID)
		}
		errs = append(errs, n.count(err))
	}
	errs = append(errs, n.dropUnkept(), n.sweep())
	if rebooted {
		errs = append(errs, n.recordBootWhenClean())
	}
	return errors.Join(errs...)
}

// recordBootWhenClean records this boot as the journal's once no record of an
// earlier boot is left in it.
func (n *NodeServer) recordBootWhenClean() error {
	stages, err := n.journal.Stages()
	if err != nil {
		return err
	}
	pubs, err := n.journal.Publishes()
	if err != nil {
		return err
	}
	left := 0
	for _, s := range stages {
		if s.Boot != n.cfg.BootID {
			left++
		}
	}
	for _, p := range pubs {
		if p.Boot != n.cfg.BootID {
			left++
		}
	}
	if left > 0 {
		return fmt.Errorf("cleanup after the reboot is incomplete: %d journal records of an earlier boot are left; "+
			"boot %s is not recorded, so the next start cleans up after the reboot again", left, n.cfg.BootID)
	}
	return n.journal.RecordBoot()
}

// count records a cleanup outcome and passes err on.
func (n *NodeServer) count(err error) error {
	if err != nil {
		n.metrics.cleanups.WithLabelValues(CleanupFailed).Inc()
		return err
	}
	n.metrics.cleanups.WithLabelValues(CleanupCleaned).Inc()
	return nil
}

// forgetPublish unmounts and removes a target path and forgets it.
func (n *NodeServer) forgetPublish(p PublishRecord) error {
	if err := unmountAll(p.TargetPath); err != nil {
		return fmt.Errorf("clean publish of volume %s at %s: %w", p.VolumeID, p.TargetPath, err)
	}
	if err := removePath(p.TargetPath); err != nil {
		return fmt.Errorf("clean publish of volume %s: %w", p.VolumeID, err)
	}
	return n.journal.DeletePublish(p.TargetPath)
}

// reserve serves a staged volume again: it adopts the connection the fd
// keeper held through the restart when the stack is intact (adopt), and
// otherwise rebuilds the stack; then it binds its targets again.
func (n *NodeServer) reserve(ctx context.Context, rec StageRecord) error {
	pubs, err := n.journal.PublishesOf(rec.VolumeID)
	if err != nil {
		return err
	}
	if n.adopt(rec) {
		if err := n.rebindMissing(rec, pubs); err != nil {
			return n.count(err)
		}
		n.metrics.cleanups.WithLabelValues(CleanupReserved).Inc()
		n.log.Info("adopted the volume's FUSE connection from the fd keeper: its stack and open files carry on",
			"volume", rec.VolumeID, "epoch", rec.Epoch, "targets", len(pubs))
		return nil
	}
	for _, p := range pubs {
		if err := unmountAll(p.TargetPath); err != nil {
			return n.count(err)
		}
	}
	if err := n.teardownRecord(rec); err != nil {
		return n.count(err)
	}
	if err := n.bringUp(ctx, rec); err != nil {
		rec.Phase = PhaseStaged // keep it: the next stage or unstage deals with it
		return n.count(errors.Join(fmt.Errorf("serve volume %s again: %w", rec.VolumeID, err), n.journal.PutStage(rec)))
	}
	st := n.live(rec.VolumeID)
	for _, p := range pubs {
		source := rec.StagingPath
		if rec.Block {
			source = st.loop.Path
		}
		if err := bindTarget(source, p); err != nil {
			return n.count(fmt.Errorf("publish volume %s at %s again: %w", rec.VolumeID, p.TargetPath, err))
		}
	}
	n.metrics.cleanups.WithLabelValues(CleanupReserved).Inc()
	n.log.Info("serving volume again after restart", "volume", rec.VolumeID, "epoch", rec.Epoch, "targets", len(pubs))
	return nil
}

// sweep removes FUSE disks and loop devices under the state directory that no
// live stack owns.
func (n *NodeServer) sweep() error {
	root := filepath.Join(n.cfg.StateDir, "disks")
	liveDirs := map[string]bool{}
	n.mu.Lock()
	for id := range n.stacks {
		liveDirs[diskDir(n.cfg.StateDir, id)] = true
	}
	n.mu.Unlock()
	var errs []error
	devs, err := loopdev.Attached()
	if err != nil {
		return err
	}
	for dev, backing := range devs {
		if strings.HasPrefix(backing, root+"/") && !liveDirs[filepath.Dir(backing)] {
			errs = append(errs, n.count(loopdev.Detach(dev)))
		}
	}
	all, err := mounts()
	if err != nil {
		return err
	}
	for _, m := range all {
		if filepath.Dir(m.MountPoint) == root && !liveDirs[m.MountPoint] {
			errs = append(errs, n.count(errors.Join(abortFuse(m.MountPoint), unmountDisk(m.MountPoint))))
		}
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if dir := filepath.Join(root, e.Name()); !liveDirs[dir] {
			_ = os.Remove(dir) // empty mount point; a non-empty one is not ours to delete
		}
	}
	return errors.Join(errs...)
}
