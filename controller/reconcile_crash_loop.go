package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// crashLoopDeletion is the crash-loop reconciler: it owns the pod keys of pods
// on a Ready node that no fence committed to, and deletes (never forces) a
// protected pod whose container crash-loops (decideCrashLoop), at most once
// per UID and with a backoff per owner (bound).
type crashLoopDeletion struct {
	*Controller
	bound *crashLoops
}

// reconcile handles a pod on a live node.
func (r *crashLoopDeletion) reconcile(ctx context.Context, req *request) error {
	pod, set := req.pod, req.set
	restarts := int32(0)
	if cs := pod.Status.ContainerStatuses; len(cs) > 0 {
		restarts = cs[0].RestartCount
	}
	if !set.CrashLoopPodDeletion || restarts == 0 {
		return nil
	}
	now := r.now()
	snap := &Snapshot{Pod: pod, Owner: r.ownerKind(pod), Volumes: r.volumes(pod)}
	owner := ownerKeyOf(pod.Namespace, pod.OwnerReferences)
	d := decideCrashLoop(snap, restarts, r.bound.state(pod.UID, owner, now), set, now)
	key := queueKey{kind: keyPod, namespace: pod.Namespace, name: pod.Name}
	if d.RecheckAfter > 0 {
		r.queue.AddAfter(key, d.RecheckAfter)
	}
	switch d.Reason {
	case ReasonCrashLoopBackoff, ReasonCrashLoopOnceDone:
		r.emitPod(pod, corev1.EventTypeNormal, EventCrashLoopNotDeleted,
			fmt.Sprintf("pod %s/%s crash-loops (%d restarts) but is not deleted: %s", pod.Namespace, pod.Name, restarts, d.Reason))
	}
	if !d.Delete {
		return nil
	}
	if blocked := r.blocked(); set.DryRun || blocked != "" {
		why := "dry run"
		if blocked != "" {
			why = "not acting (" + blocked + ")"
		}
		r.emitBoth(pod, corev1.EventTypeNormal, EventWouldDeleteCrashLoop,
			fmt.Sprintf("%s: would delete crash-looping pod %s/%s (%d restarts, limit %d)", why, pod.Namespace, pod.Name, restarts, set.CrashLoopRestartLimit))
		return nil
	}
	uid := pod.UID
	err := r.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete crash-looping pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	r.bound.deletedNow(uid, owner, now)
	r.metrics.CrashLoopDeleted.WithLabelValues(string(snap.Owner)).Inc()
	r.emitPod(pod, corev1.EventTypeWarning, EventCrashLoopDeleted,
		fmt.Sprintf("deleted crash-looping pod %s/%s (%d restarts ≥ limit %d; owner %s) so it comes back with a fresh attachment; the owner's next such deletion waits at least %s",
			pod.Namespace, pod.Name, restarts, set.CrashLoopRestartLimit, owner, crashBackoff(0)))
	return nil
}
