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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/sandbox"
)

// describeCase prints the case's pods, volumes and the victim's events.
func describeCase(ns string) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		c := sb.Client()
		return sandbox.DescribePods(ctx, c, ns, "") + sandbox.DescribePVCs(ctx, c, ns) + sandbox.DescribeNodes(ctx, c, reapVictim)
	}
}

// waitReaped waits until the pod is gone from the API (the watch saw it
// deleted) and returns when.
func waitReaped(t *testing.T, ctx context.Context, rec *recorder, p corev1.Pod, timeout time.Duration) deletion {
	t.Helper()
	var d deletion
	err := sandbox.Poll(ctx, timeout, fmt.Sprintf("pod %s/%s (uid %s) force-deleted", p.Namespace, p.Name, p.UID),
		func(ctx context.Context) (bool, string, error) {
			var ok bool
			d, ok = rec.gone(p.UID)
			return ok, "still there", nil
		}, describeCase(p.Namespace))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkStays fails unless each pod still exists with its UID (still Terminating
// unless it is the DaemonSet's) and was never seen deleted.
func checkStays(t *testing.T, ctx context.Context, rec *recorder, pods map[string]corev1.Pod, why string) {
	t.Helper()
	c := sb.Client()
	for role, want := range pods {
		p, err := c.CoreV1().Pods(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		_, gone := rec.gone(want.UID)
		switch {
		case apierrors.IsNotFound(err) || gone || (err == nil && p.UID != want.UID):
			t.Errorf("%s pod %s was deleted (%s); it must stay\n%s", role, want.Name, why, describeCase(want.Namespace)(ctx))
		case err != nil:
			t.Errorf("get pod %s: %v", want.Name, err)
		case role != "ds" && role != "job" && p.DeletionTimestamp == nil:
			t.Errorf("%s pod %s is not Terminating", role, want.Name)
		}
	}
}

// checkNoForceDelete fails if the reaper reports having force-deleted the pod (a
// pod with a finalizer stays in the API even then).
func checkNoForceDelete(t *testing.T, ctx context.Context, p corev1.Pod) {
	t.Helper()
	checkNoForceDeleteIn(t, ctx, sb.Client(), p)
}

// checkNoForceDeleteIn is checkNoForceDelete in the cluster of client c.
func checkNoForceDeleteIn(t *testing.T, ctx context.Context, c kubernetes.Interface, p corev1.Pod) {
	t.Helper()
	evs, err := c.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Pod", "involvedObject.name": p.Name, "reason": controller.EventPodForceDeleted}.String()})
	if err != nil {
		t.Errorf("events of %s: %v", p.Name, err)
		return
	}
	if len(evs.Items) > 0 {
		t.Errorf("the reaper force-deleted pod %s: %s", p.Name, evs.Items[0].Message)
	}
}

// checkOrder fails if a VolumeAttachment the pod had on the victim was
// deleted before the pod (by etcd revision): the matrix runs no datapath, so
// nothing is proven fenced and Vigil must leave the attachments to
// Kubernetes, which detaches once the pod is gone.
func checkOrder(t *testing.T, rec *recorder, cp *casePods, p corev1.Pod, podGone deletion) {
	t.Helper()
	vas := rec.attachmentDeletions()
	if len(cp.attachments[p.Name]) == 0 {
		t.Errorf("pod %s had no VolumeAttachment on %s to check", p.Name, reapVictim)
	}
	for _, name := range cp.attachments[p.Name] {
		if d, ok := vas[name]; ok && d.rv < podGone.rv {
			t.Errorf("VolumeAttachment %s deleted at revision %d, before its pod %s (revision %d): without a proof of "+
				"fencing only Kubernetes may free it, after the pod", name, d.rv, p.Name, podGone.rv)
		}
	}
}

// checkNoForeignDetach fails if an attachment of the case's volumes on another
// node than the victim was deleted, or one of a pod that stays was.
func checkNoForeignDetach(t *testing.T, rec *recorder, cp *casePods, stays map[string]corev1.Pod) {
	t.Helper()
	vas := rec.attachmentDeletions()
	for name, d := range vas {
		if d.node != reapVictim {
			t.Errorf("VolumeAttachment %s (PV %s) on healthy node %s was deleted", name, d.pv, d.node)
		}
	}
	for _, p := range stays {
		for _, name := range cp.attachments[p.Name] {
			if _, ok := vas[name]; ok {
				t.Errorf("VolumeAttachment %s of pod %s, which is not reaped, was deleted", name, p.Name)
			}
		}
	}
}

// waitReplacement waits until a pod of app, other than old, runs on another node.
func waitReplacement(t *testing.T, ctx context.Context, old corev1.Pod) {
	t.Helper()
	c := sb.Client()
	sel := "app=" + old.Labels["app"]
	must(t, sandbox.Poll(ctx, 30*time.Second, "a replacement of "+old.Name+" Running on another node than "+reapVictim,
		func(ctx context.Context) (bool, string, error) {
			list, err := c.CoreV1().Pods(old.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return false, err.Error(), nil
			}
			for _, p := range list.Items {
				if p.UID != old.UID && p.Spec.NodeName != "" && p.Spec.NodeName != reapVictim && p.DeletionTimestamp == nil &&
					p.Status.Phase == corev1.PodRunning && (p.Name == old.Name || old.Labels["app"] == "app") {
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("%d pods", len(list.Items)), nil
		}, describeCase(old.Namespace)))
}

// checkNoReplacement fails if a StatefulSet pod that must stay got a replacement.
func checkNoReplacement(t *testing.T, ctx context.Context, old corev1.Pod) {
	t.Helper()
	p, err := sb.Client().CoreV1().Pods(old.Namespace).Get(ctx, old.Name, metav1.GetOptions{})
	if err != nil || p.UID != old.UID {
		t.Errorf("StatefulSet pod %s: want the old pod (uid %s) still there, got %v %v", old.Name, old.UID, err, p.UID)
	}
}

// waitEvent waits until an Event of reason is on the pod (matching its UID) and on
// the victim node (naming the pod), both messages containing every want.
func waitEvent(t *testing.T, ctx context.Context, p corev1.Pod, reason string, want ...string) {
	t.Helper()
	waitPodEvent(t, ctx, sb.Client(), p, reason, want...)
}

// waitPodEvent is waitEvent in the cluster of client c.
func waitPodEvent(t *testing.T, ctx context.Context, c kubernetes.Interface, p corev1.Pod, reason string, want ...string) {
	t.Helper()
	match := func(e corev1.Event) bool {
		if e.Reason != reason {
			return false
		}
		for _, w := range want {
			if !strings.Contains(e.Message, w) {
				return false
			}
		}
		return true
	}
	// What is done to a pod, or why not, is an Event on the pod only; the
	// node's NodeRecovery lists its pods.
	err := sandbox.Poll(ctx, 10*time.Second, fmt.Sprintf("Event %s on pod %s containing %q", reason, p.Name, want),
		func(ctx context.Context) (bool, string, error) {
			pe, err := c.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
				"involvedObject.kind": "Pod", "involvedObject.name": p.Name}.String()})
			if err != nil {
				return false, err.Error(), nil
			}
			for _, e := range pe.Items {
				if e.InvolvedObject.UID == p.UID && match(e) {
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("%d Events on the pod, none matching", len(pe.Items)), nil
		}, func(ctx context.Context) string {
			return sandbox.DescribeEvents(ctx, c, p.Namespace, "Pod", p.Name)
		})
	if err != nil {
		t.Error(err)
	}
}

// nodeEventCount counts the Events of reason on the victim node, last seen at or
// after since, whose message contains every want.
func nodeEventCount(t *testing.T, ctx context.Context, reason string, since time.Time, want ...string) int {
	t.Helper()
	return eventCount(t, ctx, fields.Set{"involvedObject.kind": "Node", "involvedObject.name": reapVictim, "reason": reason}, since, want...)
}

// victimPodEventCount counts the Events of reason on pods, in any namespace,
// that name the victim node as the down one, last seen at or after since, whose
// message contains every want.
func victimPodEventCount(t *testing.T, ctx context.Context, reason string, since time.Time, want ...string) int {
	t.Helper()
	return eventCount(t, ctx, fields.Set{"involvedObject.kind": "Pod", "reason": reason}, since, append(want, "node "+reapVictim+" is ")...)
}

func eventCount(t *testing.T, ctx context.Context, sel fields.Set, since time.Time, want ...string) int {
	t.Helper()
	evs, err := sb.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		t.Fatalf("events %s: %v", sel, err)
	}
	n := 0
next:
	for _, e := range evs.Items {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.Before(since) {
			continue
		}
		for _, w := range want {
			if !strings.Contains(e.Message, w) {
				continue next
			}
		}
		n += max(1, int(e.Count))
	}
	return n
}

// notReapedReason is the reason the reaper gives for leaving a pod of role under
// policy.
func notReapedReason(role, policy string) controller.Reason {
	switch {
	case role == "keep":
		return controller.ReasonOptedOut
	case policy == string(controller.PolicyDoNothing):
		return controller.ReasonPolicyDoNothing
	}
	return controller.ReasonOwnerNotCovered
}

// podsDeletedSample is the /metrics sample of vigil_reaper_pods_deleted_total.
func podsDeletedSample(owner controller.OwnerKind, policy string) string {
	return fmt.Sprintf(`vigil_reaper_pods_deleted_total{owner_kind="%s",policy="%s"}`, owner, policy)
}
