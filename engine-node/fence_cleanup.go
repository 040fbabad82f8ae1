package enginenode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"github.com/container-storage-interface/spec/lib/go/csi"
	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

// CleanupKind is one step of the cleanup after a reap.
type CleanupKind string

const (
	ActUnpublish   CleanupKind = "unpublish"    // unmount the target path, remove it
	ActUnstage     CleanupKind = "unstage"      // unmount, detach loop and FUSE, remove the disk dir
	ActRelease     CleanupKind = "release"      // release this node's grant on the datapath
	ActRemoveTaint CleanupKind = "remove-taint" // nothing protected is left
	// ActAwaitDatapath: nothing is left, but the datapath has not acknowledged
	// a heartbeat of this node since the taint was read, so the taint stays.
	ActAwaitDatapath CleanupKind = "await-datapath"
)

// CleanupAction is one thing decideCleanup wants done.
type CleanupAction struct {
	Kind     CleanupKind
	VolumeID string
	Path     string // target path (unpublish) or staging path (unstage)
}

// CleanupSnapshot is what the cleanup decides on: the node's taint, the
// journal, which pods (by UID) still run on this node, and whether the
// datapath answers this node now.
type CleanupSnapshot struct {
	Fenced    bool
	Stages    []StageRecord
	Publishes []PublishRecord
	PodsHere  map[string]bool // UIDs of pods bound to this node and not finished
	// DatapathAcked: the datapath acknowledged a heartbeat of this node sent
	// after the taint was read. A node cut off from the datapath (storage
	// isolated) cannot tell whether its releases landed, nor can the datapath
	// tell it lives: it keeps the taint.
	DatapathAcked bool
}

// kubeletPodDir finds the pod UID in a kubelet target path
// (/var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount), for
// publishes made without podInfoOnMount.
var kubeletPodDir = regexp.MustCompile(`/pods/([0-9a-fA-F-]{36})/volume`)

// podUID is the pod a publish is for, or "" when unknown.
func podUID(p PublishRecord) string {
	if p.PodUID != "" {
		return p.PodUID
	}
	if m := kubeletPodDir.FindStringSubmatch(p.TargetPath); m != nil {
		return m[1]
	}
	return ""
}

// decideCleanup is the cleanup's specification. While the node is fenced, every
// publish whose pod no longer runs here (deleted, finished, or replaced by a
// pod elsewhere) is unpublished; every stage none of whose publishes is kept is
// unstaged and its grant released; with nothing left, the taint goes, but only
// once the datapath has acknowledged a heartbeat of this node. A publish
// whose pod is unknown is kept: only a person can tell, so it blocks the taint
// removal (and Sync names it in a Warning Event).
func decideCleanup(s CleanupSnapshot) []CleanupAction {
	if !s.Fenced {
		return nil
	}
	if len(s.Stages) == 0 && len(s.Publishes) == 0 {
		if !s.DatapathAcked {
			return []CleanupAction{{Kind: ActAwaitDatapath}}
		}
		return []CleanupAction{{Kind: ActRemoveTaint}}
	}
	var out []CleanupAction
	kept := map[string]bool{}
	for _, p := range s.Publishes {
		uid := podUID(p)
		if uid == "" || s.PodsHere[uid] {
			kept[p.VolumeID] = true
			continue
		}
		out = append(out, CleanupAction{Kind: ActUnpublish, VolumeID: p.VolumeID, Path: p.TargetPath})
	}
	for _, st := range s.Stages {
		if !kept[st.VolumeID] {
			out = append(out, CleanupAction{Kind: ActUnstage, VolumeID: st.VolumeID, Path: st.StagingPath},
				CleanupAction{Kind: ActRelease, VolumeID: st.VolumeID})
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return kindOrder[out[a].Kind] < kindOrder[out[b].Kind] })
	return out
}

var kindOrder = map[CleanupKind]int{ActUnpublish: 0, ActUnstage: 1, ActRelease: 2, ActRemoveTaint: 3, ActAwaitDatapath: 3}

// Grants is what the cleanup and the gate call on the datapath.
type Grants interface {
	Release(ctx context.Context, volumeID, node string) error
	Attachments(ctx context.Context, volumeID string) ([]datapath.Attachment, error)
	Heartbeat(ctx context.Context, node string) error
}

// errAwaitDatapath: the taint stays until the datapath answers this node.
var errAwaitDatapath = errors.New("the datapath has not acknowledged a heartbeat of this node since it was fenced")

// FenceCleaner watches this node's Node object. While it carries Vigil's
// fenced taint it cleans up what reaped pods left and then removes the taint;
// as the NodeServer's Gate it refuses stages until then.
type FenceCleaner struct {
	Node     string
	Client   kubernetes.Interface
	Server   *NodeServer
	Grants   Grants
	Recorder record.EventRecorder
	Metrics  *Metrics
	Log      *slog.Logger

	mu     sync.Mutex
	fenced bool
	known  bool // fenced was read from the Node at least once
}

// Sync runs one pass: snapshot, decide, execute. It returns an error (to retry
// with backoff) when a step failed; each failure is also a Warning Event.
func (c *FenceCleaner) Sync(ctx context.Context) error {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", c.Node, err)
	}
	fenced := hasFencedTaint(node)
	c.mu.Lock()
	c.fenced, c.known = fenced, true
	c.mu.Unlock()
	if !fenced {
		return nil
	}
	snap, err := c.snapshot(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range decideCleanup(snap) {
		if a.Kind == ActAwaitDatapath {
			c.Recorder.Eventf(node, corev1.EventTypeWarning, vigil.EventReasonFenceAwaitDatapath,
				"nothing of the reaped pods is left, but the datapath has not acknowledged a heartbeat of this node since it was fenced: %s stays until it does (retrying)", vigil.FencedTaintKey)
			errs = append(errs, errAwaitDatapath)
			continue
		}
		if err := c.execute(ctx, a); err != nil {
			c.Metrics.cleanups.WithLabelValues(CleanupFailed).Inc()
			c.Recorder.Eventf(node, corev1.EventTypeWarning, vigil.EventReasonFenceCleanupFailed,
				"cannot %s volume %s %s: %v (retrying)", a.Kind, a.VolumeID, a.Path, err)
			errs = append(errs, err)
			continue
		}
		c.Metrics.cleanups.WithLabelValues(CleanupCleaned).Inc()
	}
	for _, p := range snap.Publishes {
		if podUID(p) == "" {
			c.Recorder.Eventf(node, corev1.EventTypeWarning, vigil.EventReasonFenceCleanupFailed,
				"volume %s is published at %s for an unknown pod; unmount it by hand to clear %s", p.VolumeID, p.TargetPath, vigil.FencedTaintKey)
			errs = append(errs, fmt.Errorf("publish of volume %s at %s: pod unknown", p.VolumeID, p.TargetPath))
		}
	}
	return errors.Join(errs...)
}

func (c *FenceCleaner) snapshot(ctx context.Context) (CleanupSnapshot, error) {
	stages, err := c.Server.journal.Stages()
	if err != nil {
		return CleanupSnapshot{}, err
	}
	pubs, err := c.Server.journal.Publishes()
	if err != nil {
		return CleanupSnapshot{}, err
	}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.Node).String(),
	})
	if err != nil {
		return CleanupSnapshot{}, fmt.Errorf("list pods on %s: %w", c.Node, err)
	}
	here := map[string]bool{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			here[string(p.UID)] = true
		}
	}
	snap := CleanupSnapshot{Fenced: true, Stages: stages, Publishes: pubs, PodsHere: here}
	if len(stages) == 0 && len(pubs) == 0 {
		// Sent now, after the taint was read: its answer proves the datapath
		// reaches this node and hears it again.
		err := beat(ctx, c.Grants, c.Node, cleanupHeartbeatTimeout)
		snap.DatapathAcked = err == nil
		if err != nil {
			c.Log.Warn("fence cleanup: the datapath did not acknowledge a heartbeat; the taint stays", "err", err)
		}
	}
	return snap, nil
}

// cleanupHeartbeatTimeout bounds the heartbeat that allows the taint removal.
const cleanupHeartbeatTimeout = 5 * time.Second

func (c *FenceCleaner) execute(ctx context.Context, a CleanupAction) error {
	c.Log.Info("fence cleanup", "action", a.Kind, "volume", a.VolumeID, "path", a.Path)
	switch a.Kind {
	case ActUnpublish:
		_, err := c.Server.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: a.VolumeID, TargetPath: a.Path})
		return err
	case ActUnstage:
		_, err := c.Server.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: a.VolumeID, StagingTargetPath: a.Path})
		return err
	case ActRelease:
		err := c.Grants.Release(ctx, a.VolumeID, c.Node)
		if errors.Is(err, datapath.ErrNotFound) {
			return nil
		}
		return err
	case ActRemoveTaint:
		return c.removeTaint(ctx)
	}
	return fmt.Errorf("unknown cleanup action %q", a.Kind)
}

// removeTaint removes Vigil's fenced taint, retrying on conflicts.
func (c *FenceCleaner) removeTaint(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.Client.CoreV1().Nodes().Get(ctx, c.Node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node = node.DeepCopy()
		var keep []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Key != vigil.FencedTaintKey {
				keep = append(keep, t)
			}
		}
		if len(keep) == len(node.Spec.Taints) {
			return nil
		}
		node.Spec.Taints = keep
		if _, err := c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{FieldManager: vigil.FieldManager}); err != nil {
			return err
		}
		c.Recorder.Event(node, corev1.EventTypeNormal, vigil.EventReasonFenceCleared,
			"nothing of the reaped pods is left on this node; removed "+vigil.FencedTaintKey)
		return nil
	})
}

func hasFencedTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == vigil.FencedTaintKey {
			return true
		}
	}
	return false
}

// AllowStage is the gate: until Sync has read this node's Node once, nothing
// may be staged (the engine does not know yet whether it is fenced); while
// the node is fenced, a volume with anything left in the journal may not be
// staged again; and in any case the stage must carry the epoch of a live
// grant of this node (a fresh grant after a fence).
func (c *FenceCleaner) AllowStage(ctx context.Context, volumeID string, epoch uint64) error {
	c.mu.Lock()
	fenced, known := c.fenced, c.known
	c.mu.Unlock()
	if !known {
		return fmt.Errorf("stage volume %s on %s: whether this node is fenced is not known yet (its Node has not been read since the engine started); retry: %w",
			volumeID, c.Node, ErrGated)
	}
	if fenced {
		pubs, err := c.Server.journal.PublishesOf(volumeID)
		if err != nil {
			return err
		}
		if _, staged, err := c.Server.journal.Stage(volumeID); err != nil || staged || len(pubs) > 0 {
			return errors.Join(err, fmt.Errorf("stage volume %s on %s: cleanup after the fence is not done: %w", volumeID, c.Node, ErrGated))
		}
	}
	atts, err := c.Grants.Attachments(ctx, volumeID)
	if err != nil {
		return fmt.Errorf("stage volume %s: attachments: %w", volumeID, err)
	}
	for _, a := range atts {
		if a.Node == c.Node {
			if !a.Live() || a.Epoch != epoch {
				return fmt.Errorf("stage volume %s on %s with epoch %d: the datapath has this node %s at epoch %d; wait for a fresh grant: %w",
					volumeID, c.Node, epoch, a.State, a.Epoch, ErrGated)
			}
			return nil
		}
	}
	return fmt.Errorf("stage volume %s on %s: the datapath has no grant for this node: %w", volumeID, c.Node, ErrGated)
}

// Run syncs when this node gains or loses the fenced taint (it watches its own
// Node) and every interval besides, for pods that went away, until ctx ends;
// it backs off (up to 30 s) while passes fail.
func (c *FenceCleaner) Run(ctx context.Context, interval time.Duration) {
	kick := make(chan struct{}, 1)
	watchFencedTaint(ctx, c, kick)
	wait := interval
	for {
		if err := c.Sync(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("fence cleanup incomplete; retrying", "err", err, "in", wait)
			wait = min(wait*2, 30*time.Second)
		} else {
			wait = interval
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-time.After(wait):
		}
	}
}
