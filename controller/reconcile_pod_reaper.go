package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// podReaper is the pod reaper: it owns the pod keys of pods on a node that is
// not Ready (down, debouncing, held, isolated) or that a fence committed to,
// and applies the decision table to each (decide): a reap is a force delete
// after its VolumeAttachments on the node, each with a UID precondition; a
// deliberate non-action on a pod of a down node is an Event.
type podReaper struct{ *Controller }

// reconcile judges one pod and carries out the decision.
func (r *podReaper) reconcile(ctx context.Context, req *request) error {
	pod, set, obs := req.pod, req.set, req.obs
	now := r.now()
	snap := r.listers.snapshot(ctx, pod, req.node, obs, set, r.proofSource())
	d := decide(snap, set, now)
	r.metrics.Decisions.WithLabelValues(string(d.Kind), string(d.Reason)).Inc()
	if d.RecheckAfter > 0 {
		r.queue.AddAfter(req.key, d.RecheckAfter)
	}
	blocked := r.blocked()
	switch {
	case d.Kind == DecisionDelete && blocked == "":
		return r.reap(ctx, pod, snap.Owner, d, set.Policy)
	case d.Kind == DecisionDelete || d.Kind == DecisionWouldDelete:
		r.reportDryRun(pod, d, set.Policy, blocked)
	default:
		if d.Node.State.Down() || obs.FencedPods[pod.UID] {
			why := string(d.Reason)
			if d.Volume != "" {
				why += ": " + d.Volume + " is neither node-local nor of a protected provisioner, so nothing proves the node can no longer write to it"
			}
			msg := fmt.Sprintf("not force-deleting pod %s/%s on node %s (%s): %s (policy %s, owner %s)%s",
				pod.Namespace, pod.Name, pod.Spec.NodeName, d.Node.State, why, set.Policy, snap.Owner, r.whyUnfenced(snap))
			r.emitPod(pod, corev1.EventTypeNormal, EventPodNotReaped, msg)
		}
	}
	return nil
}

// whyUnfenced says, for a pod waiting for its fence proof, which of its volumes
// the fence left alone and why: a pod that will not be reaped uses it, and
// fencing it would have stranded that pod.
func (r *podReaper) whyUnfenced(s *Snapshot) string {
	var parts []string
	for _, v := range s.Volumes {
		if v.Fenced {
			continue
		}
		if h, ok := r.nodes.heldVolume(s.Pod.Spec.NodeName, v.Handle); ok {
			parts = append(parts, fmt.Sprintf("volume %s (PV %s) is not fenced: %s", v.Name, v.PVName, h))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ") + "; so this pod is not proven fenced and is not reaped, which would strand that pod"
}

// reap executes the actions in order: every VolumeAttachment of the pod on its
// down node in one pass, then the pod, force-deleted with grace 0. Each delete
// carries a UID precondition. Anything already gone counts as done, so after a
// crash between the steps the next sync finishes the job; a failed attachment
// delete stops before the pod is touched.
func (r *podReaper) reap(ctx context.Context, pod *corev1.Pod, owner OwnerKind, d Decision, policy PodDeletionPolicy) error {
	why := reapWhy(pod, d, policy)
	for _, a := range d.Actions {
		switch a.Kind {
		case ActionDeleteVolumeAttachment:
			deleted, err := r.deleteAttachment(ctx, pod.Spec.NodeName, a)
			if err != nil {
				r.emitPod(pod, corev1.EventTypeWarning, EventReapFailed,
					fmt.Sprintf("deleting VolumeAttachment %s of pod %s/%s: %v; will retry", a.Name, pod.Namespace, pod.Name, err))
				return err
			}
			if deleted {
				r.emitBoth(pod, corev1.EventTypeNormal, EventVolumeAttachmentDeleted,
					fmt.Sprintf("deleted VolumeAttachment %s (PV %s) of pod %s/%s on down node: %s", a.Name, a.PVName, pod.Namespace, pod.Name, why))
			}
		case ActionForceDeletePod:
			grace, uid := int64(0), a.UID
			ownerKey := ownerKeyOf(pod.Namespace, pod.OwnerReferences)
			pre := r.recoveries.ownerPods(ownerKey)
			err := r.client.CoreV1().Pods(a.Namespace).Delete(ctx, a.Name,
				metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				// Gone already, or replaced by a new pod of the same name.
				r.deleted.add(uid, r.now())
				klog.FromContext(ctx).V(2).Info("pod already gone or replaced", "pod", klog.KObj(pod), "err", err)
				continue
			}
			if err != nil {
				r.emitPod(pod, corev1.EventTypeWarning, EventReapFailed,
					fmt.Sprintf("force-deleting pod %s/%s: %v; will retry", pod.Namespace, pod.Name, err))
				return fmt.Errorf("force delete pod %s/%s: %w", a.Namespace, a.Name, err)
			}
			r.deleted.add(uid, r.now())
			r.metrics.PodsDeleted.WithLabelValues(string(owner), string(policy)).Inc()
			r.recoveries.podReaped(pod.Spec.NodeName, pod, owner, ownerKey, pre, string(d.Reason), r.now())
			r.emitPod(pod, corev1.EventTypeNormal, EventPodForceDeleted,
				fmt.Sprintf("force-deleted pod %s/%s (owner %s): %s", pod.Namespace, pod.Name, owner, why))
		}
	}
	return nil
}

// reportDryRun emits the "would delete" Events of a dry run, or of a decision
// not carried out because acting is blocked, and deletes nothing.
func (r *podReaper) reportDryRun(pod *corev1.Pod, d Decision, policy PodDeletionPolicy, blocked string) {
	why := reapWhy(pod, d, policy)
	prefix := "dry run"
	if blocked != "" {
		prefix = "not acting (" + blocked + ")"
	}
	for _, a := range d.Actions {
		switch a.Kind {
		case ActionDeleteVolumeAttachment:
			r.emitBoth(pod, corev1.EventTypeNormal, EventWouldDeleteVolumeAttachment,
				fmt.Sprintf("%s: would delete VolumeAttachment %s (PV %s) of pod %s/%s: %s", prefix, a.Name, a.PVName, pod.Namespace, pod.Name, why))
		case ActionForceDeletePod:
			r.emitBoth(pod, corev1.EventTypeNormal, EventWouldForceDelete,
				fmt.Sprintf("%s: would force-delete pod %s/%s: %s", prefix, pod.Namespace, pod.Name, why))
		}
	}
}

// reapWhy is the reason a reap's Events give: the node's state, the policy, the
// trigger, and what the reap relies on.
func reapWhy(pod *corev1.Pod, d Decision, policy PodDeletionPolicy) string {
	return fmt.Sprintf("node %s is %s; policy %s; trigger %s; relying on: %s", pod.Spec.NodeName, d.Node.State, policy, d.Reason, d.Basis)
}
