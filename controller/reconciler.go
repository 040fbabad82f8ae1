package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// A reconciler is one concern of the Controller, each in its own
// reconcile_<concern>.go: node health (nodeHealth), the node fence
// (nodeFence), the pod reaper (podReaper), attachment recovery
// (attachmentRecovery) and crash-loop deletion (crashLoopDeletion). The
// Controller's queue loop reads each key once into a request (the settings
// in force, node health's verdict on the key's node) and hands it to the
// concern that owns it; node health hands every node on to the node fence.
// The contract is sample-controller's: an error requeues the key with
// backoff, and a problem only a person can fix is an Event and nil.
//
// The NodeRecovery records (recovery.go) are not a reconciler of the queue:
// every concern notes its steps in them, and their own loop writes them.
type reconciler interface {
	reconcile(ctx context.Context, req *request) error
}

var _ = [...]reconciler{(*nodeHealth)(nil), (*nodeFence)(nil), (*podReaper)(nil), (*attachmentRecovery)(nil), (*crashLoopDeletion)(nil)}

// request is one queue key on its way to the reconciler that owns it, with
// what was read for it once.
type request struct {
	key queueKey
	// set are the settings in force, read once for the key.
	set *Settings
	// nodeName is the key's node (a pod's: the node it is bound to); node is
	// that Node, nil when it is deleted (confirmed by a live GET); obs and
	// verdict are node health's judgement of it.
	nodeName string
	node     *corev1.Node
	obs      nodeObservation
	verdict  NodeVerdict
	// pod is a pod key's pod, from the informer cache.
	pod *corev1.Pod
}

func (c *Controller) sync(ctx context.Context, key queueKey) error {
	switch key.kind {
	case keyPod:
		return c.syncPod(ctx, key.namespace, key.name)
	case keyNode:
		return c.syncNode(ctx, key.name)
	case keyAttachments:
		return c.syncAttachments(ctx, key.name)
	}
	return nil
}

// judged reads the settings once and node health's verdict on node, for key.
func (c *Controller) judged(ctx context.Context, key queueKey, node string) (*request, error) {
	set := readSettings(c.settings, c.proofs.driver())
	n, obs, v, err := c.health.judge(ctx, node, &set)
	if err != nil {
		return nil, err
	}
	return &request{key: key, set: &set, nodeName: node, node: n, obs: obs, verdict: v}, nil
}

// syncPod hands a pod to the pod reaper or, on a Ready node when no fence
// committed to it, to crash-loop deletion. A pod that is gone, was deleted by
// this controller (the cache has not seen it go yet) or is not bound is
// nothing to do.
func (c *Controller) syncPod(ctx context.Context, namespace, name string) error {
	obj, exists, err := c.podsByNode.GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return err
	}
	cached, ok := obj.(*cachedPod)
	if !ok {
		return nil
	}
	if c.deleted.has(cached.UID, c.now()) {
		return nil
	}
	pod := cached.pod()
	if pod.Spec.NodeName == "" {
		return nil
	}
	req, err := c.judged(ctx, queueKey{kind: keyPod, namespace: namespace, name: name}, pod.Spec.NodeName)
	if err != nil {
		return err
	}
	req.pod = pod
	var owner reconciler = c.reaper
	if req.verdict.State == NodeReady && !req.obs.FencedPods[pod.UID] {
		owner = c.crashLoop
	}
	return owner.reconcile(ctx, req)
}

// syncNode hands a node to node health.
func (c *Controller) syncNode(ctx context.Context, name string) error {
	req, err := c.judged(ctx, queueKey{kind: keyNode, name: name}, name)
	if err != nil {
		return err
	}
	return c.health.reconcile(ctx, req)
}

// syncAttachments hands a node's attachments to attachment recovery.
func (c *Controller) syncAttachments(ctx context.Context, name string) error {
	req, err := c.judged(ctx, queueKey{kind: keyAttachments, name: name}, name)
	if err != nil {
		return err
	}
	return c.attach.reconcile(ctx, req)
}
