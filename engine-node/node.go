package enginenode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	vigil "github.com/vigil-storage/vigil"
)

// Gate decides whether a volume may be staged here now: while this node is
// fenced for a volume and the cleanup after the reap is not done, it refuses
// (an error wrapping ErrGated). The cleanup controller implements it.
type Gate interface {
	AllowStage(ctx context.Context, volumeID string, epoch uint64) error
}

// Config is what a NodeServer needs.
type Config struct {
	// NodeName is the Kubernetes node name, the CSI node id and the datapath's
	// name for this node.
	NodeName string
	// StateDir holds the journal and the FUSE disk mount points.
	StateDir string
	// BootID tells a reboot from a restart.
	BootID string
	// Datapath serves the volumes' blocks.
	Datapath Datapath
	// IOTimeout bounds one datapath request made for the kernel; 0 means 30 s.
	IOTimeout time.Duration
	// UnflushedBudget is how many bytes of acknowledged, unflushed writes
	// each volume keeps to send again after a reboot of the datapath's
	// machine (past it the volume is flushed); 0 means
	// DefaultUnflushedBudget, below 0 keeps none (tests only).
	UnflushedBudget int64
	// UnflushedNodeBudget bounds what every volume of the node keeps
	// together (past it, a write flushes its volume first); 0 means
	// DefaultUnflushedNodeBudget.
	UnflushedNodeBudget int64
	// Gate, if set, may refuse stages (see Gate).
	Gate Gate
	// Keeper, if set, holds each staged volume's FUSE connection across
	// restarts (see FDKeeper); nil: a restart builds every stack again.
	Keeper FDKeeper
	// Metrics; nil creates unregistered ones.
	Metrics *Metrics
	// Log; nil logs to slog.Default().
	Log *slog.Logger
}

// NodeServer is the CSI node service: it turns datapath volumes into block
// devices and filesystems on this node and records every step in the journal.
type NodeServer struct {
	csi.UnimplementedNodeServer
	cfg     Config
	journal *Journal
	metrics *Metrics
	log     *slog.Logger

	mu     sync.Mutex
	busy   map[string]bool   // volume ids with an operation in progress
	stacks map[string]*stack // live stacks by volume id

	unflushed nodeBudget // acknowledged, unflushed writes of every volume
}

// NewNodeServer opens the journal and recovers what a previous run left (see
// Recover) before it returns, so the kubelet sees a consistent node.
func NewNodeServer(ctx context.Context, cfg Config) (*NodeServer, error) {
	if cfg.NodeName == "" || cfg.StateDir == "" || cfg.BootID == "" || cfg.Datapath == nil {
		return nil, fmt.Errorf("node server: NodeName, StateDir, BootID and Datapath are required (got %q, %q, %q, %v)",
			cfg.NodeName, cfg.StateDir, cfg.BootID, cfg.Datapath != nil)
	}
	// Mount points are compared with /proc/self/mountinfo, which is absolute.
	abs, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("node server: state dir %q: %w", cfg.StateDir, err)
	}
	cfg.StateDir = abs
	if cfg.IOTimeout == 0 {
		cfg.IOTimeout = 30 * time.Second
	}
	if cfg.UnflushedBudget == 0 {
		cfg.UnflushedBudget = DefaultUnflushedBudget
	}
	if cfg.UnflushedNodeBudget == 0 {
		cfg.UnflushedNodeBudget = DefaultUnflushedNodeBudget
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	j, previousBoot, err := openJournalAfterCrash(cfg.StateDir, cfg.BootID)
	if err != nil {
		return nil, err
	}
	n := &NodeServer{cfg: cfg, journal: j, metrics: cfg.Metrics, log: cfg.Log,
		busy: map[string]bool{}, stacks: map[string]*stack{}}
	n.unflushed.limit = cfg.UnflushedNodeBudget
	rebooted := previousBoot != "" && previousBoot != cfg.BootID
	if err := n.Recover(ctx, rebooted); err != nil {
		n.log.Error("recovery left work undone; it is retried by the next stage or unstage, and after a reboot by the next start", "err", err)
	}
	return n, nil
}

// Journal is the node journal (read-only use by the cleanup controller).
func (n *NodeServer) Journal() *Journal { return n.journal }

// Close closes the journal. Staged volumes stay mounted; they stop being served
// when the process exits and the next start serves them again.
func (n *NodeServer) Close() error { return n.journal.Close() }

// lock marks volumeID busy, or fails with ErrBusy: the CO retries Aborted.
func (n *NodeServer) lock(volumeID string) (func(), error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.busy[volumeID] {
		return nil, fmt.Errorf("volume %s: %w", volumeID, ErrBusy)
	}
	n.busy[volumeID] = true
	return func() {
		n.mu.Lock()
		delete(n.busy, volumeID)
		n.mu.Unlock()
	}, nil
}

func (n *NodeServer) live(volumeID string) *stack {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stacks[volumeID]
}

func (n *NodeServer) setLive(volumeID string, st *stack) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if st == nil {
		if old := n.stacks[volumeID]; old != nil {
			old.backend.discardKept()
			n.metrics.unflushedBytes.Set(float64(n.unflushed.held.Load()))
		}
		delete(n.stacks, volumeID)
	} else {
		n.stacks[volumeID] = st
	}
	n.metrics.volumesStaged.Set(float64(len(n.stacks)))
}

// NodeGetInfo names this node and its topology segment.
func (n *NodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             n.cfg.NodeName,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{vigil.TopologyNodeKey: n.cfg.NodeName}},
	}, nil
}

// NodeGetCapabilities: stage/unstage and volume stats.
func (n *NodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, c := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeStageVolume serves the volume at the staging path (see stage).
func (n *NodeServer) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	a, err := checkStage(req)
	if err != nil {
		return nil, err
	}
	unlock, err := n.lock(a.volumeID)
	if err != nil {
		return nil, toStatus(err)
	}
	defer unlock()
	defer since(n.metrics.stageSeconds, time.Now())
	if err := n.stage(ctx, a); err != nil {
		n.log.Warn("stage failed", "volume", a.volumeID, "err", err)
		return nil, toStatus(err)
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (n *NodeServer) stage(ctx context.Context, a stageArgs) error {
	rec, ok, err := n.journal.Stage(a.volumeID)
	if err != nil {
		return err
	}
	if ok && rec.Phase == PhaseStaged {
		if rec.StagingPath != a.stagingPath || rec.Block != a.block || rec.ReadOnly != a.readonly {
			return fmt.Errorf("stage volume %s at %s (block=%t, readonly=%t): it is staged at %s (block=%t, readonly=%t): %w",
				a.volumeID, a.stagingPath, a.block, a.readonly, rec.StagingPath, rec.Block, rec.ReadOnly, ErrStagedElsewhere)
		}
		if a.epoch < rec.Epoch {
			return fmt.Errorf("stage volume %s with epoch %d: epoch %d is in force: %w", a.volumeID, a.epoch, rec.Epoch, ErrStaleEpoch)
		}
		if a.epoch > rec.Epoch {
			if err := n.retire(rec, a.epoch); err != nil {
				return err
			}
		} else if n.live(a.volumeID) != nil {
			return nil
		}
	}
	if ok { // not served (left by a crash, a failed re-serve or retire): start clean
		if err := n.teardownRecord(rec); err != nil {
			return err
		}
	}
	if n.cfg.Gate != nil {
		if err := n.cfg.Gate.AllowStage(ctx, a.volumeID, a.epoch); err != nil {
			return err
		}
	}
	vol, err := n.cfg.Datapath.GetVolume(ctx, a.volumeID)
	if err != nil {
		return fmt.Errorf("stage volume %s: %w", a.volumeID, err)
	}
	rec = StageRecord{
		VolumeID: a.volumeID, StagingPath: a.stagingPath, Block: a.block, FsType: a.fsType,
		MountFlags: a.mountFlags, ReadOnly: a.readonly, Epoch: a.epoch, Size: vol.Size,
		DiskDir: diskDir(n.cfg.StateDir, a.volumeID), Phase: PhaseStaging,
	}
	return n.bringUp(ctx, rec)
}

// retire takes down the stack of a staged volume for which a stage carries a
// higher epoch. The datapath gives this node a higher epoch only after it
// fenced or released the node's grant, so another node may have written the
// volume since: the old ext4 mount, its page cache and the loop device's
// cache must never be used again. retire unmounts the staging path, detaches
// the loop device and the FUSE disk (which drops every cached page of the old
// stack) and leaves the record in PhaseUnstaging; the caller then consults the
// gate and builds everything fresh. While targets are published it refuses
// and changes nothing: their bind mounts hold the old filesystem alive, and
// only their pods' end (NodeUnpublishVolume) can let go of it.
func (n *NodeServer) retire(rec StageRecord, epoch uint64) error {
	pubs, err := n.journal.PublishesOf(rec.VolumeID)
	if err != nil {
		return err
	}
	if len(pubs) > 0 {
		return fmt.Errorf("stage volume %s with epoch %d: staged here under epoch %d, which the datapath has since fenced or released, "+
			"and still published at %s; the old mount is not resumed: unpublish it (end its pod) first: %w",
			rec.VolumeID, epoch, rec.Epoch, pubs[0].TargetPath, ErrStillPublished)
	}
	n.log.Info("epoch moved on; taking down the old stack before staging afresh",
		"volume", rec.VolumeID, "old_epoch", rec.Epoch, "epoch", epoch)
	rec.Phase = PhaseUnstaging
	if err := n.journal.PutStage(rec); err != nil {
		return err
	}
	if st := n.live(rec.VolumeID); st != nil {
		if err := n.teardownLive(rec, st); err != nil {
			return fmt.Errorf("stage volume %s with epoch %d: take down the stack of epoch %d: %w", rec.VolumeID, epoch, rec.Epoch, err)
		}
		n.setLive(rec.VolumeID, nil)
	}
	n.metrics.cleanups.WithLabelValues(CleanupCleaned).Inc()
	return nil
}

// bringUp journals rec as staging, builds its stack and journals it staged.
func (n *NodeServer) bringUp(ctx context.Context, rec StageRecord) error {
	rec.Phase = PhaseStaging
	if err := n.journal.PutStage(rec); err != nil {
		return err
	}
	st, err := n.build(ctx, rec)
	if err != nil {
		return errors.Join(err, n.journal.DeleteStage(rec.VolumeID))
	}
	rec.Phase = PhaseStaged
	rec.LoopDevice = st.loop.Path
	if err := n.journal.PutStage(rec); err != nil {
		return errors.Join(err, n.teardownLive(rec, st))
	}
	n.setLive(rec.VolumeID, st)
	return nil
}

// NodeUnstageVolume takes the layers down and forgets the stage.
func (n *NodeServer) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	staging, err := checkVolumeAndPath(req.GetVolumeId(), "staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, err
	}
	unlock, err := n.lock(req.GetVolumeId())
	if err != nil {
		return nil, toStatus(err)
	}
	defer unlock()
	if err := n.unstage(req.GetVolumeId(), staging); err != nil {
		n.log.Warn("unstage failed", "volume", req.GetVolumeId(), "err", err)
		return nil, toStatus(err)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (n *NodeServer) unstage(volumeID, staging string) error {
	rec, ok, err := n.journal.Stage(volumeID)
	if err != nil {
		return err
	}
	if !ok {
		return nil // never staged or already unstaged
	}
	if rec.StagingPath != staging {
		return fmt.Errorf("unstage volume %s from %s: it is staged at %s: %w", volumeID, staging, rec.StagingPath, ErrStagedElsewhere)
	}
	pubs, err := n.journal.PublishesOf(volumeID)
	if err != nil {
		return err
	}
	if len(pubs) > 0 {
		return fmt.Errorf("unstage volume %s: published at %s: %w", volumeID, pubs[0].TargetPath, ErrStillPublished)
	}
	rec.Phase = PhaseUnstaging
	if err := n.journal.PutStage(rec); err != nil {
		return err
	}
	if st := n.live(volumeID); st != nil {
		err = n.teardownLive(rec, st)
	} else {
		err = n.teardownRecord(rec)
	}
	if err != nil {
		return fmt.Errorf("unstage volume %s: %w", volumeID, err)
	}
	n.setLive(volumeID, nil)
	return n.journal.DeleteStage(volumeID)
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
