package controller

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// listPage is how many objects one page of a compact list holds.
const listPage = 500

// compactList is what the controllers' informers list: the slim objects of
// one snapshot. The reflector reads only its resourceVersion and Items.
type compactList struct {
	metav1.ListMeta
	Items []runtime.Object
}

// GetObjectKind implements runtime.Object; the list carries no type metadata.
func (l *compactList) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (l *compactList) DeepCopyObject() runtime.Object {
	c := &compactList{Items: make([]runtime.Object, len(l.Items))}
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	for i, o := range l.Items {
		c.Items[i] = o.DeepCopyObject()
	}
	return c
}

// listCompact lists one kind as one consistent snapshot, in pages of
// listPage, and keeps of each object only keep(object) before it reads the
// next page.
//
// An informer's ordinary list asks the API server's cache (resourceVersion
// "0"), which answers in one piece whatever the limit: every object of the
// kind decoded in full at once, before the informer's transform slims any.
// With 20,000 pods the manager's memory peaked at 377-425 MiB at its start,
// against 110 MiB once slimmed; with pods in pages, the 5,000 PVs, PVCs and
// attachments and 500 nodes listed whole still took it to 155-172 MiB. Pages
// need a consistent read (resourceVersion ""), which is never older than the
// resourceVersion the reflector asked for. An API server that streams lists to
// informers (watch-list) never calls this.
func listCompact(ctx context.Context, o metav1.ListOptions, list listFunc, keep keepFunc) (*compactList, error) {
	o.ResourceVersion, o.ResourceVersionMatch, o.Limit, o.Continue = "", "", listPage, ""
	out := &compactList{}
	for {
		page, err := list(ctx, o)
		if err != nil {
			return nil, err
		}
		lm, err := meta.ListAccessor(page)
		if err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(page)
		if err != nil {
			return nil, err
		}
		if out.Items == nil {
			n := len(items)
			if r := lm.GetRemainingItemCount(); r != nil {
				n += int(*r)
			}
			out.Items = make([]runtime.Object, 0, n)
		}
		for _, it := range items {
			k, err := keep(it)
			if err != nil {
				return nil, err
			}
			out.Items = append(out.Items, k)
		}
		out.ResourceVersion = lm.GetResourceVersion() // every page carries the snapshot's
		if lm.GetContinue() == "" {
			return out, nil
		}
		o.Continue = lm.GetContinue()
	}
}

// slimForCache is TransformForCache as listCompact's keep.
func slimForCache(o runtime.Object) (runtime.Object, error) {
	s, err := TransformForCache(o)
	if err != nil {
		return nil, err
	}
	r, ok := s.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("controller: the cache transform made a %T of a %T", s, o)
	}
	return r, nil
}

// compactInformer builds an informer whose lists are listCompact's.
func compactInformer(client kubernetes.Interface, example runtime.Object, resync time.Duration, indexers cache.Indexers,
	list listFunc, keep keepFunc, watch watchFunc) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return listCompact(ctx, o, list, keep)
		},
		WatchFuncWithContext: watch,
	}
	// The wrapper tells the reflector whether client can stream a watch-list
	// (a fake clientset cannot), as client-go's generated informers do.
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), example,
		cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: indexers})
}

// useCompactLists registers in f, before anyone asks f for them, informers of
// nodes, PVCs, PVs, VolumeAttachments, ReplicaSets and node Leases that list with
// listCompact. The factory's own accessors (f.Core().V1().Nodes() and so on)
// then return these, with the factory's transform, indexes and listers as
// usual.
func useCompactLists(f informers.SharedInformerFactory) {
	ns := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc} // as the generated informers index
	register := func(example runtime.Object, lw func(kubernetes.Interface) (listFunc, watchFunc)) {
		f.InformerFor(example, func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			list, watch := lw(client)
			return compactInformer(client, example, resync, ns, list, slimForCache, watch)
		})
	}
	register(&corev1.Node{}, func(c kubernetes.Interface) (listFunc, watchFunc) { return calls(c.CoreV1().Nodes()) })
	register(&corev1.PersistentVolumeClaim{}, func(c kubernetes.Interface) (listFunc, watchFunc) {
		return calls(c.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll))
	})
	register(&corev1.PersistentVolume{}, func(c kubernetes.Interface) (listFunc, watchFunc) { return calls(c.CoreV1().PersistentVolumes()) })
	register(&storagev1.VolumeAttachment{}, func(c kubernetes.Interface) (listFunc, watchFunc) {
		return calls(c.StorageV1().VolumeAttachments())
	})
	register(&appsv1.ReplicaSet{}, func(c kubernetes.Interface) (listFunc, watchFunc) {
		return calls(c.AppsV1().ReplicaSets(metav1.NamespaceAll))
	})
	// Node Leases only, in their namespace: the control-plane outage rule
	// reads when each was renewed.
	register(&coordinationv1.Lease{}, func(c kubernetes.Interface) (listFunc, watchFunc) {
		return calls(c.CoordinationV1().Leases(corev1.NamespaceNodeLease))
	})
}

// listWatcher is a typed client of one kind, as client-go generates them.
type listWatcher[L runtime.Object] interface {
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

// calls is r's List and Watch as a ListWatch's two calls.
func calls[L runtime.Object](r listWatcher[L]) (listFunc, watchFunc) {
	return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return r.List(ctx, o) }, r.Watch
}

// listFunc and watchFunc are a ListWatch's two calls; keepFunc is what
// listCompact keeps of each object.
type (
	listFunc  = func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watchFunc = func(context.Context, metav1.ListOptions) (watch.Interface, error)
	keepFunc  = func(runtime.Object) (runtime.Object, error)
)
