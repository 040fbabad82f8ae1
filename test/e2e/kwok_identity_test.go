package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vigil-storage/vigil/sandbox"
)

// TestKwok_RunsAsItsNode: each node's kwok (the kubelet's pod lifecycle) runs
// as the node itself, system:node:NAME, as a kubelet does. A pod it finishes
// deleting is deleted under that identity (the audit log says so), and the
// same identity may not delete a pod of another node: a pod deleted by name
// while a same-named replacement runs elsewhere (a StatefulSet's) stays alive.
// With the admin's credential, kwok did delete such replacements.
func TestKwok_RunsAsItsNode(t *testing.T) {
	ctx := context.Background()
	c := sb.Client()
	const ns = "kwok-identity"
	must(t, sandbox.EnsureNamespace(ctx, c, ns))
	t.Cleanup(func() { _ = c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: sandbox.PauseImage}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
	}
	running := func(name string) {
		t.Helper()
		must(t, sandbox.Poll(ctx, 30*time.Second, name+" Running", func(ctx context.Context) (bool, string, error) {
			p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase), nil
		}, nil))
	}

	// A graceful delete: the API server marks the pod, node-1's kwok ends it.
	_, err := c.CoreV1().Pods(ns).Create(ctx, pod("ends-on-node-1", "node-1"), metav1.CreateOptions{})
	must(t, err)
	running("ends-on-node-1")
	must(t, c.CoreV1().Pods(ns).Delete(ctx, "ends-on-node-1", metav1.DeleteOptions{}))
	must(t, sandbox.Poll(ctx, 30*time.Second, "ends-on-node-1 gone", func(ctx context.Context) (bool, string, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, "ends-on-node-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	}, nil))
	must(t, sandbox.Poll(ctx, 10*time.Second, "the final delete in the audit log", func(context.Context) (bool, string, error) {
		evs, err := sb.AuditEvents()
		if err != nil {
			return false, err.Error(), nil
		}
		var who []string
		for _, e := range evs {
			if e.Verb == "delete" && e.Resource == "pods" && e.Namespace == ns && e.Name == "ends-on-node-1" {
				who = append(who, fmt.Sprintf("%s: %d", e.User, e.Code))
				if e.User == "system:node:node-1" && e.Code == 200 {
					return true, "", nil
				}
			}
		}
		return false, "deletes: " + strings.Join(who, ", "), nil
	}, nil))

	// node-1's kwok credential may not delete node-2's pod.
	_, err = c.CoreV1().Pods(ns).Create(ctx, pod("lives-on-node-2", "node-2"), metav1.CreateOptions{})
	must(t, err)
	running("lives-on-node-2")
	st, err := sb.Status(ctx)
	must(t, err)
	var kwokConfig string
	for _, n := range st.Nodes {
		if n.Name == "node-1" {
			kwokConfig = n.KwokKubeconfig
		}
	}
	if kwokConfig == "" {
		t.Fatalf("node-1's status names no kwok kubeconfig: %+v", st.Nodes)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kwokConfig)
	must(t, err)
	kwok, err := kubernetes.NewForConfig(rc)
	must(t, err)
	err = kwok.CoreV1().Pods(ns).Delete(ctx, "lives-on-node-2", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "can only delete pods with spec.nodeName set to itself") {
		t.Fatalf("node-1's kwok deleting node-2's pod: %v; want NodeRestriction's refusal", err)
	}
	if _, err := c.CoreV1().Pods(ns).Get(ctx, "lives-on-node-2", metav1.GetOptions{}); err != nil {
		t.Fatalf("node-2's pod after the refused delete: %v", err)
	}
}
