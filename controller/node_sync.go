package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// deletionConfirmTTL is how long a live GET's "not found" stands for a node
// missing from the cache, so the 110 pods of a deleted node cost one GET.
const deletionConfirmTTL = 10 * time.Second

// downRecheck is how often a down node is judged again without any event, so
// that proofs and attachments are looked at again while it stays down.
const downRecheck = 2 * time.Second

// liveNode returns the node from the informer cache or, when the cache does not
// have it, from a live GET: a node missing from the cache is not taken as
// deleted (and so as proof) until the API server confirms it. nil means
// confirmed deleted.
func (r *Controller) liveNode(ctx context.Context, name string) (*corev1.Node, error) {
	node, err := r.listers.nodes.Get(name)
	if err == nil {
		r.nodes.confirmDeleted(name, time.Time{})
		return node, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	now := r.now()
	if at := r.nodes.deletedAt(name); !at.IsZero() && now.Sub(at) < deletionConfirmTTL {
		return nil, nil
	}
	live, err := r.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		r.nodes.confirmDeleted(name, now)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("confirm deletion of node %s: %w", name, err)
	}
	return TransformNode(live), nil
}

// judge observes a node and returns its verdict.
func (r *Controller) judge(ctx context.Context, name string, set *Settings) (*corev1.Node, nodeObservation, NodeVerdict, error) {
	node, err := r.liveNode(ctx, name)
	if err != nil {
		return nil, nodeObservation{}, NodeVerdict{}, err
	}
	now := r.now()
	o := r.nodes.observe(name, node, now)
	o.OutageHeld = r.outage.held(name)
	return node, o, nodeVerdict(o, set.NotReadyDebounce, now), nil
}

// syncNode judges one node. On a transition it emits an Event, updates the
// gauges and the node's NodeRecovery; it runs the fence coordinator; while the
// node is down it queues the node's pods and its attachments; while it is
// debouncing or within the grace it comes back when that ends.
func (r *Controller) syncNode(ctx context.Context, name string) error {
	set := readSettings(r.settings, r.proofs.driver())
	node, o, v, err := r.judge(ctx, name, &set)
	if err != nil {
		return err
	}
	if node == nil {
		if pods, _ := r.podsByNode.ByIndex(nodeIndex, name); len(pods) == 0 && !r.recoveries.open(name) {
			r.nodes.forget(name)
			r.metrics.NodesDown.Set(float64(len(r.nodes.downNodes())))
			return nil
		}
	}
	if fd := decideFence(o, v, &set, r.backend != nil, r.now()); fd.Fence && fd.Reason == FenceReasonNodeDown {
		// The outage holds follow the storage watch's polls; a fence on
		// Kubernetes' verdict takes them fresh, then judges again.
		r.updateOutage(ctx)
		if node, o, v, err = r.judge(ctx, name, &set); err != nil {
			return err
		}
	}
	r.noteTransition(name, node, v, &set)
	fd := decideFence(o, v, &set, r.backend != nil, r.now())
	if fd.Fence {
		var uid string
		if node != nil {
			uid = string(node.UID)
		}
		r.recoveries.detected(name, uid, string(fd.Reason), r.now())
		if err := r.fenceNode(ctx, name, node, v, fd, &set); err != nil {
			return err
		}
		if _, _, v, err = r.judge(ctx, name, &set); err != nil {
			return err
		}
		r.noteTransition(name, node, v, &set)
	} else if err := r.refence(ctx, name, o, &set); err != nil {
		return err
	}
	key := queueKey{kind: keyNode, name: name}
	if !v.State.Down() && node != nil {
		r.resumeFence(ctx, name, &set) // a fence from before this leadership
	}
	if !v.State.Down() && r.nodes.fenced(name) {
		r.finishFence(name)
	}
	switch {
	case v.State == NodeNotReadyDebouncing:
		r.queue.AddAfter(key, v.DownAt.Sub(r.now()))
	case v.State.Down():
		r.enqueuePodsOn(name)
		r.queue.Add(queueKey{kind: keyAttachments, name: name})
		r.queue.AddAfter(key, downRecheck)
	}
	if fd.RecheckAfter > 0 {
		r.queue.AddAfter(key, fd.RecheckAfter)
	}
	return nil
}

// finishFence keeps a fence's promise on a node that is no longer down: the
// pods the fence committed to that are still on the node are queued (the
// reaper reaps them, decideReturned) and the node is looked at again; once none
// is left the episode ends, and the next failure is fenced again.
func (r *Controller) finishFence(name string) {
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

// noteTransition records a verdict; on a change of its down state it emits an
// Event, updates the gauge and opens or advances the node's NodeRecovery.
func (r *Controller) noteTransition(name string, node *corev1.Node, v NodeVerdict, set *Settings) {
	held := v.State == NodeHeldControlPlaneOutage
	if held {
		r.recoveries.heldInOutage(name)
	}
	if !r.nodes.record(name, v) {
		if !v.State.Down() {
			r.recoveries.nodeUp(name, node, r.now())
		}
		return
	}
	r.metrics.NodesDown.Set(float64(len(r.nodes.downNodes())))
	ref := nodeRef(name)
	if v.State.Down() {
		r.events.emit(ref, ref.UID, corev1.EventTypeWarning, EventNodeDown,
			fmt.Sprintf("node %s is down (%s); pods on it are handled by policy %s", name, v.State, set.Policy))
		var uid string
		if node != nil {
			uid = string(node.UID)
		}
		r.recoveries.detected(name, uid, v.State.String(), r.now())
		return
	}
	if held {
		return // the control-plane outage Event said why it is not down
	}
	r.events.emit(ref, ref.UID, corev1.EventTypeNormal, EventNodeRecovered,
		fmt.Sprintf("node %s is no longer down (%s)", name, v.State))
	r.recoveries.nodeUp(name, node, r.now())
}
