package kubelet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// nodeClient is the part of the CSI node service the stand-in calls
// (csi.NodeClient satisfies it).
type nodeClient interface {
	NodeGetCapabilities(ctx context.Context, in *csi.NodeGetCapabilitiesRequest, opts ...grpc.CallOption) (*csi.NodeGetCapabilitiesResponse, error)
	NodeStageVolume(ctx context.Context, in *csi.NodeStageVolumeRequest, opts ...grpc.CallOption) (*csi.NodeStageVolumeResponse, error)
	NodeUnstageVolume(ctx context.Context, in *csi.NodeUnstageVolumeRequest, opts ...grpc.CallOption) (*csi.NodeUnstageVolumeResponse, error)
	NodePublishVolume(ctx context.Context, in *csi.NodePublishVolumeRequest, opts ...grpc.CallOption) (*csi.NodePublishVolumeResponse, error)
	NodeUnpublishVolume(ctx context.Context, in *csi.NodeUnpublishVolumeRequest, opts ...grpc.CallOption) (*csi.NodeUnpublishVolumeResponse, error)
}

// backoff spaces the retries of failed operations, by step key: the wait
// starts at initial and doubles up to max.
type backoff struct {
	initial, max time.Duration
	delay        map[string]time.Duration
	retryAt      map[string]time.Time
}

func newBackoff(initial, max time.Duration) backoff {
	return backoff{initial: initial, max: max, delay: map[string]time.Duration{}, retryAt: map[string]time.Time{}}
}

func (b backoff) fail(key string, now time.Time) time.Duration {
	d := b.delay[key] * 2
	if d < b.initial {
		d = b.initial
	}
	if d > b.max {
		d = b.max
	}
	b.delay[key], b.retryAt[key] = d, now.Add(d)
	return d
}

func (b backoff) reset(key string) {
	delete(b.delay, key)
	delete(b.retryAt, key)
}

// execute runs the steps of p in order and stops at the first failure, which
// is backed off and reported. It clears p's in-flight mark when done.
func (k *kubelet) execute(ctx context.Context, p plan) {
	defer func() {
		k.mu.Lock()
		delete(k.inflight, p.Handle)
		k.mu.Unlock()
	}()
	for _, s := range p.Steps {
		err := k.run(ctx, p, s)
		k.mu.Lock()
		key := s.key(p.Handle)
		if err == nil {
			k.backoff.reset(key)
			k.mu.Unlock()
			k.succeeded(p, s)
			continue
		}
		wait := k.backoff.fail(key, k.cfg.Clock.Now())
		k.mu.Unlock()
		if ctx.Err() == nil { // a stop is no failure to report
			k.failed(p, s, err, wait)
		}
		return
	}
}

// run performs one step: the state is saved before the call (uncertain) and
// after it (done, or forgotten for a teardown).
func (k *kubelet) run(ctx context.Context, p plan, s step) error {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.CallTimeout)
	defer cancel()
	switch s.Kind {
	case stepStage:
		return k.stage(ctx, p)
	case stepPublish:
		return k.publish(ctx, p, s)
	case stepUnpublish:
		return k.unpublish(ctx, p, s)
	case stepUnstage:
		return k.unstage(ctx, p)
	}
	return fmt.Errorf("unknown step %q", s.Kind)
}

// update changes the actual state under the lock and saves it.
func (k *kubelet) update(change func(*actualState)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	change(k.state)
	return k.state.save()
}

func capability(spec volumeSpec) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: spec.AccessMode}}
	if spec.Block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: spec.FsType, MountFlags: spec.MountFlags}}
	}
	return c
}

func (k *kubelet) stage(ctx context.Context, p plan) error {
	d := p.Desired
	if err := os.MkdirAll(filepath.Dir(p.StagingPath), 0o750); err != nil {
		return err
	}
	if err := k.update(func(s *actualState) { s.volume(d.Spec, p.StagingPath).Stage = phaseUncertain }); err != nil {
		return err
	}
	_, err := k.csi.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: p.Handle, PublishContext: d.PublishContext, StagingTargetPath: p.StagingPath,
		VolumeCapability: capability(d.Spec), VolumeContext: d.Spec.VolumeContext,
	})
	if err != nil {
		return err
	}
	return k.update(func(s *actualState) {
		v := s.volume(d.Spec, p.StagingPath)
		v.Stage, v.StagedContext = phaseDone, maps.Clone(d.PublishContext)
	})
}

func (k *kubelet) publish(ctx context.Context, p plan, st step) error {
	d := p.Desired
	use := d.Pods[st.Pod.UID]
	if err := os.MkdirAll(filepath.Dir(st.Target), 0o750); err != nil {
		return err
	}
	if err := k.update(func(s *actualState) {
		s.volume(d.Spec, p.StagingPath).Pubs[st.Pod.UID] = &actualPub{Pod: st.Pod, TargetPath: st.Target, Phase: phaseUncertain}
	}); err != nil {
		return err
	}
	req := &csi.NodePublishVolumeRequest{
		VolumeId: p.Handle, PublishContext: d.PublishContext, TargetPath: st.Target,
		VolumeCapability: capability(d.Spec), Readonly: use.ReadOnly, VolumeContext: volumeContext(d, st.Pod),
	}
	if p.Stage {
		req.StagingTargetPath = p.StagingPath
	}
	if _, err := k.csi.NodePublishVolume(ctx, req); err != nil {
		return err
	}
	return k.update(func(s *actualState) { s.volume(d.Spec, p.StagingPath).Pubs[st.Pod.UID].Phase = phaseDone })
}

func (k *kubelet) unpublish(ctx context.Context, p plan, st step) error {
	_, err := k.csi.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: p.Handle, TargetPath: st.Target})
	if err != nil {
		return err
	}
	removeEmptyDirs(filepath.Dir(st.Target), k.cfg.RootDir)
	return k.update(func(s *actualState) {
		if v := s.Volumes[p.Handle]; v != nil {
			delete(v.Pubs, st.Pod.UID)
			if v.empty() {
				delete(s.Volumes, p.Handle)
			}
		}
	})
}

func (k *kubelet) unstage(ctx context.Context, p plan) error {
	_, err := k.csi.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: p.Handle, StagingTargetPath: p.StagingPath})
	if err != nil {
		return err
	}
	removeEmptyDirs(p.StagingPath, k.cfg.RootDir)
	return k.update(func(s *actualState) {
		if v := s.Volumes[p.Handle]; v != nil {
			v.Stage, v.StagedContext = "", nil
			if v.empty() {
				delete(s.Volumes, p.Handle)
			}
		}
	})
}

// removeEmptyDirs removes dir and its empty parents below root (the kubelet
// removes a pod's volume directories after teardown); errors are ignored:
// a directory that is not empty stays.
func removeEmptyDirs(dir, root string) {
	for dir != root && len(dir) > len(root) {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// failed reports a failed step: a Warning event on every pod waiting for a
// stage or publish (FailedMount, or FailedMapVolume for a Block volume), on
// the node for a teardown.
func (k *kubelet) failed(p plan, s step, err error, wait time.Duration) {
	k.log.Warn("volume operation failed; retrying after backoff", "op", s.Kind, "volume", p.Handle, "pv", p.PVName,
		"pod", s.Pod.Namespace+"/"+s.Pod.Name, "retryIn", wait, "err", err)
	reason, what := ReasonFailedMount, "MountVolume.MountDevice"
	if p.Block {
		reason, what = ReasonFailedMapVolume, "MapVolume.SetUpDevice"
	}
	switch s.Kind {
	case stepStage:
		for _, uid := range slices.Sorted(maps.Keys(p.Desired.Pods)) {
			if u := p.Desired.Pods[uid]; u.New {
				k.podEvent(u.Pod, corev1.EventTypeWarning, reason, "%s failed for volume %q: %v", what, p.PVName, err)
			}
		}
	case stepPublish:
		what = "MountVolume.SetUp"
		if p.Block {
			what = "MapVolume.MapPodDevice"
		}
		k.podEvent(s.Pod, corev1.EventTypeWarning, reason, "%s failed for volume %q: %v", what, p.PVName, err)
	default:
		what = "UnmountVolume.TearDown"
		if s.Kind == stepUnstage {
			what = "UnmountDevice"
		}
		k.recorder.Eventf(k.nodeRef(), corev1.EventTypeWarning, ReasonFailedUnmount, "%s failed for volume %q (%s): %v", what, p.PVName, p.Handle, err)
	}
}

func (k *kubelet) succeeded(p plan, s step) {
	k.log.Info("volume operation done", "op", s.Kind, "volume", p.Handle, "pv", p.PVName, "pod", s.Pod.Namespace+"/"+s.Pod.Name)
	if s.Kind == stepPublish {
		k.podEvent(s.Pod, corev1.EventTypeNormal, ReasonSuccessfulMount, "MountVolume.SetUp succeeded for volume %q", p.PVName)
	}
}

func (k *kubelet) podEvent(p podRef, typ, reason, format string, args ...any) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	k.recorder.Eventf(ref, typ, reason, format, args...)
}

// nodeRef is the node as the kubelet names it in its events (UID = name).
func (k *kubelet) nodeRef() *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: k.cfg.NodeName, UID: types.UID(k.cfg.NodeName)}
}
