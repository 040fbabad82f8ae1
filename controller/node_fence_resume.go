package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// A fence outlives the leader that made it, its promise does not: the pods a
// fence commits the reaper to live in the leader's memory (nodeTracker), while
// the datapath keeps the node's row on each fenced volume fenced until the
// node's engine has cleaned up and released it. A leader that dies between a
// fence and the reap, on a node that comes back before the next leader judges
// it down, would leave those pods on volumes whose I/O is refused, for good.
// So the first time a leader syncs a node that is not down and that it has not
// fenced, it reads the node's grants once (the shared, bounded fetch of
// grant_proof.go): every pod on the node that uses a volume on which the
// node's row is fenced is taken as a pod the fence committed to, and the
// returned-node path (finishFence, decideReturned) reaps it, with every check
// of the decision table. Without the datapath's answer nothing is resumed; the
// node is looked at again later.

// resumeRetry is when a node whose grants could not be read is looked at again.
const resumeRetry = 10 * time.Second

// resumePod is what decideResume knows of one pod on the node.
type resumePod struct {
	Key      string // namespace/name
	UID      types.UID
	Deleting bool // already being deleted: nothing to resume for it
	// Handles are the pod's volumes of the back end's driver.
	Handles []string
}

// resumePlan is decideResume's answer: the pods a fence from before this
// leadership still commits the reaper to (none: nothing to do).
type resumePlan struct {
	Pods map[types.UID]bool
	Keys []string // the pods, sorted, for the Event
	// Volumes are the node's fenced volumes those pods use, sorted.
	Volumes []string
}

// decideResume finds the pods left on fenced volumes. It is pure: fenced are
// the volumes on which the node's row is fenced (neither live nor released),
// pods the node's pods.
func decideResume(fenced map[string]bool, pods []resumePod) resumePlan {
	plan := resumePlan{Pods: map[types.UID]bool{}}
	vols := map[string]bool{}
	for _, p := range pods {
		if p.Deleting {
			continue
		}
		for _, h := range p.Handles {
			if fenced[h] {
				plan.Pods[p.UID] = true
				vols[h] = true
			}
		}
		if plan.Pods[p.UID] {
			plan.Keys = append(plan.Keys, p.Key)
		}
	}
	for h := range vols {
		plan.Volumes = append(plan.Volumes, h)
	}
	sort.Strings(plan.Keys)
	sort.Strings(plan.Volumes)
	return plan
}

// resumePods reads the node's pods as decideResume sees them. A finished pod
// does no I/O, and a pod this reaper deleted is gone.
func (r *nodeFence) resumePods(node string, set *Settings) []resumePod {
	objs, _ := r.podsByNode.ByIndex(nodeIndex, node)
	out := make([]resumePod, 0, len(objs))
	for _, o := range objs {
		c, ok := o.(*cachedPod)
		if !ok || c.Phase == corev1.PodSucceeded || c.Phase == corev1.PodFailed || r.deleted.has(c.UID, r.now()) {
			continue
		}
		pod := c.pod()
		p := resumePod{Key: pod.Namespace + "/" + pod.Name, UID: pod.UID, Deleting: pod.DeletionTimestamp != nil}
		vols := r.listers.volumes(pod)
		for i := range vols {
			if vols[i].Inline == "" && vols[i].Driver == set.BackendDriver && vols[i].Handle != "" {
				p.Handles = append(p.Handles, vols[i].Handle)
			}
		}
		out = append(out, p)
	}
	return out
}

// resumeFence looks, once per leadership, for a fence from before it whose
// pods are still on a node that is not down, and takes the fence over: the
// pods are recorded as the fence's (markFenced), so finishFence queues them
// and decideReturned reaps them. With the fast trigger off nothing is proven,
// so nothing is looked for.
func (r *nodeFence) resumeFence(ctx context.Context, name string, set *Settings) {
	if r.backend == nil || !set.FastFencedTrigger || set.BackendDriver == "" || r.nodes.fenced(name) || r.nodes.resumeChecked(name) {
		return
	}
	view, err := r.proofs.grants(ctx, name)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("cannot read the node's grants to see whether a fence from before this leadership left pods on it; looking again later",
			"node", name, "err", err, "after", resumeRetry)
		r.queue.AddAfter(queueKey{kind: keyNode, name: name}, resumeRetry)
		return
	}
	r.nodes.markResumeChecked(name)
	plan := decideResume(view.fenced, r.resumePods(name, set))
	if len(plan.Pods) == 0 {
		return
	}
	r.nodes.markFenced(name, r.now(), fencePlan{Reaped: plan.Pods})
	ref := nodeRef(name)
	r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventFenceResumed,
		fmt.Sprintf("node %s has fenced volumes %s from before this manager led; pods %s on it are reaped so they do not stay with failing I/O",
			name, shortList(plan.Volumes), shortList(plan.Keys)))
}

// shortList shows at most ten names, for an Event.
func shortList(names []string) string {
	const show = 10
	if len(names) > show {
		return fmt.Sprintf("[%s, … (%d in all)]", strings.Join(names[:show], ", "), len(names))
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// resumeChecked reports whether the node's grants were read for a fence from
// before this leadership.
func (t *nodeTracker) resumeChecked(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checked[name]
}

// markResumeChecked notes that the node's grants were read for a fence from
// before this leadership.
func (t *nodeTracker) markResumeChecked(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.checked[name] = true
}
