package enginenode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodePublishVolume bind-mounts the staged volume onto the target path: the
// staging mount in Filesystem mode, the loop device node in Block mode.
func (n *NodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	a, err := checkPublish(req)
	if err != nil {
		return nil, err
	}
	unlock, err := n.lock(a.volumeID)
	if err != nil {
		return nil, toStatus(err)
	}
	defer unlock()
	defer since(n.metrics.publishSeconds, time.Now())
	if err := n.publish(a); err != nil {
		n.log.Warn("publish failed", "volume", a.volumeID, "target", a.targetPath, "err", err)
		return nil, toStatus(err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *NodeServer) publish(a publishArgs) error {
	rec, ok, err := n.journal.Stage(a.volumeID)
	if err != nil {
		return err
	}
	st := n.live(a.volumeID)
	if !ok || rec.Phase != PhaseStaged || st == nil {
		return fmt.Errorf("publish volume %s: %w (stage it at %s first)", a.volumeID, ErrNotStaged, a.stagingPath)
	}
	if rec.StagingPath != a.stagingPath {
		return fmt.Errorf("publish volume %s from %s: it is staged at %s: %w", a.volumeID, a.stagingPath, rec.StagingPath, ErrNotStaged)
	}
	if rec.Block != a.block {
		return fmt.Errorf("publish volume %s with block=%t: it is staged with block=%t: %w", a.volumeID, a.block, rec.Block, ErrStagedElsewhere)
	}
	pr, ok, err := n.journal.Publish(a.targetPath)
	if err != nil {
		return err
	}
	if ok && pr.Phase == PhasePublished {
		if pr.VolumeID != a.volumeID || pr.Readonly != a.readonly || pr.Block != a.block {
			return fmt.Errorf("publish volume %s at %s (readonly=%t): it holds volume %s (readonly=%t): %w",
				a.volumeID, a.targetPath, a.readonly, pr.VolumeID, pr.Readonly, ErrPublishedDifferently)
		}
		if _, mounted, err := mountAt(a.targetPath); err != nil || mounted {
			return err
		}
	}
	pr = PublishRecord{
		VolumeID: a.volumeID, TargetPath: a.targetPath, StagingPath: a.stagingPath, Block: a.block,
		Readonly: a.readonly, PodUID: a.podUID, PodName: a.podName, PodNamespace: a.podNamespace,
		Phase: PhasePublishing,
	}
	if err := n.journal.PutPublish(pr); err != nil {
		return err
	}
	source := rec.StagingPath
	if rec.Block {
		source = st.loop.Path
	}
	if err := bindTarget(source, pr); err != nil {
		return errors.Join(fmt.Errorf("publish volume %s: %w", a.volumeID, err), n.journal.DeletePublish(a.targetPath))
	}
	pr.Phase = PhasePublished
	return n.journal.PutPublish(pr)
}

// bindTarget creates the target (a directory, or a file for a block device),
// clears whatever a crash left mounted there and bind-mounts source on it.
func bindTarget(source string, pr PublishRecord) error {
	if pr.Block {
		if fi, err := os.Stat(pr.TargetPath); err == nil && fi.IsDir() {
			// A CO that made a directory: a device binds only onto a file.
			if err := os.Remove(pr.TargetPath); err != nil {
				return fmt.Errorf("block target %s is a non-empty directory: %w", pr.TargetPath, err)
			}
		}
		f, err := os.OpenFile(pr.TargetPath, os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return err
		}
		f.Close()
	} else if err := os.MkdirAll(pr.TargetPath, 0o750); err != nil {
		return err
	}
	if err := unmountAll(pr.TargetPath); err != nil {
		return err
	}
	return bindMount(source, pr.TargetPath, pr.Readonly)
}

// NodeUnpublishVolume unmounts the target path and removes it.
func (n *NodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target, err := checkVolumeAndPath(req.GetVolumeId(), "target_path", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	unlock, err := n.lock(req.GetVolumeId())
	if err != nil {
		return nil, toStatus(err)
	}
	defer unlock()
	if err := n.unpublish(req.GetVolumeId(), target); err != nil {
		n.log.Warn("unpublish failed", "volume", req.GetVolumeId(), "target", target, "err", err)
		return nil, toStatus(err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (n *NodeServer) unpublish(volumeID, target string) error {
	pr, ok, err := n.journal.Publish(target)
	if err != nil {
		return err
	}
	if ok && pr.VolumeID != volumeID {
		return fmt.Errorf("unpublish volume %s from %s: it holds volume %s: %w", volumeID, target, pr.VolumeID, ErrPublishedDifferently)
	}
	if err := unmountAll(target); err != nil {
		return fmt.Errorf("unpublish volume %s: %w", volumeID, err)
	}
	if err := removePath(target); err != nil {
		return fmt.Errorf("unpublish volume %s: %w", volumeID, err)
	}
	if !ok {
		return nil
	}
	return n.journal.DeletePublish(target)
}

// NodeGetVolumeStats reports capacity and usage of a staged or published path.
func (n *NodeServer) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume_id is missing")
	}
	if req.GetVolumePath() == "" {
		return nil, invalid("volume_path is missing")
	}
	// A relative path cannot be where a volume is: NotFound, as sanity expects.
	path := filepath.Clean(req.GetVolumePath())
	rec, ok, err := n.journal.Stage(req.GetVolumeId())
	if err != nil {
		return nil, toStatus(err)
	}
	if !ok || !filepath.IsAbs(path) || !exists(path) {
		return nil, status.Errorf(codes.NotFound, "volume %s is not staged or published at %s on node %s", req.GetVolumeId(), path, n.cfg.NodeName)
	}
	if path != rec.StagingPath {
		pr, ok, err := n.journal.Publish(path)
		if err != nil {
			return nil, toStatus(err)
		}
		if !ok || pr.VolumeID != rec.VolumeID {
			return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s", req.GetVolumeId(), path)
		}
	}
	if rec.Block {
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: rec.Size}}}, nil
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", path, err)
	}
	bs := int64(fs.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(fs.Blocks) * bs, Available: int64(fs.Bavail) * bs, Used: int64(fs.Blocks-fs.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(fs.Files), Available: int64(fs.Ffree), Used: int64(fs.Files - fs.Ffree)},
	}}, nil
}
