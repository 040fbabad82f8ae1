package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

var everything = labels.Everything()

// syncPod judges one pod and carries out the decision. It follows
// sample-controller's contract: a returned error requeues the pod; a pod that is
// gone is nil.
func (r *Reaper) syncPod(ctx context.Context, namespace, name string) error {
	obj, exists, err := r.podsByNode.GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return err
	}
	cached, ok := obj.(*cachedPod)
	if !ok {
		return nil
	}
	pod := cached.pod()
	now := r.now()
	set := readSettings(r.settings)
	snap := r.listers.snapshot(ctx, pod, r.nodes, &set, r.prover, now)
	d := decide(snap, &set, now)
	r.metrics.Decisions.WithLabelValues(string(d.Kind), string(d.Reason)).Inc()
	if d.RecheckAfter > 0 {
		r.queue.AddAfter(queueKey{kind: keyPod, namespace: namespace, name: name}, d.RecheckAfter)
	}
	switch d.Kind {
	case DecisionDelete:
		return r.reap(ctx, pod, snap.Owner, d, set.Policy)
	case DecisionWouldDelete:
		r.reportDryRun(pod, d, set.Policy)
	default:
		if d.Node.State.Down() {
			msg := fmt.Sprintf("not force-deleting pod %s/%s on down node %s (%s): %s (policy %s, owner %s)",
				pod.Namespace, pod.Name, pod.Spec.NodeName, d.Node.State, d.Reason, set.Policy, snap.Owner)
			r.emitBoth(pod, corev1.EventTypeNormal, EventPodNotReaped, msg)
		}
	}
	return nil
}

// reap executes the actions in order: every VolumeAttachment of the pod on its
// down node in one pass, then the pod, force-deleted with grace 0. Each delete
// carries a UID precondition. Anything already gone counts as done, so after a
// crash between the steps the next sync finishes the job; a failed attachment
// delete stops before the pod is touched.
func (r *Reaper) reap(ctx context.Context, pod *corev1.Pod, owner OwnerKind, d Decision, policy PodDeletionPolicy) error {
	why := fmt.Sprintf("node %s is %s; policy %s; trigger %s", pod.Spec.NodeName, d.Node.State, policy, d.Reason)
	for _, a := range d.Actions {
		switch a.Kind {
		case ActionDeleteVolumeAttachment:
			uid := a.UID
			err := r.client.StorageV1().VolumeAttachments().Delete(ctx, a.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				r.emitBoth(pod, corev1.EventTypeWarning, EventReapFailed,
					fmt.Sprintf("deleting VolumeAttachment %s of pod %s/%s: %v; will retry", a.Name, pod.Namespace, pod.Name, err))
				return fmt.Errorf("delete volume attachment %s: %w", a.Name, err)
			}
			r.metrics.AttachmentsDeleted.Inc()
			r.emitBoth(pod, corev1.EventTypeNormal, EventVolumeAttachmentDeleted,
				fmt.Sprintf("deleted VolumeAttachment %s (PV %s) of pod %s/%s on down node: %s", a.Name, a.PVName, pod.Namespace, pod.Name, why))
		case ActionForceDeletePod:
			grace, uid := int64(0), a.UID
			err := r.client.CoreV1().Pods(a.Namespace).Delete(ctx, a.Name,
				metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				// Gone already, or replaced by a new pod of the same name.
				klog.FromContext(ctx).V(2).Info("pod already gone or replaced", "pod", klog.KObj(pod), "err", err)
				continue
			}
			if err != nil {
				r.emitBoth(pod, corev1.EventTypeWarning, EventReapFailed,
					fmt.Sprintf("force-deleting pod %s/%s: %v; will retry", pod.Namespace, pod.Name, err))
				return fmt.Errorf("force delete pod %s/%s: %w", a.Namespace, a.Name, err)
			}
			r.metrics.PodsDeleted.WithLabelValues(string(owner), string(policy)).Inc()
			r.emitBoth(pod, corev1.EventTypeNormal, EventPodForceDeleted,
				fmt.Sprintf("force-deleted pod %s/%s (owner %s): %s", pod.Namespace, pod.Name, owner, why))
		}
	}
	return nil
}

// reportDryRun emits the "would delete" Events of a dry run and deletes nothing.
func (r *Reaper) reportDryRun(pod *corev1.Pod, d Decision, policy PodDeletionPolicy) {
	why := fmt.Sprintf("node %s is %s; policy %s; trigger %s", pod.Spec.NodeName, d.Node.State, policy, d.Reason)
	for _, a := range d.Actions {
		switch a.Kind {
		case ActionDeleteVolumeAttachment:
			r.emitBoth(pod, corev1.EventTypeNormal, EventWouldDeleteVolumeAttachment,
				fmt.Sprintf("dry run: would delete VolumeAttachment %s (PV %s) of pod %s/%s: %s", a.Name, a.PVName, pod.Namespace, pod.Name, why))
		case ActionForceDeletePod:
			r.emitBoth(pod, corev1.EventTypeNormal, EventWouldForceDelete,
				fmt.Sprintf("dry run: would force-delete pod %s/%s: %s", pod.Namespace, pod.Name, why))
		}
	}
}

// emitBoth puts the Event on the pod and on its node.
func (r *Reaper) emitBoth(pod *corev1.Pod, typ, reason, msg string) {
	r.events.emit(pod, pod.UID, typ, reason, msg)
	ref := nodeRef(pod.Spec.NodeName)
	r.events.emit(ref, ref.UID, typ, reason, msg)
}
