package chaos

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The kube-controller-manager's probe: a ReplicaSet of one pod that no node
// may run (its node selector matches no node), so it stays Pending and nothing
// of Vigil's or the workload's sees it.
const (
	probeName     = "kcm-probe"
	probeSelector = "vigil.io/chaos-nowhere"
	// settleBound bounds the wait for the controller manager to see pods
	// again; client-go's reflectors back off up to 30 s (×2 with jitter).
	settleBound = 2 * time.Minute
)

// createProbe creates the probe's ReplicaSet.
func (h *Harness) createProbe(ctx context.Context) error {
	labels := map[string]string{"app": probeName}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: probeName, Namespace: namespace, Labels: labels},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{probeSelector: "true"},
					Containers:   []corev1.Container{{Name: "probe", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
	if _, err := h.sb.Client().AppsV1().ReplicaSets(namespace).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the controller manager's probe ReplicaSet: %w", err)
	}
	return nil
}

// awaitControllersSeePods waits, after an API server restart, until the
// kube-controller-manager's pod watch is back: it deletes the probe's pod and
// waits for the ReplicaSet controller (which shares the pod informer with the
// attach-detach controller) to replace it. Until then a StatefulSet pod
// force-deleted and recreated under the same name reaches that informer as an
// update of one pod, not a delete and an add: the attach-detach controller
// keeps wanting the volume on the old node, for up to a minute, and the
// replacement's attach waits. A fault drawn in that window would measure
// Kubernetes' recovery from the restart, not Vigil's from the fault; it is
// said in the cycle's log how long the controllers took.
// The probe pod is replaced by the ReplicaSet controller only once that
// informer is live, so the wait ends no sooner than the watch is back.
func (h *Harness) awaitControllersSeePods(ctx context.Context) error {
	c := h.sb.Client().CoreV1().Pods(namespace)
	sel := metav1.ListOptions{LabelSelector: "app=" + probeName}
	var old types.UID
	deadline := time.Now().Add(settleBound)
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		list, err := c.List(lctx, sel)
		cancel()
		if err != nil {
			time.Sleep(250 * time.Millisecond)
			continue
		}
	items:
		for _, p := range list.Items {
			switch {
			case old == "" && p.DeletionTimestamp == nil:
				uid := p.UID
				dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := c.Delete(dctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
					Preconditions: &metav1.Preconditions{UID: &uid}})
				cancel()
				if err == nil || apierrors.IsNotFound(err) {
					old = uid
				}
				break items
			case old != "" && p.UID != old:
				return nil
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("the kube-controller-manager did not replace the probe pod within %s of the API server's restart: its pod watch is not back", settleBound)
}
