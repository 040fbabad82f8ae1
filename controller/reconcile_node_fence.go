package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/fenceapi"
)

// FenceReason says why a node is fenced; it appears in Events, the taint's value
// and the NodeRecovery.
type FenceReason string

// Fence reasons.
const (
	FenceReasonStorageIsolated FenceReason = "storage-isolated"
	FenceReasonNodeDown        FenceReason = "node-down-past-grace"
)

// fenceDecision is decideFence's answer.
type fenceDecision struct {
	Fence  bool
	Reason FenceReason
	// RecheckAfter, when positive, is when the answer may change by the clock
	// alone (the grace running out).
	RecheckAfter time.Duration
}

// decideFence is the node fence's decision for one node. It is pure.
// With the fast trigger on and a fencing back end configured, a node is fenced
// once per episode: at once when its engine is storage-isolated (the threshold
// is the debounce), or when Kubernetes has called it down for the grace period
// (a node cut off from the API server only is fenced then, and from then on its
// I/O is refused: that is the point). Nothing is fenced ahead of time with the
// fast trigger off.
func decideFence(o nodeObservation, v NodeVerdict, set *Settings, hasBackend bool, now time.Time) fenceDecision {
	switch {
	case !set.FastFencedTrigger || !hasBackend || o.Fenced:
		return fenceDecision{}
	case o.Isolated:
		return fenceDecision{Fence: true, Reason: FenceReasonStorageIsolated}
	case v.State.KubernetesDown():
		if until := v.Since.Add(set.NodeDownGracePeriod).Sub(now); until > 0 {
			return fenceDecision{RecheckAfter: until}
		}
		return fenceDecision{Fence: true, Reason: FenceReasonNodeDown}
	}
	return fenceDecision{}
}

// nodeFence is the node fence reconciler: node health hands it every judged
// node (it owns no key kind of its own). With the fast trigger on it fences a
// node out of the volumes of the pods that will be reaped and taints it
// (decideFence, decideFenceVolumes), fences again what a stage that raced the
// fence left live (node_fence_renew.go), takes over a fence an earlier leader
// made (node_fence_resume.go), and keeps each fence's promise once the node is
// back (finishFence).
type nodeFence struct{ *Controller }

// reconcile carries out the fence decision on a judged node, and on a node
// that is no longer down, finishes a fence (this leader's or an earlier
// one's). After a fence it judges the node again (only the verdict changes:
// the node and the observation stay those the fence was decided on).
func (r *nodeFence) reconcile(ctx context.Context, req *request) error {
	name := req.nodeName
	fd := decideFence(req.obs, req.verdict, req.set, r.backend != nil, r.now())
	if fd.Fence {
		var uid string
		if req.node != nil {
			uid = string(req.node.UID)
		}
		r.recoveries.detected(name, uid, string(fd.Reason), r.now())
		if err := r.fenceNode(ctx, name, req.node, req.verdict, fd, req.set); err != nil {
			return err
		}
		_, _, v, err := r.health.judge(ctx, name, req.set)
		if err != nil {
			return err
		}
		req.verdict = v
		r.health.noteTransition(name, req.node, v, req.set)
	} else if err := r.refence(ctx, name, req.obs, req.set); err != nil {
		return err
	}
	if !req.verdict.State.Down() && req.node != nil {
		r.resumeFence(ctx, name, req.set) // a fence from before this leadership
	}
	if !req.verdict.State.Down() && r.nodes.fenced(name) {
		r.finishFence(name)
	}
	if fd.RecheckAfter > 0 {
		r.queue.AddAfter(queueKey{kind: keyNode, name: name}, fd.RecheckAfter)
	}
	return nil
}

// fenceNode carries out a fence decision: the volumes of the pods that will be
// reaped (planFence; every other live grant of the node is left alone, so no
// pod is left on a fenced volume without being reaped) are fenced at the back
// end (durable before FenceVolumes returns), then the Node gets
// vigil.io/fenced:NoSchedule, and only then is the node marked fenced, which is
// what lets the reaper's fast trigger and attachment recovery act. In a dry run,
// or while acting is blocked, it only says what it would do. A failure at
// any step leaves the node unmarked and returns an error, so the step is retried;
// every step is idempotent, so a retry or a new leader repeats nothing that
// matters (FenceVolumes skips volumes no longer live).
func (r *nodeFence) fenceNode(ctx context.Context, name string, node *corev1.Node, v NodeVerdict, d fenceDecision, set *Settings) error {
	ref := nodeRef(name)
	// A blocked manager (a managed setting refused) acts on none of its
	// decisions: fencing is one, as much as reaping.
	if blocked := r.blocked(); set.DryRun || blocked != "" {
		why := "dry run"
		if blocked != "" {
			why = "not acting (" + blocked + ")"
		}
		r.events.emit(ref, ref.UID, corev1.EventTypeNormal, EventWouldFence,
			fmt.Sprintf("%s: would fence node %s at the datapath and taint it %s (%s; verdict %s)", why, name, vigil.FencedTaintKey, d.Reason, v.State))
		return nil
	}
	plan, err := r.planFence(ctx, name, set)
	if err != nil {
		r.metrics.Fences.WithLabelValues(outcomeFailed).Inc()
		r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventFenceFailed,
			fmt.Sprintf("cannot read the grants of node %s to fence it (%s): %v; nothing is proven fenced, so nothing fast happens; retrying", name, d.Reason, err))
		return fmt.Errorf("fence node %s: %w", name, err)
	}
	start := r.now()
	fenced, err := r.backend.FenceVolumes(ctx, name, plan.Fence)
	if err != nil {
		r.metrics.Fences.WithLabelValues(outcomeFailed).Inc()
		r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventFenceFailed,
			fmt.Sprintf("cannot fence node %s (%s): %v; nothing is proven fenced, so nothing fast happens; retrying", name, d.Reason, err))
		return fmt.Errorf("fence node %s: %w", name, err)
	}
	fencedAt := r.now()
	r.metrics.FenceDuration.Observe(fencedAt.Sub(start).Seconds())
	r.metrics.Fences.WithLabelValues(outcomeDone).Inc()
	r.recoveries.fenced(name, fenced, fencedAt)
	if _, err := r.proofs.refresh(ctx, name); err != nil {
		return err
	}
	if node != nil {
		if err := r.taintFenced(ctx, name, d.Reason); err != nil {
			r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventFenceFailed,
				fmt.Sprintf("fenced node %s at the datapath but cannot taint it %s: %v; retrying", name, vigil.FencedTaintKey, err))
			return fmt.Errorf("taint node %s: %w", name, err)
		}
		r.recoveries.tainted(name, r.now())
	}
	r.nodes.markFenced(name, fencedAt, plan)
	r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventNodeFenced,
		fmt.Sprintf("fenced node %s (%s; verdict %s) in %s: %s%s; tainted %s:%s until its engine has cleaned up",
			name, d.Reason, v.State, fencedAt.Sub(start).Round(time.Millisecond), describeFenced(fenced), describeHeld(plan.Held),
			vigil.FencedTaintKey, corev1.TaintEffectNoSchedule))
	return nil
}

// finishFence keeps a fence's promise on a node that is no longer down: the
// pods the fence committed to that are still on the node are queued (the
// reaper reaps them, decideReturned) and the node is looked at again; once none
// is left the episode ends, and the next failure is fenced again.
func (r *nodeFence) finishFence(name string) {
	promised := r.nodes.fencedPods(name)
	left := 0
	objs, _ := r.podsByNode.ByIndex(nodeIndex, name)
	for _, o := range objs {
		c, ok := o.(*cachedPod)
		if !ok || !promised[c.UID] || r.deleted.has(c.UID, r.now()) {
			continue
		}
		left++
		r.queue.Add(queueKey{kind: keyPod, namespace: c.Namespace, name: c.Name})
	}
	if left == 0 {
		r.nodes.endFence(name)
		return
	}
	r.queue.AddAfter(queueKey{kind: keyNode, name: name}, downRecheck)
}

func describeFenced(fs []fenceapi.Fenced) string {
	if len(fs) == 0 {
		return "no volume of a pod to reap left live"
	}
	parts := make([]string, 0, len(fs))
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%s→epoch %d", f.Handle, f.Epoch))
	}
	sort.Strings(parts)
	const show = 10
	if len(parts) > show {
		return fmt.Sprintf("%d volumes (%s, …)", len(parts), strings.Join(parts[:show], ", "))
	}
	return fmt.Sprintf("%d volume(s) (%s)", len(parts), strings.Join(parts, ", "))
}

// taintFenced adds vigil.io/fenced:NoSchedule to the node unless it is there.
// Taints have no merge key, so the whole list is sent, read live (the
// informer's copy keeps only Vigil's taints); modifyNode's resourceVersion
// precondition makes a concurrent change of the node a conflict, retried on
// the new list, never overwritten.
func (r *nodeFence) taintFenced(ctx context.Context, name string, reason FenceReason) error {
	return r.modifyNode(ctx, name, "", func(node *corev1.Node) bool {
		if fencedTaint(node) != nil {
			return false
		}
		now := metav1.NewTime(r.now())
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: vigil.FencedTaintKey, Value: string(reason),
			Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now})
		return true
	})
}
