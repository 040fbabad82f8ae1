package kubelet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Run mounts the volumes of cfg.NodeName's pods through the node's CSI node
// service until ctx ends, then returns nil (operations in flight are waited
// for). It fails early on a bad Config, an unreadable state file or caches
// that never sync.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	sock, _ := socketPath(cfg.CSIEndpoint)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("CSI endpoint %s: %w", cfg.CSIEndpoint, err)
	}
	defer conn.Close()
	rec := cfg.Recorder
	if rec == nil {
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
		defer b.Shutdown()
		rec = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: Component, Host: cfg.NodeName})
	}
	inf := newInformers(cfg)
	k, err := newKubelet(cfg, csi.NewNodeClient(conn), inf.pods, inf, rec)
	if err != nil {
		return err
	}
	kick := make(chan struct{}, 1)
	trigger := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if err := inf.watch(trigger, k.nodeChanged); err != nil {
		return err
	}
	inf.start(ctx)
	if !inf.synced(ctx) {
		return fmt.Errorf("kubelet stand-in for node %s: caches did not sync: %w", cfg.NodeName, errors.Join(ctx.Err(), errors.New("stopped")))
	}
	k.log.Info("kubelet stand-in running", "csiEndpoint", cfg.CSIEndpoint, "driver", cfg.Driver, "root", cfg.RootDir)
	return k.loop(ctx, kick, trigger)
}

// loop syncs at every kick and at least every PollInterval; plans run in
// goroutines, each kicking a new sync when it ends.
func (k *kubelet) loop(ctx context.Context, kick <-chan struct{}, trigger func()) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	async := func(p plan) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.execute(ctx, p)
			trigger()
		}()
	}
	tick := time.NewTicker(k.cfg.PollInterval)
	defer tick.Stop()
	for {
		if _, err := k.syncOnce(ctx, async); ctx.Err() == nil {
			k.warnChanged("sync", "sync failed; retrying every poll interval", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-tick.C:
		}
	}
}

// informerSet holds the informers and listers of one node's stand-in: pods
// field-selected by spec.nodeName, the node by name, and PVCs, PVs,
// VolumeAttachments and CSIDrivers.
type informerSet struct {
	factories []informers.SharedInformerFactory
	informers []cache.SharedIndexInformer
	node      cache.SharedIndexInformer
	pods      corelisters.PodLister
	pvcs      corelisters.PersistentVolumeClaimLister
	pvs       corelisters.PersistentVolumeLister
	vas       storagelisters.VolumeAttachmentLister
	drivers   storagelisters.CSIDriverLister
}

func newInformers(cfg Config) *informerSet {
	selected := func(sel fields.Selector) informers.SharedInformerFactory {
		return informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.Resync,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = sel.String() }))
	}
	podF := selected(fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName))
	nodeF := selected(fields.OneTermEqualSelector("metadata.name", cfg.NodeName))
	all := informers.NewSharedInformerFactory(cfg.Client, cfg.Resync)
	s := &informerSet{factories: []informers.SharedInformerFactory{podF, nodeF, all}}
	pods, pvcs := podF.Core().V1().Pods(), all.Core().V1().PersistentVolumeClaims()
	pvs, vas, drivers := all.Core().V1().PersistentVolumes(), all.Storage().V1().VolumeAttachments(), all.Storage().V1().CSIDrivers()
	s.pods, s.pvcs, s.pvs, s.vas, s.drivers = pods.Lister(), pvcs.Lister(), pvs.Lister(), vas.Lister(), drivers.Lister()
	s.node = nodeF.Core().V1().Nodes().Informer()
	s.informers = []cache.SharedIndexInformer{pods.Informer(), pvcs.Informer(), pvs.Informer(), vas.Informer(), drivers.Informer(), s.node}
	return s
}

// watch kicks a sync on every change; a node update kicks only when its
// volumesInUse needs repairing.
func (s *informerSet) watch(kick func(), nodeChanged func(*corev1.Node) bool) error {
	all := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick() },
		UpdateFunc: func(any, any) { kick() },
		DeleteFunc: func(any) { kick() },
	}
	for _, inf := range s.informers[:len(s.informers)-1] {
		if _, err := inf.AddEventHandler(all); err != nil {
			return err
		}
	}
	onNode := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok && nodeChanged(n) {
			kick()
		}
	}
	_, err := s.node.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onNode, UpdateFunc: func(_, obj any) { onNode(obj) },
	})
	return err
}

func (s *informerSet) start(ctx context.Context) {
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
}

func (s *informerSet) synced(ctx context.Context) bool {
	var fns []cache.InformerSynced
	for _, inf := range s.informers {
		fns = append(fns, inf.HasSynced)
	}
	return cache.WaitForCacheSync(ctx.Done(), fns...)
}

// The objects interface, on the listers.

func (s *informerSet) PVC(ns, name string) (*corev1.PersistentVolumeClaim, bool) {
	o, err := s.pvcs.PersistentVolumeClaims(ns).Get(name)
	return o, err == nil
}

func (s *informerSet) PV(name string) (*corev1.PersistentVolume, bool) {
	o, err := s.pvs.Get(name)
	return o, err == nil
}

func (s *informerSet) VA(name string) (*storagev1.VolumeAttachment, bool) {
	o, err := s.vas.Get(name)
	return o, err == nil
}

func (s *informerSet) Driver(name string) (*storagev1.CSIDriver, bool) {
	o, err := s.drivers.Get(name)
	return o, err == nil
}
