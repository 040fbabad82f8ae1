package controller

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestListPodsCompact_PagesOfOneSnapshot: the pod cache's list asks for a
// consistent snapshot in pages of podListPage, follows every continue token,
// answers with the snapshot's resourceVersion and keeps of each pod what the
// cache reads (node, phase, owner, claims, crash-loop restarts), not its
// containers, labels or managed fields.
func TestListPodsCompact_PagesOfOneSnapshot(t *testing.T) {
	const total = 1234
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
	client := fake.NewClientset()
	var requests []metav1.ListOptions
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.ListActionImpl).ListOptions
		requests = append(requests, o)
		start := 0
		if o.Continue != "" {
			start, _ = strconv.Atoi(o.Continue)
		}
		end := min(start+int(o.Limit), total)
		page := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "4242"}, Items: all[start:end]}
		if end < total {
			page.Continue = strconv.Itoa(end)
			rest := int64(total - end)
			page.RemainingItemCount = &rest
		}
		return true, page, nil
	})
	got, err := listPodsCompact(context.Background(), client, metav1.ListOptions{ResourceVersion: "0", Limit: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(requests) != 3 {
		t.Fatalf("%d requests, want 3 pages of %d", len(requests), podListPage)
	}
	for i, o := range requests {
		if o.ResourceVersion != "" || o.Limit != podListPage {
			t.Errorf("page %d asked with resourceVersion %q, limit %d; want a consistent read of %d", i, o.ResourceVersion, o.Limit, podListPage)
		}
	}
	if len(got.Items) != total || got.ResourceVersion != "4242" {
		t.Fatalf("%d pods at resourceVersion %q, want %d at 4242", len(got.Items), got.ResourceVersion, total)
	}
	p := got.Items[7]
	if p.Name != "p-7" || p.Spec.NodeName != "node-1" || p.Status.Phase != corev1.PodRunning ||
		ownerOf(p.OwnerReferences) != "StatefulSet/db" || len(p.Spec.Volumes) != 1 || p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "data-7" {
		t.Errorf("kept %+v; want node, phase, owner and claim", p)
	}
	if n := crashLoopRestarts(&p); n != 9 {
		t.Errorf("crash-loop restarts %d, want 9", n)
	}
	if p.Labels != nil || p.ManagedFields != nil || len(p.Spec.Containers) != 0 {
		t.Errorf("kept labels %v, managed fields %v, containers %v; want none", p.Labels, p.ManagedFields, p.Spec.Containers)
	}
}
