package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// ErrCacheSync is returned by Run when the informer caches never synced.
var ErrCacheSync = errors.New("controller: informer caches did not sync")

// Config is what NewReaper needs. Client, Informers, Settings, Recorder and
// Metrics are required; Prover and Now are optional.
type Config struct {
	Client    kubernetes.Interface
	Informers informers.SharedInformerFactory
	Settings  SettingsReader
	// Prover proves volumes fenced for the fast trigger; nil: no datapath proof.
	Prover   FenceProver
	Recorder record.EventRecorder
	Metrics  *Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// keyKind says what a queue key names.
type keyKind uint8

const (
	keyPod keyKind = iota + 1
	keyNode
)

// queueKey is one item of the workqueue: a pod (namespace/name) or a node (name).
type queueKey struct {
	kind      keyKind
	namespace string
	name      string
}

// Reaper is node health and the pod reaper: it watches nodes and pods, judges
// nodes, and force-deletes the pods that DESIGN.md's decision table allows.
type Reaper struct {
	client   kubernetes.Interface
	settings SettingsReader
	prover   FenceProver
	metrics  *Metrics
	events   *events
	now      func() time.Time

	listers
	podsByNode cache.Indexer // cachedPods, indexed by node
	nodes      *nodeTracker
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[queueKey]
}

// NewReaper registers the informers, indexes and event handlers the reaper
// needs on cfg.Informers. Start the factory after calling it.
func NewReaper(cfg Config) (*Reaper, error) {
	if cfg.Client == nil || cfg.Informers == nil || cfg.Settings == nil || cfg.Recorder == nil || cfg.Metrics == nil {
		return nil, errors.New("controller: Config needs Client, Informers, Settings, Recorder and Metrics")
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	f := cfg.Informers
	nodeInf := f.Core().V1().Nodes()
	pvcInf, pvInf := f.Core().V1().PersistentVolumeClaims(), f.Core().V1().PersistentVolumes()
	vaInf, rsInf := f.Storage().V1().VolumeAttachments(), f.Apps().V1().ReplicaSets()
	podInf, err := podCacheInformer(f)
	if err != nil {
		return nil, fmt.Errorf("controller: pod cache: %w", err)
	}
	if err := vaInf.Informer().AddIndexers(cache.Indexers{attachmentByPVIndex: attachmentPV}); err != nil {
		return nil, fmt.Errorf("controller: index volume attachments by PV: %w", err)
	}
	r := &Reaper{
		client: cfg.Client, settings: cfg.Settings, prover: cfg.Prover, metrics: cfg.Metrics,
		events: newEvents(cfg.Recorder, now), now: now,
		listers: listers{
			nodes: nodeInf.Lister(), pvcs: pvcInf.Lister(), pvs: pvInf.Lister(),
			replicaSets: rsInf.Lister(), attachmentsByPV: vaInf.Informer().GetIndexer(),
		},
		podsByNode: podInf.GetIndexer(),
		nodes:      newNodeTracker(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[queueKey](),
			workqueue.TypedRateLimitingQueueConfig[queueKey]{Name: "vigil-reaper"}),
	}
	r.synced = []cache.InformerSynced{
		podInf.HasSynced, nodeInf.Informer().HasSynced, pvcInf.Informer().HasSynced,
		pvInf.Informer().HasSynced, vaInf.Informer().HasSynced, rsInf.Informer().HasSynced,
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onPod,
		UpdateFunc: func(_, obj any) { r.onPod(obj) },
	}); err != nil {
		return nil, fmt.Errorf("controller: pod handler: %w", err)
	}
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.onNode,
		UpdateFunc: r.onNodeUpdate,
		DeleteFunc: r.onNode,
	}); err != nil {
		return nil, fmt.Errorf("controller: node handler: %w", err)
	}
	return r, nil
}

// HasSynced reports whether every informer the reaper reads has synced.
func (r *Reaper) HasSynced() bool {
	for _, s := range r.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Run waits for the caches, then runs workers until ctx ends. Only the leader
// calls Run; every replica may run the informers.
func (r *Reaper) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer r.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return ErrCacheSync
	}
	r.enqueueAllNodes()
	go r.watchSettings(ctx)
	for range workers {
		go wait.UntilWithContext(ctx, r.runWorker, time.Second)
	}
	<-ctx.Done()
	return nil
}

// enqueueAllNodes queues every node that exists or still has pods, so a node that
// went down (or was deleted) while no leader was running is judged.
func (r *Reaper) enqueueAllNodes() {
	names := map[string]struct{}{}
	if nodes, err := r.listers.nodes.List(everything); err == nil {
		for _, n := range nodes {
			names[n.Name] = struct{}{}
		}
	}
	for _, n := range r.podsByNode.ListIndexFuncValues(nodeIndex) {
		names[n] = struct{}{}
	}
	for n := range names {
		r.queue.Add(queueKey{kind: keyNode, name: n})
	}
}

// watchSettings re-judges every pod on a down node as soon as a setting changes,
// so a new policy acts without waiting for a resync.
func (r *Reaper) watchSettings(ctx context.Context) {
	changes, cancel := r.settings.Subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
			r.requeueDownNodes()
		}
	}
}

// requeueDownNodes queues the pods of every node judged down and every node that
// is not Ready (a changed debounce can make it down).
func (r *Reaper) requeueDownNodes() {
	for _, n := range r.nodes.downNodes() {
		r.enqueuePodsOn(n)
	}
	nodes, err := r.listers.nodes.List(everything)
	if err != nil {
		return
	}
	for _, n := range nodes {
		if !isNodeReady(n) || outOfServiceTaint(n) != nil {
			r.queue.Add(queueKey{kind: keyNode, name: n.Name})
		}
	}
}

func (r *Reaper) enqueuePodsOn(node string) {
	objs, err := r.podsByNode.ByIndex(nodeIndex, node)
	if err != nil {
		return
	}
	for _, o := range objs {
		if p, ok := o.(*cachedPod); ok {
			r.queue.Add(queueKey{kind: keyPod, namespace: p.Namespace, name: p.Name})
		}
	}
}

// onPod queues a pod that is terminating or whose node is not healthy.
func (r *Reaper) onPod(obj any) {
	pod, ok := obj.(*cachedPod)
	if !ok || pod.NodeName == "" {
		return
	}
	if pod.DeletionTimestamp == nil {
		node, err := r.listers.nodes.Get(pod.NodeName)
		if err == nil && isNodeReady(node) && outOfServiceTaint(node) == nil {
			return
		}
	}
	r.queue.Add(queueKey{kind: keyPod, namespace: pod.Namespace, name: pod.Name})
}

func (r *Reaper) onNode(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*corev1.Node); ok {
		r.queue.Add(queueKey{kind: keyNode, name: n.Name})
	}
}

// onNodeUpdate queues a node whose health inputs changed, or on a resync; the
// kubelet's periodic status updates alone queue nothing.
func (r *Reaper) onNodeUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(*corev1.Node)
	n, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	if o.ResourceVersion == n.ResourceVersion || healthInputsDiffer(o, n) {
		r.queue.Add(queueKey{kind: keyNode, name: n.Name})
	}
}

func healthInputsDiffer(a, b *corev1.Node) bool {
	ca, cb := readyCondition(a), readyCondition(b)
	if (ca == nil) != (cb == nil) || (ca != nil && (ca.Status != cb.Status || !ca.LastTransitionTime.Equal(&cb.LastTransitionTime))) {
		return true
	}
	return (outOfServiceTaint(a) == nil) != (outOfServiceTaint(b) == nil)
}

func (r *Reaper) runWorker(ctx context.Context) {
	for r.processNext(ctx) {
	}
}

// processNext handles one key: success forgets its failures, an error requeues
// it with backoff.
func (r *Reaper) processNext(ctx context.Context) bool {
	key, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(key)
	if err := r.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "sync failed; retrying", "kind", key.kind, "namespace", key.namespace, "name", key.name)
		r.queue.AddRateLimited(key)
		return true
	}
	r.queue.Forget(key)
	return true
}

func (r *Reaper) sync(ctx context.Context, key queueKey) error {
	switch key.kind {
	case keyPod:
		return r.syncPod(ctx, key.namespace, key.name)
	case keyNode:
		return r.syncNode(ctx, key.name)
	}
	return nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
