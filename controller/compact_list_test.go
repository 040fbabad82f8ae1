package controller

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/vigil-storage/vigil"
)

// pagingReactor answers list requests from all in pages of the
// request's limit, with numeric continue tokens, as the API server does for a
// consistent read; failAt, when > 0, makes the page starting there fail. Each
// request's options are appended to *seen.
func pagingReactor[T any](all []T, rv string, failAt int, seen *[]metav1.ListOptions,
	wrap func(items []T, meta metav1.ListMeta) runtime.Object) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.ListActionImpl).ListOptions
		*seen = append(*seen, o)
		start := 0
		if o.Continue != "" {
			start, _ = strconv.Atoi(o.Continue)
		}
		if failAt > 0 && start == failAt {
			return true, nil, errors.New("etcd went away")
		}
		end := len(all)
		if o.Limit > 0 {
			end = min(start+int(o.Limit), len(all))
		}
		lm := metav1.ListMeta{ResourceVersion: rv}
		if end < len(all) {
			lm.Continue = strconv.Itoa(end)
			rest := int64(len(all) - end)
			lm.RemainingItemCount = &rest
		}
		return true, wrap(all[start:end], lm), nil
	}
}

func podPages(items []corev1.Pod, lm metav1.ListMeta) runtime.Object {
	return &corev1.PodList{ListMeta: lm, Items: items}
}

func fatPods(total int) []corev1.Pod {
	var all []corev1.Pod
	for i := range total {
		p := newPod("ns", fmt.Sprintf("p-%d", i), "node-1", controllerRef("apps/v1", "StatefulSet", "db", "uid-db"), pvcVolume("data", fmt.Sprintf("data-%d", i)))
		p.Labels = map[string]string{"app": "db"}
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
		p.Spec.Containers = []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}
		if i == 7 {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 9,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonCrashLoopBackOff}}}}
		}
		all = append(all, *p)
	}
	return all
}

// TestListCompact_PodsInPagesOfOneSnapshot: the pod cache's list asks for a
// consistent snapshot in pages of listPage, follows every continue token,
// answers with the snapshot's resourceVersion and keeps of each pod a
// cachedPod with what the cache reads (node, phase, owner, claims, crash-loop
// restarts), not its containers, labels or managed fields.
func TestListCompact_PodsInPagesOfOneSnapshot(t *testing.T) {
	const total = 1234
	client := fake.NewClientset()
	var requests []metav1.ListOptions
	client.PrependReactor("list", "pods", pagingReactor(fatPods(total), "4242", 0, &requests, podPages))
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	list := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) }
	got, err := listCompact(context.Background(), metav1.ListOptions{ResourceVersion: "0", Limit: 7}, list, keepCachedPod)
	if err != nil {
		t.Fatal(err)
	}
	if len(requests) != 3 {
		t.Fatalf("%d requests, want 3 pages of %d", len(requests), listPage)
	}
	for i, o := range requests {
		if o.ResourceVersion != "" || o.Limit != listPage {
			t.Errorf("page %d asked with resourceVersion %q, limit %d; want a consistent read of %d", i, o.ResourceVersion, o.Limit, listPage)
		}
	}
	if len(got.Items) != total || got.ResourceVersion != "4242" || got.Continue != "" {
		t.Fatalf("%d pods at resourceVersion %q (continue %q), want %d at 4242", len(got.Items), got.ResourceVersion, got.Continue, total)
	}
	cp, ok := got.Items[7].(*cachedPod)
	if !ok {
		t.Fatalf("kept a %T, want a *cachedPod", got.Items[7])
	}
	p := cp.pod()
	if p.Name != "p-7" || p.Spec.NodeName != "node-1" || p.Status.Phase != corev1.PodRunning ||
		ownerOf(p.OwnerReferences) != "StatefulSet/db" || len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "data-7" {
		t.Errorf("kept %+v; want node, phase, owner and claim", p)
	}
	if n := crashLoopRestarts(p); n != 9 {
		t.Errorf("crash-loop restarts %d, want 9", n)
	}
	if p.Labels != nil || p.ManagedFields != nil || len(p.Spec.Containers) != 0 {
		t.Errorf("kept labels %v, managed fields %v, containers %v; want none", p.Labels, p.ManagedFields, p.Spec.Containers)
	}
}

// TestListCompact_AFailedPageFailsTheList: a page that fails, or an object the
// keep function refuses, fails the whole list (the reflector retries it)
// rather than answering part of the snapshot.
func TestListCompact_AFailedPageFailsTheList(t *testing.T) {
	client := fake.NewClientset()
	var requests []metav1.ListOptions
	client.PrependReactor("list", "pods", pagingReactor(fatPods(1200), "9", 2*listPage, &requests, podPages))
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	list := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) }
	got, err := listCompact(context.Background(), metav1.ListOptions{}, list, keepCachedPod)
	if err == nil || !strings.Contains(err.Error(), "etcd went away") || got != nil {
		t.Fatalf("got %v, %v; want the third page's error and no list", got, err)
	}
	nodes := func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return &corev1.NodeList{Items: []corev1.Node{*newNode("n1", corev1.ConditionTrue, -time.Hour)}}, nil
	}
	got, err = listCompact(context.Background(), metav1.ListOptions{}, nodes, keepCachedPod)
	if err == nil || !strings.Contains(err.Error(), "*v1.Node") || got != nil {
		t.Fatalf("got %v, %v; want a refusal naming the node", got, err)
	}
}

// TestUseCompactLists_PersistentVolumes: with useCompactLists, the factory's
// own PV informer lists in pages of a consistent snapshot, stores slim PVs
// that its lister finds, and still follows the watch that starts at the
// snapshot.
func TestUseCompactLists_PersistentVolumes(t *testing.T) {
	const total = 1100
	var all []corev1.PersistentVolume
	for i := range total {
		pv := newPV(fmt.Sprintf("pv-%d", i), vigil.DriverName)
		pv.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "csi-provisioner"}}
		pv.Labels = map[string]string{"zone": "z1"}
		all = append(all, *pv)
	}
	client := fake.NewClientset()
	var requests []metav1.ListOptions
	client.PrependReactor("list", "persistentvolumes", pagingReactor(all, "77", 0, &requests,
		func(items []corev1.PersistentVolume, lm metav1.ListMeta) runtime.Object {
			return &corev1.PersistentVolumeList{ListMeta: lm, Items: items}
		}))
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(TransformForCache))
	useCompactLists(f)
	pvs := f.Core().V1().PersistentVolumes()
	inf := pvs.Informer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("PV informer did not sync")
	}
	if len(requests) != 3 || requests[0].Limit != listPage || requests[0].ResourceVersion != "" {
		t.Fatalf("listed with %+v; want 3 pages of %d from a consistent read", requests, listPage)
	}
	got, err := pvs.Lister().List(labels.Everything())
	if err != nil || len(got) != total {
		t.Fatalf("lister has %d PVs (%v), want %d", len(got), err, total)
	}
	pv, err := pvs.Lister().Get("pv-1099")
	if err != nil {
		t.Fatal(err)
	}
	if pv.ManagedFields != nil || pv.Labels != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != vigil.DriverName {
		t.Fatalf("stored %+v; want a slim PV that keeps its CSI driver", pv)
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, newPV("pv-new", vigil.DriverName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := pvs.Lister().Get("pv-new"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a PV created after the list never reached the cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCompactList_DeepCopyIsIndependent: a copy of a compact list shares
// nothing with it, so changing one leaves the other as it was.
func TestCompactList_DeepCopyIsIndependent(t *testing.T) {
	p := newPod("ns", "db-0", "node-1", controllerRef("apps/v1", "StatefulSet", "db", "uid-db"), pvcVolume("data", "data-db-0"))
	l := &compactList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []runtime.Object{toCachedPod(p)}}
	c := l.DeepCopyObject().(*compactList)
	c.ResourceVersion = "8"
	cp := c.Items[0].(*cachedPod)
	cp.NodeName = "node-2"
	cp.Volumes[0].Claim = "other"
	cp.OwnerReferences[0].Name = "web"
	got := l.Items[0].(*cachedPod)
	if l.ResourceVersion != "7" || got.NodeName != "node-1" || got.Volumes[0].Claim != "data-db-0" || got.OwnerReferences[0].Name != "db" {
		t.Fatalf("changing the copy changed the original: resourceVersion %q, %+v", l.ResourceVersion, got)
	}
}
