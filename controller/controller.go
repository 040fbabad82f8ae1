package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

var everything = labels.Everything()

// ErrCacheSync is returned by Run when the informer caches never synced.
var ErrCacheSync = errors.New("controller: informer caches did not sync")

// Config is what New needs. Client, Informers, Settings, Recorder and
// Metrics are required; FenceBackend, Recoveries, ActBlocked and Now are optional.
type Config struct {
	Client    kubernetes.Interface
	Informers informers.SharedInformerFactory
	Settings  SettingsReader
	// FenceBackend is the fencing back end (the datapath). nil: nothing is fenced by
	// Vigil, storage isolation is not judged, and the fast trigger fires only on
	// the proofs Kubernetes gives (a deleted node, the out-of-service taint).
	FenceBackend FenceBackend
	// Recoveries writes NodeRecovery records; nil: none are written.
	Recoveries RecoveryClient
	// ActBlocked, when it returns an error, keeps the controllers from acting
	// (a bad managed setting at startup); they judge and report, and act once it
	// returns nil.
	ActBlocked func() error
	Recorder   record.EventRecorder
	Metrics    *Metrics
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// keyKind says what a queue key names.
type keyKind uint8

const (
	keyPod         keyKind = iota + 1 // a pod: the reaper or crash-loop handling
	keyNode                           // a node: health, fencing, its recovery
	keyAttachments                    // a down node's attachments: attachment recovery
)

// queueKey is one item of the workqueue.
type queueKey struct {
	kind      keyKind
	namespace string
	name      string
}

// Controller runs Vigil's reconcilers (reconciler.go) on one rate-limited
// queue fed by shared informers, beside the storage watch and the
// NodeRecovery writer; only the leader runs it. It holds what the reconcilers
// share: the informer caches, the node tracker, the fence back end and the
// proofs read from it, the Event writer and the metrics.
type Controller struct {
	client     kubernetes.Interface
	settings   SettingsReader
	backend    FenceBackend
	proofs     *proofs
	recoveries *recoveries
	actBlocked func() error
	metrics    *Metrics
	events     *events
	now        func() time.Time

	listers
	podsByNode cache.Indexer // cachedPods, indexed by node, claim and owner
	vaIndex    cache.Indexer // VolumeAttachments, indexed by PV and node
	pvIndex    cache.Indexer // PersistentVolumes, indexed by driver^handle
	nodes      *nodeTracker
	outage     *controlPlaneWatch
	deleted    deletedUIDs     // what this controller deleted, until its informers catch up
	failedSeen map[string]bool // handles of failed volumes at the last poll (failed_volumes.go)
	serverDown serverOutages   // volumes whose server does not answer (server_outage.go)
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[queueKey]

	// The reconcilers, one per concern (reconciler.go).
	health    *nodeHealth
	fence     *nodeFence
	reaper    *podReaper
	attach    *attachmentRecovery
	crashLoop *crashLoopDeletion
}

// New registers the informers, indexes and event handlers the controller
// needs on cfg.Informers. Start the factory after calling it.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil || cfg.Settings == nil || cfg.Recorder == nil || cfg.Metrics == nil {
		return nil, errors.New("controller: Config needs Client, Informers, Settings, Recorder and Metrics")
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	f := cfg.Informers
	useCompactLists(f)
	nodeInf := f.Core().V1().Nodes()
	pvcInf, pvInf := f.Core().V1().PersistentVolumeClaims(), f.Core().V1().PersistentVolumes()
	vaInf, rsInf := f.Storage().V1().VolumeAttachments(), f.Apps().V1().ReplicaSets()
	leaseInf := f.Coordination().V1().Leases()
	podInf, err := podCacheInformer(f)
	if err != nil {
		return nil, fmt.Errorf("controller: pod cache: %w", err)
	}
	if err := vaInf.Informer().AddIndexers(cache.Indexers{attachmentByPVIndex: attachmentPV, attachmentByNodeIndex: attachmentNode}); err != nil {
		return nil, fmt.Errorf("controller: index volume attachments: %w", err)
	}
	if err := pvInf.Informer().AddIndexers(cache.Indexers{pvByHandleIndex: pvHandle}); err != nil {
		return nil, fmt.Errorf("controller: index persistent volumes: %w", err)
	}
	c := &Controller{
		client: cfg.Client, settings: cfg.Settings, backend: cfg.FenceBackend, actBlocked: cfg.ActBlocked, metrics: cfg.Metrics,
		events: newEvents(cfg.Recorder, now), now: now,
		listers: listers{
			nodes: nodeInf.Lister(), pvcs: pvcInf.Lister(), pvs: pvInf.Lister(),
			replicaSets: rsInf.Lister(), attachmentsByPV: vaInf.Informer().GetIndexer(),
		},
		podsByNode: podInf.GetIndexer(),
		vaIndex:    vaInf.Informer().GetIndexer(),
		pvIndex:    pvInf.Informer().GetIndexer(),
		nodes:      newNodeTracker(),
		outage:     newControlPlaneWatch(),
		deleted:    newDeletedUIDs(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[queueKey](),
			workqueue.TypedRateLimitingQueueConfig[queueKey]{Name: "vigil-reaper"}),
	}
	c.health, c.fence, c.reaper, c.attach = &nodeHealth{c}, &nodeFence{c}, &podReaper{c}, &attachmentRecovery{c}
	c.crashLoop = &crashLoopDeletion{Controller: c, bound: newCrashLoops()}
	if cfg.FenceBackend != nil {
		c.proofs = newProofs(cfg.FenceBackend, c.nodes, now)
	}
	c.recoveries = newRecoveries(cfg.Recoveries, cfg.Metrics, c.ownerPodUIDs)
	c.synced = []cache.InformerSynced{
		podInf.HasSynced, nodeInf.Informer().HasSynced, pvcInf.Informer().HasSynced,
		pvInf.Informer().HasSynced, vaInf.Informer().HasSynced, rsInf.Informer().HasSynced,
		leaseInf.Informer().HasSynced,
	}
	if err := c.addHandlers(podInf, nodeInf.Informer(), vaInf.Informer()); err != nil {
		return nil, err
	}
	if _, err := leaseInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onLease,
		UpdateFunc: func(_, obj any) { c.onLease(obj) },
		DeleteFunc: c.onLeaseDelete,
	}); err != nil {
		return nil, fmt.Errorf("controller: node lease handler: %w", err)
	}
	return c, nil
}

func (c *Controller) addHandlers(podInf, nodeInf, vaInf cache.SharedIndexInformer) error {
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onPod,
		UpdateFunc: func(_, obj any) { c.onPod(obj) },
		DeleteFunc: c.onPodDelete,
	}); err != nil {
		return fmt.Errorf("controller: pod handler: %w", err)
	}
	if _, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onNode,
		UpdateFunc: c.onNodeUpdate,
		DeleteFunc: c.onNode,
	}); err != nil {
		return fmt.Errorf("controller: node handler: %w", err)
	}
	if _, err := vaInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onAttachment,
		UpdateFunc: func(_, obj any) { c.onAttachment(obj) },
		DeleteFunc: c.onAttachment,
	}); err != nil {
		return fmt.Errorf("controller: volume attachment handler: %w", err)
	}
	return nil
}

// HasSynced reports whether every informer the controller reads has synced.
func (c *Controller) HasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Run waits for the caches, then runs the workers, the storage watch and the
// recovery writer until ctx ends, and returns only after every one of them has
// stopped: nothing acts once Run has returned (leadership lost). Only the leader
// calls Run; every replica may run the informers.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		c.queue.ShutDown()
		return ErrCacheSync
	}
	if err := c.recoveries.load(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "open NodeRecoveries not loaded; new records will be written")
	}
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		c.queue.ShutDown()
		wg.Wait()
	}()
	c.enqueueAllNodes()
	for _, f := range []func(context.Context){c.watchSettings, c.watchStorage, c.recoveries.run} {
		wg.Go(func() { f(wctx) })
	}
	for range workers {
		wg.Go(func() { wait.UntilWithContext(wctx, c.runWorker, time.Second) })
	}
	<-ctx.Done()
	return nil
}

// enqueueAllNodes queues every node that exists or still has pods, so a node that
// went down (or was deleted) while no leader was running is judged.
func (c *Controller) enqueueAllNodes() {
	names := map[string]struct{}{}
	if nodes, err := c.listers.nodes.List(everything); err == nil {
		for _, n := range nodes {
			names[n.Name] = struct{}{}
		}
	}
	for _, n := range c.podsByNode.ListIndexFuncValues(nodeIndex) {
		names[n] = struct{}{}
	}
	for _, n := range c.vaIndex.ListIndexFuncValues(attachmentByNodeIndex) {
		names[n] = struct{}{}
	}
	for n := range names {
		c.queue.Add(queueKey{kind: keyNode, name: n})
	}
}

// watchSettings re-judges every pod on a down node as soon as a setting changes,
// so a new policy acts without waiting for a resync.
func (c *Controller) watchSettings(ctx context.Context) {
	changes, cancel := c.settings.Subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
			c.requeueAfterSettingsChange()
			c.updateOutage(ctx)
		}
	}
}

// requeueAfterSettingsChange queues every node that is down or not Ready (a
// changed debounce can make it down), their pods and attachments, and every pod
// that looked crash-looping.
func (c *Controller) requeueAfterSettingsChange() {
	for _, n := range c.nodes.downNodes() {
		c.enqueuePodsOn(n)
		c.queue.Add(queueKey{kind: keyAttachments, name: n})
	}
	if nodes, err := c.listers.nodes.List(everything); err == nil {
		for _, n := range nodes {
			if !isNodeReady(n) || outOfServiceTaint(n) != nil {
				c.queue.Add(queueKey{kind: keyNode, name: n.Name})
			}
		}
	}
	for name := range c.nodes.isolatedNodes() {
		c.queue.Add(queueKey{kind: keyNode, name: name})
	}
	for _, o := range c.podsByNode.List() {
		if p, ok := o.(*cachedPod); ok && p.CrashLoopRestarts > 0 {
			c.queue.Add(queueKey{kind: keyPod, namespace: p.Namespace, name: p.Name})
		}
	}
}

func (c *Controller) enqueuePodsOn(node string) {
	objs, err := c.podsByNode.ByIndex(nodeIndex, node)
	if err != nil {
		return
	}
	for _, o := range objs {
		if p, ok := o.(*cachedPod); ok {
			c.queue.Add(queueKey{kind: keyPod, namespace: p.Namespace, name: p.Name})
		}
	}
}

// onPod queues a pod that is terminating, crash-looping or on an unhealthy node;
// tells the recovery records about it (it may be a replacement); and queues the
// attachments of down nodes holding one of its volumes (it may be the
// replacement waiting for them).
func (c *Controller) onPod(obj any) {
	pod, ok := obj.(*cachedPod)
	if !ok {
		return
	}
	c.recoveries.observePod(pod, ownerKeyOf(pod.Namespace, pod.OwnerReferences), c.now())
	c.queueAttachmentsOfClaims(pod)
	if pod.NodeName == "" {
		return
	}
	if pod.DeletionTimestamp == nil && pod.CrashLoopRestarts == 0 && !c.nodes.isDown(pod.NodeName) {
		node, err := c.listers.nodes.Get(pod.NodeName)
		if err == nil && isNodeReady(node) && outOfServiceTaint(node) == nil {
			return
		}
	}
	c.queue.Add(queueKey{kind: keyPod, namespace: pod.Namespace, name: pod.Name})
}

// onPodDelete queues the attachments of a down node that lost a pod.
func (c *Controller) onPodDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*cachedPod)
	if !ok {
		return
	}
	c.deleted.forget(pod.UID)
	if pod.NodeName != "" && c.nodes.isDown(pod.NodeName) {
		c.queue.Add(queueKey{kind: keyAttachments, name: pod.NodeName})
	}
	c.queueAttachmentsOfClaims(pod)
}

// queueAttachmentsOfClaims queues the down nodes that hold a VolumeAttachment of
// one of the pod's claims.
func (c *Controller) queueAttachmentsOfClaims(pod *cachedPod) {
	for _, v := range pod.Volumes {
		claim := v.Claim
		if v.Ephemeral {
			claim = pod.Name + "-" + v.Name
		}
		pvc, err := c.pvcs.PersistentVolumeClaims(pod.Namespace).Get(claim)
		if err != nil || pvc.Spec.VolumeName == "" {
			continue
		}
		for _, a := range c.attachments(pvc.Spec.VolumeName) {
			if a.NodeName != pod.NodeName && c.nodes.isDown(a.NodeName) {
				c.queue.Add(queueKey{kind: keyAttachments, name: a.NodeName})
			}
		}
	}
}

func (c *Controller) onAttachment(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if va, ok := obj.(*storagev1.VolumeAttachment); ok && c.nodes.isDown(va.Spec.NodeName) {
		c.queue.Add(queueKey{kind: keyAttachments, name: va.Spec.NodeName})
	}
}

func (c *Controller) onNode(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*corev1.Node); ok {
		c.queue.Add(queueKey{kind: keyNode, name: n.Name})
	}
}

// onNodeUpdate queues a node whose health inputs changed, or on a resync; the
// kubelet's periodic status updates alone queue nothing.
func (c *Controller) onNodeUpdate(oldObj, newObj any) {
	o, ok1 := oldObj.(*corev1.Node)
	n, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	if o.ResourceVersion == n.ResourceVersion || healthInputsDiffer(o, n) {
		c.queue.Add(queueKey{kind: keyNode, name: n.Name})
	}
	if c.nodes.isDown(n.Name) && len(o.Status.VolumesInUse) != len(n.Status.VolumesInUse) {
		c.queue.Add(queueKey{kind: keyAttachments, name: n.Name})
	}
}

func healthInputsDiffer(a, b *corev1.Node) bool {
	ca, cb := readyCondition(a), readyCondition(b)
	if (ca == nil) != (cb == nil) || (ca != nil && (ca.Status != cb.Status || !ca.LastTransitionTime.Equal(&cb.LastTransitionTime))) {
		return true
	}
	return (outOfServiceTaint(a) == nil) != (outOfServiceTaint(b) == nil) || (fencedTaint(a) == nil) != (fencedTaint(b) == nil)
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

// processNext handles one key: success forgets its failures, an error requeues
// it with backoff.
func (c *Controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if ctx.Err() != nil {
		return false
	}
	if err := c.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "sync failed; retrying", "kind", key.kind, "namespace", key.namespace, "name", key.name)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// blocked reports why the controllers may not act now ("" when they may).
func (c *Controller) blocked() string {
	if c.actBlocked == nil {
		return ""
	}
	if err := c.actBlocked(); err != nil {
		return err.Error()
	}
	return ""
}

// ownerPodUIDs lists the UIDs of the pods an owner (ownerKeyOf) has now.
func (c *Controller) ownerPodUIDs(key string) []types.UID {
	objs, err := c.podsByNode.ByIndex(ownerIndex, key)
	if err != nil {
		return nil
	}
	out := make([]types.UID, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*cachedPod); ok {
			out = append(out, p.UID)
		}
	}
	return out
}

// proofSource is the pod reaper's access to node grants (nil without a FenceBackend).
func (c *Controller) proofSource() proofSource {
	if c.proofs == nil {
		return nil
	}
	return c.proofs.grants
}
