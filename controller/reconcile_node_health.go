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

// nodeHealth is the node health reconciler: it owns node keys. It turns a
// node's Ready condition (judged on the manager's own clock), its deletion
// (confirmed by a live GET), the out-of-service taint, the storage watch's
// isolation marks (storage_watch.go) and the control-plane outage holds
// (control_plane_watch.go) into a verdict (nodeVerdict), reports each change
// of it, and hands the judged node to the node fence.
type nodeHealth struct{ *Controller }

// reconcile handles a judged node. On a transition it emits an Event, updates
// the gauges and the node's NodeRecovery; it hands the node to the node fence;
// while the node is down it queues the node's pods and its attachments; while
// it is debouncing it comes back when that ends.
func (r *nodeHealth) reconcile(ctx context.Context, req *request) error {
	name := req.nodeName
	if req.node == nil {
		if pods, _ := r.podsByNode.ByIndex(nodeIndex, name); len(pods) == 0 && !r.recoveries.open(name) {
			r.nodes.forget(name)
			r.metrics.NodesDown.Set(float64(len(r.nodes.downNodes())))
			return nil
		}
	}
	if fd := decideFence(req.obs, req.verdict, req.set, r.backend != nil, r.now()); fd.Fence && fd.Reason == FenceReasonNodeDown {
		// The outage holds follow the storage watch's polls; a fence on
		// Kubernetes' verdict takes them fresh, then judges again.
		r.updateOutage(ctx)
		var err error
		if req.node, req.obs, req.verdict, err = r.judge(ctx, name, req.set); err != nil {
			return err
		}
	}
	r.noteTransition(name, req.node, req.verdict, req.set)
	if err := r.fence.reconcile(ctx, req); err != nil {
		return err
	}
	key := queueKey{kind: keyNode, name: name}
	switch v := req.verdict; {
	case v.State == NodeNotReadyDebouncing:
		r.queue.AddAfter(key, v.DownAt.Sub(r.now()))
	case v.State.Down():
		r.enqueuePodsOn(name)
		r.queue.Add(queueKey{kind: keyAttachments, name: name})
		r.queue.AddAfter(key, downRecheck)
	}
	return nil
}

// liveNode returns the node from the informer cache or, when the cache does not
// have it, from a live GET: a node missing from the cache is not taken as
// deleted (and so as proof) until the API server confirms it. nil means
// confirmed deleted.
func (r *nodeHealth) liveNode(ctx context.Context, name string) (*corev1.Node, error) {
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
func (r *nodeHealth) judge(ctx context.Context, name string, set *Settings) (*corev1.Node, nodeObservation, NodeVerdict, error) {
	node, err := r.liveNode(ctx, name)
	if err != nil {
		return nil, nodeObservation{}, NodeVerdict{}, err
	}
	now := r.now()
	o := r.nodes.observe(name, node, now)
	o.OutageHeld = r.outage.held(name)
	return node, o, nodeVerdict(o, set.NotReadyDebounce, now), nil
}

// noteTransition records a verdict; on a change of its down state it emits an
// Event, updates the gauge and opens or advances the node's NodeRecovery.
func (r *nodeHealth) noteTransition(name string, node *corev1.Node, v NodeVerdict, set *Settings) {
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
