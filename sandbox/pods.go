package sandbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WaitPodsRunning waits until the pods of ns matching selector include n that are
// Running, scheduled and not being deleted, and returns those.
func WaitPodsRunning(ctx context.Context, c kubernetes.Interface, ns, selector string, n int, timeout time.Duration) ([]corev1.Pod, error) {
	var running []corev1.Pod
	err := Poll(ctx, timeout, fmt.Sprintf("%d running pods %q in %s", n, selector, ns), func(ctx context.Context) (bool, string, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error(), nil
		}
		running = running[:0]
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				running = append(running, p)
			}
		}
		return len(running) >= n, fmt.Sprintf("%d of %d pods running", len(running), len(list.Items)), nil
	}, func(ctx context.Context) string { return DescribePods(ctx, c, ns, selector) })
	return running, err
}

// WaitPVCsBound waits until every named PVC of ns is Bound.
func WaitPVCsBound(ctx context.Context, c kubernetes.Interface, ns string, names []string, timeout time.Duration) error {
	return Poll(ctx, timeout, fmt.Sprintf("PVCs %v in %s Bound", names, ns), func(ctx context.Context) (bool, string, error) {
		var pending []string
		for _, name := range names {
			pvc, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				pending = append(pending, name+": "+err.Error())
			} else if pvc.Status.Phase != corev1.ClaimBound {
				pending = append(pending, fmt.Sprintf("%s %s", name, pvc.Status.Phase))
			}
		}
		return len(pending) == 0, strings.Join(pending, "; "), nil
	}, func(ctx context.Context) string { return DescribePVCs(ctx, c, ns) })
}

// DescribePods prints the pods of ns matching selector (phase, node, deletion,
// conditions) with their events.
func DescribePods(ctx context.Context, c kubernetes.Interface, ns, selector string) string {
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return "pods: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pods %q in %s: %d\n", selector, ns, len(list.Items))
	for _, p := range list.Items {
		fmt.Fprintf(&b, "pod %s uid %s node %q phase %s", p.Name, p.UID, p.Spec.NodeName, p.Status.Phase)
		if p.DeletionTimestamp != nil {
			fmt.Fprintf(&b, " deleting since %s", p.DeletionTimestamp.UTC().Format(time.RFC3339))
		}
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
		}
		b.WriteString("\n")
		b.WriteString(DescribeEvents(ctx, c, ns, "Pod", p.Name))
	}
	return b.String()
}

// DescribePVCs prints the PVCs of ns, their PVs and the VolumeAttachments.
func DescribePVCs(ctx context.Context, c kubernetes.Interface, ns string) string {
	var b strings.Builder
	if list, err := c.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "pvcs: %v\n", err)
	} else {
		for _, p := range list.Items {
			fmt.Fprintf(&b, "pvc %s/%s %s volume %q\n", ns, p.Name, p.Status.Phase, p.Spec.VolumeName)
			b.WriteString(DescribeEvents(ctx, c, ns, "PersistentVolumeClaim", p.Name))
		}
	}
	if vas, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err != nil {
		fmt.Fprintf(&b, "volumeattachments: %v\n", err)
	} else {
		for _, va := range vas.Items {
			pv := ""
			if va.Spec.Source.PersistentVolumeName != nil {
				pv = *va.Spec.Source.PersistentVolumeName
			}
			fmt.Fprintf(&b, "volumeattachment %s pv %s node %s attached %v\n", va.Name, pv, va.Spec.NodeName, va.Status.Attached)
		}
	}
	return b.String()
}
