package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// deleteAttachment is the one way the controllers delete a VolumeAttachment:
// the pod reaper before a pod (decision table row 5) and attachment recovery
// alike. The delete carries a UID precondition, so only the attachment that was
// judged can go. It reports whether this call deleted it; the caller says so in
// its Event. Counting, the NodeRecovery and the memory of deleted UIDs are done
// here.
//
// An attachment already gone (404) needs nothing. A 409 means the name now
// belongs to another attachment: the attach-detach controller attached the
// same volume to the same node again. The one judged is gone too; the new one
// is judged on its own, since its arrival queues its node's attachments
// (onAttachment). Neither is an error, and neither is retried. Any other
// failure is returned, so the caller stops before touching the pod and the sync
// is retried.
func (c *Controller) deleteAttachment(ctx context.Context, node string, a Action) (bool, error) {
	uid := a.UID
	if c.deleted.has(uid, c.now()) {
		return false, nil // its deletion was accepted already
	}
	err := c.client.StorageV1().VolumeAttachments().Delete(ctx, a.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		klog.FromContext(ctx).V(2).Info("volume attachment already gone or replaced", "attachment", a.Name, "uid", uid, "err", err)
		c.deleted.add(uid, c.now())
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete volume attachment %s: %w", a.Name, err)
	}
	c.deleted.add(uid, c.now())
	c.metrics.AttachmentsDeleted.Inc()
	c.metrics.AttachmentActions.WithLabelValues(actionLabelDeleteAttachment).Inc()
	c.recoveries.attachmentFreed(node, a.Name, a.PVName, actionLabelDeleteAttachment, c.now())
	return true, nil
}
