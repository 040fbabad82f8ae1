package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	vigil "github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// upgradeTag is the tag of the vigil image the upgrade rolls to: the same
// binaries as "dev" under another name, which is all a rolling update sees.
const upgradeTag = "upgrade"

// installedUpgrade is the upgrade procedure of docs/operations.md run while
// pod's writer (a container on its Vigil volume) writes: the engine
// DaemonSet, then the manager Deployment, are rolled to the vigil image
// tagged upgradeTag, one pod at a time. Each engine stops gracefully (its
// stop announced at the datapath, the node's fd keeper holding the FUSE
// connections) and its successor adopts the node's volumes: the writer sees
// a pause, no error (its ledger gapless); nothing fails over (no
// NodeRecovery, the pod the same, its grant live at the same epoch); every
// record it acknowledged is on its volume afterwards.
func installedUpgrade(t *testing.T, ctx context.Context, s *sandbox.Sandbox, ledgerDir string, pod corev1.Pod, pv, handle string, epoch uint64,
	grants func() map[string]uint64) {
	t.Helper()
	c := s.Client()
	ref, err := images.Ref(images.Vigil, upgradeTag, nil)
	must(t, err)
	ledgerFile := filepath.Join(ledgerDir, string(pod.UID)+".log")
	start := time.Now()
	rollImage(t, ctx, c, "DaemonSet", "vigil-engine-node", ref)
	engines := time.Since(start)
	rollImage(t, ctx, c, "Deployment", "vigil-manager", ref)
	rolled := time.Since(start)
	time.Sleep(2 * time.Second) // the writer goes on after the last pod is ready

	p, err := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	must(t, err)
	if p.UID != pod.UID || p.DeletionTimestamp != nil {
		t.Errorf("after the upgrade the writer pod is %s (deleting %v), want the same %s", p.UID, p.DeletionTimestamp, pod.UID)
	}
	rc, err := v1alpha1.NewForConfig(s.RESTConfig())
	must(t, err)
	recs, err := rc.List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, r := range recs.Items {
		if r.Status.DetectedAt != nil && r.Status.DetectedAt.After(start) {
			t.Errorf("the upgrade caused a failover: NodeRecovery %s of %s (reason %s)", r.Name, r.Spec.NodeName, r.Status.Reason)
		}
	}
	if e, ok := grants()[pod.Spec.NodeName]; !ok || e != epoch {
		t.Errorf("after the upgrade %s's live grant of %s is at epoch %d (live %t), want %d", pod.Spec.NodeName, handle, e, ok, epoch)
	}
	audit, err := ledger.CheckFile(ledgerFile, start, time.Now())
	must(t, err)
	if !audit.Gapless() {
		t.Errorf("the writer on %s saw an error (a record not acknowledged): %s", pod.Spec.NodeName, audit)
	}
	if audit.Observed == 0 {
		t.Errorf("the writer acknowledged nothing during the upgrade: %s", audit)
	}
	found, err := ledger.ReadRecords(filepath.Join(s.PodVolumeDir(pod.Spec.NodeName, pod.UID, pv), ledger.RecordsFile(string(pod.UID))))
	must(t, err)
	res := ledger.Verify(ledger.Pod{UID: string(pod.UID), Node: pod.Spec.NodeName, Acks: audit.Acks, Found: found})
	if !res.OK() {
		t.Errorf("after the upgrade the writer's records: %s", res)
	}
	t.Logf("the writer on %s since the upgrade began: %s", pod.Spec.NodeName, audit)
	t.Logf("figures: upgrade to %s: engines rolled on 3 nodes in %.1fs, both managers %.1fs after the start; the writer on %s: %d records acknowledged meanwhile, its longest stall %.2fs; %s",
		ref, engines.Seconds(), rolled.Seconds(), pod.Spec.NodeName, audit.Observed, audit.Stall.Seconds(), res)
}

// rollImage sets the image of every container of the workload (kind
// DaemonSet or Deployment, in vigil-system) that runs the vigil image to ref,
// as `kubectl set image` does, and waits until the rollout is done: every
// pod updated and available.
func rollImage(t *testing.T, ctx context.Context, c kubernetes.Interface, kind, name, ref string) {
	t.Helper()
	t0 := time.Now()
	// The controllers write the object's status meanwhile: a Conflict is
	// read again and retried, as `kubectl set image` does.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		switch kind {
		case "DaemonSet":
			ds, err := c.AppsV1().DaemonSets(vigil.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			setVigilImage(t, &ds.Spec.Template.Spec, ref)
			_, err = c.AppsV1().DaemonSets(vigil.Namespace).Update(ctx, ds, metav1.UpdateOptions{})
			return err
		default:
			d, err := c.AppsV1().Deployments(vigil.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			setVigilImage(t, &d.Spec.Template.Spec, ref)
			_, err = c.AppsV1().Deployments(vigil.Namespace).Update(ctx, d, metav1.UpdateOptions{})
			return err
		}
	}))
	must(t, sandbox.Poll(ctx, 3*time.Minute, kind+" "+name+" rolled to "+ref, func(ctx context.Context) (bool, string, error) {
		switch kind {
		case "DaemonSet":
			ds, err := c.AppsV1().DaemonSets(vigil.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			st := ds.Status
			return st.ObservedGeneration >= ds.Generation && st.UpdatedNumberScheduled == st.DesiredNumberScheduled && st.NumberAvailable == st.DesiredNumberScheduled,
				fmt.Sprintf("%d/%d updated, %d available", st.UpdatedNumberScheduled, st.DesiredNumberScheduled, st.NumberAvailable), nil
		default:
			d, err := c.AppsV1().Deployments(vigil.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error(), nil
			}
			st, want := d.Status, *d.Spec.Replicas
			return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == want && st.AvailableReplicas == want && st.Replicas == want,
				fmt.Sprintf("%d/%d updated, %d available, %d in all", st.UpdatedReplicas, want, st.AvailableReplicas, st.Replicas), nil
		}
	}, func(ctx context.Context) string {
		return sandbox.DescribePods(ctx, c, vigil.Namespace, "")
	}))
	t.Logf("%s %s rolled to %s in %.1fs", kind, name, ref, time.Since(t0).Seconds())
}

// setVigilImage points every container of spec that runs a vigil image at
// ref; a spec without one fails the test.
func setVigilImage(t *testing.T, spec *corev1.PodSpec, ref string) {
	t.Helper()
	dev, err := images.Ref(images.Vigil, "dev", nil)
	must(t, err)
	n := 0
	for i := range spec.Containers {
		if spec.Containers[i].Image == dev {
			spec.Containers[i].Image = ref
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no container runs %s: %+v", dev, spec.Containers)
	}
}
