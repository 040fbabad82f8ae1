package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/vigil-storage/vigil/fenceapi"
)

// failedVolumeLister is a FenceBackend that also reports the volumes it refuses all
// I/O on until an operator acts, because writing their data to disk failed
// (the datapath's does). The storage watch asks it at each poll.
type failedVolumeLister interface {
	FailedVolumes(ctx context.Context) ([]fenceapi.FailedVolume, error)
}

// newlyFailed is the pure part of the failed-volume watch: the volumes of
// report that were not failed at the last poll (before), and the handles
// failed now. A volume cleared and failed again is new again.
func newlyFailed(report []fenceapi.FailedVolume, before map[string]bool) (fresh []fenceapi.FailedVolume, now map[string]bool) {
	now = make(map[string]bool, len(report))
	for _, f := range report {
		now[f.Handle] = true
		if !before[f.Handle] {
			fresh = append(fresh, f)
		}
	}
	return fresh, now
}

// pollFailedVolumes sets the failed-volume gauge and puts a Warning Event on
// the PersistentVolume of each volume that failed since the last poll. Only
// the storage watch calls it. A back end that does not answer changes
// nothing.
func (c *Controller) pollFailedVolumes(ctx context.Context) {
	fl, ok := c.backend.(failedVolumeLister)
	if !ok {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	failed, err := fl.FailedVolumes(pctx)
	cancel()
	if err != nil {
		klog.FromContext(ctx).V(2).Info("failed volumes not known at this poll", "err", err)
		return
	}
	c.metrics.VolumesFailed.Set(float64(len(failed)))
	fresh, now := newlyFailed(failed, c.failedSeen)
	c.failedSeen = now
	for _, f := range fresh {
		c.warnFailed(ctx, f)
	}
}

// warnFailed puts the Warning Event on the volume's PersistentVolume, or
// logs it when no PersistentVolume has that handle.
func (c *Controller) warnFailed(ctx context.Context, f fenceapi.FailedVolume) {
	pv := c.pvOf(f.Handle)
	if pv == nil {
		klog.FromContext(ctx).Error(nil, "a volume failed and refuses all I/O; no PersistentVolume has its handle",
			"handle", f.Handle, "since", f.Since, "reason", f.Reason, "clear", f.Clear)
		return
	}
	c.emitOnPV(pv, corev1.EventTypeWarning, EventVolumeFailed,
		fmt.Sprintf("volume %s: %s at %s, so writes acknowledged before then may be lost; every read, write and flush of it is refused "+
			"until an operator checks the disk and the volume's data, then runs `%s`",
			f.Handle, f.Reason, f.Since.UTC().Format(time.RFC3339), f.Clear))
}
