package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
)

// reapVictim is the node the reaper cases power off (the baseline uses node-1,
// the partition test node-3).
const reapVictim = "node-2"

// The claims of one reaper case: the StatefulSet "web" (2, spread), the
// Deployment "app", a DaemonSet, a Job, a bare pod and the opted-out StatefulSet
// "keep", each on its own static driver.vigil.io volume.
var reapClaims = []string{"data-web-0", "data-web-1", "app-data", "ds-data", "job-data", "bare-data", "data-keep-0"}

// casePods are the pods of a case on the victim node, by role.
type casePods struct {
	web, app, ds, job, bare, keep corev1.Pod
	// attachments maps each pod's name to its VolumeAttachments on the victim.
	attachments map[string][]string
	// deadlines maps each evicted pod's role to its deletionTimestamp.
	deadlines map[string]time.Time
}

// all lists the victim's pods with their role.
func (cp *casePods) all() map[string]corev1.Pod {
	return map[string]corev1.Pod{"web": cp.web, "app": cp.app, "ds": cp.ds, "job": cp.job, "bare": cp.bare, "keep": cp.keep}
}

// prepareVolumes creates the namespace and its static volumes; binding takes
// ~10 s, so every case prepares them at once, before the first power cut.
func prepareVolumes(ctx context.Context, ns string) error {
	c := sb.Client()
	if err := sandbox.EnsureNamespace(ctx, c, ns); err != nil {
		return err
	}
	for _, cl := range reapClaims {
		if err := sandbox.CreateStaticVolume(ctx, c, ns, cl, "1Gi"); err != nil {
			return err
		}
	}
	return nil
}

// deployCase creates the case's workloads, one pod of each on the victim, and
// waits until they run and the victim's VolumeAttachments exist.
func deployCase(t *testing.T, ctx context.Context, ns string) *casePods {
	t.Helper()
	c := sb.Client()
	must(t, sandbox.WaitPVCsBound(ctx, c, ns, reapClaims, 60*time.Second))
	grace := int64(podGraceSeconds)
	w := func(name string, claims ...string) sandbox.Workload {
		return sandbox.Workload{Namespace: ns, Name: name, Claims: claims, TerminationGracePeriodSeconds: &grace}
	}
	web := w("web")
	web.Prefer, web.Spread, web.StorageClass = []string{reapVictim}, true, sandbox.StaticClaimClass
	app := w("app", "app-data")
	app.Prefer = []string{reapVictim}
	keep := w("keep")
	keep.Prefer, keep.StorageClass = []string{reapVictim}, sandbox.StaticClaimClass
	pinned := func(wl sandbox.Workload) sandbox.Workload { wl.Nodes = []string{reapVictim}; return wl }
	keepSet := keep.StatefulSet(1)
	keepSet.Spec.Template.Annotations = map[string]string{vigil.ReapAnnotation: "false"}
	apps := c.AppsV1()
	_, err := apps.StatefulSets(ns).Create(ctx, web.StatefulSet(2), metav1.CreateOptions{})
	must(t, err)
	_, err = apps.StatefulSets(ns).Create(ctx, keepSet, metav1.CreateOptions{})
	must(t, err)
	_, err = apps.Deployments(ns).Create(ctx, app.Deployment(1), metav1.CreateOptions{})
	must(t, err)
	_, err = apps.DaemonSets(ns).Create(ctx, pinned(w("ds", "ds-data")).DaemonSet(), metav1.CreateOptions{})
	must(t, err)
	// kwok completes a Job's pod at once, and the API deletes a completed pod
	// without grace when it is evicted: a finalizer keeps it, Terminating past its
	// deadline, in front of the reaper (which must leave it alone).
	job := pinned(w("job", "job-data")).Job()
	job.Spec.Template.Finalizers = []string{holdFinalizer}
	_, err = c.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	must(t, err)
	_, err = c.CoreV1().Pods(ns).Create(ctx, pinned(w("bare", "bare-data")).Pod(), metav1.CreateOptions{})
	must(t, err)

	cp := &casePods{attachments: map[string][]string{}}
	cp.job = waitScheduled(t, ctx, ns, "app=job")
	for sel, dst := range map[string]*corev1.Pod{"app=app": &cp.app, "app=ds": &cp.ds,
		"app=bare": &cp.bare, "app=keep": &cp.keep} {
		pods, err := sandbox.WaitPodsRunning(ctx, c, ns, sel, 1, 60*time.Second)
		must(t, err)
		*dst = pods[0]
	}
	webPods, err := sandbox.WaitPodsRunning(ctx, c, ns, "app=web", 2, 60*time.Second)
	must(t, err)
	for _, p := range webPods {
		if p.Spec.NodeName == reapVictim {
			cp.web = p
		}
	}
	for role, p := range cp.all() {
		if p.Spec.NodeName != reapVictim {
			t.Fatalf("%s pod %q is on %q, want one on %s:\n%s", role, p.Name, p.Spec.NodeName, reapVictim,
				sandbox.DescribePods(ctx, c, ns, ""))
		}
	}
	waitVictimAttachments(t, ctx, ns, cp)
	return cp
}

// holdFinalizer keeps the case's Job pod in the API until the namespace goes.
const holdFinalizer = "e2e.vigil.io/hold"

// waitScheduled waits until one pod of selector is scheduled (any phase: kwok
// runs a Job's pod to completion at once) and returns it.
func waitScheduled(t *testing.T, ctx context.Context, ns, selector string) corev1.Pod {
	t.Helper()
	c := sb.Client()
	var pod corev1.Pod
	must(t, sandbox.Poll(ctx, 60*time.Second, "a scheduled pod "+selector+" in "+ns, func(ctx context.Context) (bool, string, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(list.Items) == 0 || list.Items[0].Spec.NodeName == "" {
			return false, fmt.Sprintf("%v", err), nil
		}
		pod = list.Items[0]
		return true, "", nil
	}, func(ctx context.Context) string { return sandbox.DescribePods(ctx, c, ns, selector) }))
	return pod
}

// podPVs lists the PV names of a pod's claims (static: "pv-<ns>-<claim>").
func podPVs(p corev1.Pod) []string {
	var pvs []string
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			pvs = append(pvs, "pv-"+p.Namespace+"-"+v.PersistentVolumeClaim.ClaimName)
		}
	}
	return pvs
}

// waitVictimAttachments waits until the attach-detach controller has created a
// VolumeAttachment on the victim for every volume of every victim pod.
func waitVictimAttachments(t *testing.T, ctx context.Context, ns string, cp *casePods) {
	t.Helper()
	c := sb.Client()
	must(t, sandbox.Poll(ctx, 30*time.Second, "VolumeAttachments on "+reapVictim+" for every pod of "+ns,
		func(ctx context.Context) (bool, string, error) {
			vas, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			byPV := map[string]string{}
			for _, va := range vas.Items {
				if va.Spec.NodeName == reapVictim && va.Spec.Source.PersistentVolumeName != nil && va.DeletionTimestamp == nil {
					byPV[*va.Spec.Source.PersistentVolumeName] = va.Name
				}
			}
			var missing []string
			for role, p := range cp.all() {
				if role == "job" {
					continue // completed at once by kwok: attached or not, detached soon
				}
				var names []string
				for _, pv := range podPVs(p) {
					if n, ok := byPV[pv]; ok {
						names = append(names, n)
					} else {
						missing = append(missing, pv)
					}
				}
				cp.attachments[p.Name] = names
			}
			return len(missing) == 0, "missing " + strings.Join(missing, ", "), nil
		}, func(ctx context.Context) string { return sandbox.DescribePVCs(ctx, c, ns) }))
}

// powerCut stops the victim and restarts it at the end of the test.
func powerCut(t *testing.T, rec *recorder) time.Time {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		if err := sb.Start(reapVictim); err != nil {
			t.Errorf("power on %s: %v", reapVictim, err)
		}
		if err := sb.WaitNodeReady(ctx, 30*time.Second, corev1.ConditionTrue, reapVictim); err != nil {
			t.Errorf("%s after power on: %v", reapVictim, err)
		}
	})
	at := time.Now()
	rec.start(t, at)
	if err := sb.Stop(reapVictim); err != nil {
		t.Fatalf("power off %s: %v", reapVictim, err)
	}
	rec.mark("power cut of " + reapVictim)
	return at
}

// cleanupNamespace deletes the namespace and the case's PVs, and waits (30 s at
// most) until its pods are gone, so the next case's power cut meets none of them.
func cleanupNamespace(t *testing.T, ctx context.Context, ns string) {
	c := sb.Client()
	defer func() {
		err := sandbox.Poll(ctx, 30*time.Second, "the pods of "+ns+" gone", func(ctx context.Context) (bool, string, error) {
			pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items)), nil
		}, func(ctx context.Context) string { return sandbox.DescribePods(ctx, c, ns, "") })
		if err != nil {
			t.Log(err)
		}
	}()
	if pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=job"}); err == nil {
		for _, p := range pods.Items {
			_, _ = c.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
	}
	_ = c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	for _, cl := range reapClaims {
		_ = c.CoreV1().PersistentVolumes().Delete(ctx, "pv-"+ns+"-"+cl, metav1.DeleteOptions{})
	}
}

// waitEvicted waits until the victim's pods that the taint manager evicts (all
// but the DaemonSet's, which tolerates the taint) are Terminating, and returns
// the latest deletion deadline (deletionTimestamp: eviction + grace); each pod's
// own goes to cp.deadlines.
func waitEvicted(t *testing.T, ctx context.Context, ns string, cp *casePods) time.Time {
	t.Helper()
	c := sb.Client()
	var deadline time.Time
	cp.deadlines = map[string]time.Time{}
	must(t, sandbox.Poll(ctx, 3*(nodeMonitorGrace+tolerationSeconds*time.Second), "every pod on "+reapVictim+" but the DaemonSet's Terminating",
		func(ctx context.Context) (bool, string, error) {
			var waiting []string
			for role, want := range cp.all() {
				if role == "ds" || role == "job" {
					continue // the DaemonSet's tolerates the taint; the Job's is completed
				}
				p, err := c.CoreV1().Pods(ns).Get(ctx, want.Name, metav1.GetOptions{})
				if err != nil || p.UID != want.UID {
					return false, "", fmt.Errorf("pod %s (%s) gone before its eviction was seen: %v", want.Name, role, err)
				}
				if p.DeletionTimestamp == nil {
					waiting = append(waiting, p.Name)
					continue
				}
				cp.deadlines[role] = p.DeletionTimestamp.Time
				if p.DeletionTimestamp.After(deadline) {
					deadline = p.DeletionTimestamp.Time
				}
			}
			return len(waiting) == 0, "not Terminating yet: " + strings.Join(waiting, ", "), nil
		}, func(ctx context.Context) string { return sandbox.DescribePods(ctx, c, ns, "") }))
	return deadline
}
