package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
)

// Helpers for the tests that run Vigil's volume stack in a sandbox of their own
// (TestLoop, the benchmarks): the stack puts a CSIDriver and a StorageClass into
// the cluster, which would change what the shared sandbox's tests see.

// stackPayload is the file a test writes through a pod's mount and reads back
// on the replacement's node.
const stackPayload = "marker.txt"

func nodeDir(s *sandbox.Sandbox, node string) string {
	return filepath.Join(s.WorkDir(), "nodes", node)
}

// describeStack is the diagnostics of a failed wait: pods, claims, attachments,
// nodes and the tail of the stack's logs.
func describeStack(s *sandbox.Sandbox) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		c := s.Client()
		out := sandbox.DescribePods(ctx, c, metav1.NamespaceAll, "") + sandbox.DescribePVCs(ctx, c, metav1.NamespaceAll) +
			describeAttachments(ctx, c) + sandbox.DescribeNodes(ctx, c)
		logs, _ := filepath.Glob(filepath.Join(s.WorkDir(), "stack", "*.log"))
		more, _ := filepath.Glob(filepath.Join(s.WorkDir(), "nodes", "*", "*.log"))
		if kcm, _ := filepath.Glob(filepath.Join(s.WorkDir(), "kwok", "clusters", "*", "logs", "kube-controller-manager.log")); len(kcm) > 0 {
			b, _ := os.ReadFile(kcm[0])
			var lines [][]byte
			for _, l := range bytes.Split(b, []byte("\n")) {
				if bytes.Contains(l, []byte("ttach")) || bytes.Contains(l, []byte("olume")) {
					lines = append(lines, l)
				}
			}
			out += fmt.Sprintf("\n--- %s (attach/volume lines)\n%s", kcm[0], lastN(string(bytes.Join(lines, []byte("\n"))), 15))
		}
		for _, l := range append(logs, more...) {
			b, _ := os.ReadFile(l)
			out += fmt.Sprintf("\n--- %s\n%s", l, lastN(string(b), 8))
		}
		return out
	}
}

func describeAttachments(ctx context.Context, c kubernetes.Interface) string {
	vas, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "VolumeAttachments: " + err.Error() + "\n"
	}
	out := "VolumeAttachments:\n"
	for _, va := range vas.Items {
		out += fmt.Sprintf("  %s node=%s pv=%v attached=%v meta=%v deleting=%v err=%v\n", va.Name, va.Spec.NodeName,
			deref(va.Spec.Source.PersistentVolumeName), va.Status.Attached, va.Status.AttachmentMetadata,
			va.DeletionTimestamp != nil, va.Status.AttachError)
	}
	return out
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// waitAttached waits for the VolumeAttachment of pv on node to be attached and
// returns the epoch of its grant (the attachment metadata).
func waitAttached(t *testing.T, ctx context.Context, s *sandbox.Sandbox, pv, node string) uint64 {
	t.Helper()
	var epoch uint64
	must(t, sandbox.Poll(ctx, 60*time.Second, fmt.Sprintf("VolumeAttachment of %s on %s attached", pv, node), func(ctx context.Context) (bool, string, error) {
		vas, err := s.Client().StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, va := range vas.Items {
			if va.Spec.NodeName != node || deref(va.Spec.Source.PersistentVolumeName) != pv || !va.Status.Attached {
				continue
			}
			e, err := strconv.ParseUint(va.Status.AttachmentMetadata[vigil.PublishContextEpochKey], 10, 64)
			if err != nil {
				return false, "", fmt.Errorf("VolumeAttachment %s: metadata %v has no epoch under %s", va.Name, va.Status.AttachmentMetadata, vigil.PublishContextEpochKey)
			}
			epoch = e
			return true, "", nil
		}
		return false, fmt.Sprintf("%d VolumeAttachments", len(vas.Items)), nil
	}, describeStack(s)))
	return epoch
}

// waitPublished waits until the kubelet (stand-in) of node has the pod's
// volume published (its target path is a mount point) and returns the target
// path.
func waitPublished(t *testing.T, ctx context.Context, s *sandbox.Sandbox, node string, pod corev1.Pod, pv string) string {
	t.Helper()
	target := s.PodVolumeDir(node, pod.UID, pv)
	must(t, sandbox.Poll(ctx, 60*time.Second, "volume published at "+target, func(ctx context.Context) (bool, string, error) {
		for _, m := range mountsUnder(t, nodeDir(s, node)) {
			if m == target {
				return true, "", nil
			}
		}
		return false, "", nil
	}, describeStack(s)))
	return target
}

// writePayload writes a random marker file through the mount and fsyncs it, so
// that it is in the datapath before the power cut.
func writePayload(t *testing.T, target string) []byte {
	t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	payload := []byte("written on node-1 before the power cut: " + hex.EncodeToString(b) + "\n")
	f, err := os.Create(filepath.Join(target, stackPayload))
	must(t, err)
	if _, err := f.Write(payload); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync through the mount: %v", err)
	}
	must(t, f.Close())
	d, err := os.Open(target)
	must(t, err)
	must(t, d.Sync())
	must(t, d.Close())
	return payload
}

// mountsUnder lists the mount points under dir (/proc/self/mountinfo).
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	var out []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) > 4 && bytes.HasPrefix(f[4], []byte(dir+"/")) {
			out = append(out, string(f[4]))
		}
	}
	return out
}

// loopsUnder lists the loop devices whose backing file is under dir.
func loopsUnder(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte(dir+"/")) {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f)))+"="+string(bytes.TrimSpace(b)))
		}
	}
	return out
}

func lastN(s string, n int) string {
	lines := bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// waitVolumesAttached waits until node's status.volumesAttached lists the volume.
func waitVolumesAttached(t *testing.T, ctx context.Context, s *sandbox.Sandbox, node, handle string) {
	t.Helper()
	want := corev1.UniqueVolumeName("kubernetes.io/csi/" + vigil.DriverName + "^" + handle)
	must(t, sandbox.Poll(ctx, 30*time.Second, fmt.Sprintf("%s in %s's volumesAttached", want, node), func(ctx context.Context) (bool, string, error) {
		n, err := s.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, v := range n.Status.VolumesAttached {
			if v.Name == want {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%v", n.Status.VolumesAttached), nil
	}, describeStack(s)))
}
