//go:build bench

package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
)

// The recovery benchmark's nodes (BENCH_KUBELET) and the steps of each
// recovery it times, so that the table shows where the time goes: on real
// nodes the new node's kubelet stages a volume only once its own node-status
// sync (nodeStatusUpdateFrequency, 10 s by default) has reported the volume
// in status.volumesInUse.

// Steps of a recovery, timed from the power cut, in the order they happen.
const (
	stepScheduled = "replacement scheduled"
	stepAttached  = "VolumeAttachment attached on the new node"
	stepInUse     = "volume in the new node's status.volumesInUse"
	stepPublished = "volume published (target path mounted)"
	stepRunning   = "replacement Running"
	stepReadable  = "data readable on the new node"
)

var benchSteps = []string{stepScheduled, stepAttached, stepInUse, stepPublished, stepRunning, stepReadable}

// benchKubelet sets cfg's nodes from BENCH_KUBELET: kwok (the default) or
// real, whose kubelets take BENCH_NODE_STATUS_UPDATE (a duration) as their
// nodeStatusUpdateFrequency when set. It returns the image of the
// workload's pods: "" (kwok's default) or the imported pause image.
func benchKubelet(t *testing.T, cfg *sandbox.Config) string {
	t.Helper()
	freq := os.Getenv("BENCH_NODE_STATUS_UPDATE")
	switch k := os.Getenv("BENCH_KUBELET"); k {
	case "", sandbox.KubeletKwok:
		if freq != "" {
			t.Fatalf("BENCH_NODE_STATUS_UPDATE=%q is for real kubelets: give BENCH_KUBELET=%s too", freq, sandbox.KubeletReal)
		}
		return ""
	case sandbox.KubeletReal:
		requireRealNodes(t)
		if freq != "" {
			d, err := time.ParseDuration(freq)
			if err != nil || d <= 0 {
				t.Fatalf("BENCH_NODE_STATUS_UPDATE=%q: want a positive duration, e.g. 2s (the kubelet's default is 10s)", freq)
			}
			cfg.NodeStatusUpdateFrequency = d
		}
		files, pause := realNodeImages(t, images.Pause)
		cfg.Kubelet, cfg.NodeImages, cfg.PauseImage, cfg.PodSubnet = sandbox.KubeletReal, files, pause, "10.218.0.0/16"
		return pause
	default:
		t.Fatalf("BENCH_KUBELET=%q: want %s (the default) or %s", k, sandbox.KubeletKwok, sandbox.KubeletReal)
		return ""
	}
}

// benchNodesKind names the benchmark's nodes for its report.
func benchNodesKind() string {
	if os.Getenv("BENCH_KUBELET") != sandbox.KubeletReal {
		return "kwok nodes"
	}
	freq := os.Getenv("BENCH_NODE_STATUS_UPDATE")
	if freq == "" {
		freq = "10s (default)"
	}
	return "real nodes (sandbox), kubelet nodeStatusUpdateFrequency " + freq
}

// markStep records step at now unless it was seen before.
func markStep(steps map[string]float64, step string, start time.Time) {
	if _, ok := steps[step]; !ok {
		steps[step] = time.Since(start).Seconds()
	}
}

// markSteps records the steps the replacement np has reached.
func (b *benchEnv) markSteps(t *testing.T, ctx context.Context, steps map[string]float64, np benchPod, start time.Time) {
	markStep(steps, stepScheduled, start)
	c, node := b.s.Client(), np.pod.Spec.NodeName
	if _, ok := steps[stepAttached]; !ok {
		if vas, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err == nil {
			for _, va := range vas.Items {
				if va.Spec.NodeName == node && deref(va.Spec.Source.PersistentVolumeName) == np.pv && va.Status.Attached {
					markStep(steps, stepAttached, start)
				}
			}
		}
	}
	if _, ok := steps[stepInUse]; !ok {
		pv, err1 := c.CoreV1().PersistentVolumes().Get(ctx, np.pv, metav1.GetOptions{})
		n, err2 := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err1 == nil && err2 == nil && pv.Spec.CSI != nil {
			want := corev1.UniqueVolumeName("kubernetes.io/csi/" + vigil.DriverName + "^" + pv.Spec.CSI.VolumeHandle)
			for _, v := range n.Status.VolumesInUse {
				if v == want {
					markStep(steps, stepInUse, start)
				}
			}
		}
	}
	if _, ok := steps[stepPublished]; !ok && isMountPoint(t, np.target) {
		markStep(steps, stepPublished, start)
	}
	if np.pod.Status.Phase == corev1.PodRunning {
		markStep(steps, stepRunning, start)
	}
}

// stepReport adds, per mode, the median and p90 of each step to sb.
func stepReport(sb *strings.Builder, modes map[string][]benchResult, order []string) {
	for _, m := range order {
		fmt.Fprintf(sb, "\nSteps of the %s recoveries, first seen (s after the power cut; polled every 0.1 s)\n", m)
		sb.WriteString("| step | pods | median (s) | p90 (s) |\n| --- | ---: | ---: | ---: |\n")
		for _, step := range benchSteps {
			var secs []float64
			for _, r := range modes[m] {
				if v, ok := r.Steps[step]; ok && r.Recovered {
					secs = append(secs, v)
				}
			}
			if len(secs) == 0 {
				continue
			}
			sort.Float64s(secs)
			fmt.Fprintf(sb, "| %s | %d | %.2f | %.2f |\n", step, len(secs), quantile(secs, 0.5), quantile(secs, 0.9))
		}
	}
}
