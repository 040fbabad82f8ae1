package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
)

// The stack test runs a sandbox of its own: the volume stack puts a CSIDriver
// and a StorageClass into the cluster, which would change what the shared
// sandbox's tests see.
const (
	stackName    = "e2e-stack"
	stackSubnet  = "10.213.160.0/24"
	stackNodeA   = "node-1"
	stackNodeB   = "node-2"
	stackNS      = "stack"
	stackClaim   = "data"
	stackApp     = "db"
	stackPayload = "marker.txt"
)

// Events of the stack timelines.
const (
	evFenced        = "datapath fence of node-1 and taint vigil.io/fenced applied"
	evReaped        = "volume dropped from node-1's volumesInUse, old pod force-deleted, its VolumeAttachment deleted"
	evReplScheduled = "replacement scheduled on node-2"
	evReplAttached  = "replacement's VolumeAttachment attached (higher epoch)"
	evReplRunning   = "replacement Running"
	evReplStaged    = "replacement's volume staged and published on node-2"
	evDataRead      = "data written before the power cut read on node-2"
	evANotReady     = "node-1 Ready=Unknown (Kubernetes sees it dead)"
	evBooted        = "node-1 started (new boot id)"
	evAReady        = "node-1 Ready"
	evUntainted     = "taint vigil.io/fenced removed by node-1's engine"
	evAClean        = "nothing mounted on node-1, no loop device of node-1"
)

// TestStack_PowerCutFenceCleanup is issue 6's sandbox acceptance, end to end
// through the real components: a dynamically provisioned claim of the vigil
// StorageClass (csi-provisioner → Vigil's CSI controller → datapath), a pod on
// node A whose VolumeAttachment csi-attacher attaches (a grant; its epoch in
// the attachment metadata), staged and published by node A's engine through
// the kubelet stand-in, data written through the mount. Then node A loses power;
// the test fences it (datapath and taint) and does what the reaper will do
// (delete the VolumeAttachment, force-delete the pod); the replacement lands on
// node B with a higher epoch and finds the data. Node A starts again: its engine
// cleans up what the old pod left and removes the taint.
func TestStack_PowerCutFenceCleanup(t *testing.T) {
	ctx := context.Background()
	s, stk := upStack(t)
	c := s.Client()
	must(t, sandbox.EnsureNamespace(ctx, c, stackNS))
	must(t, sandbox.CreateClaim(ctx, c, stackNS, stackClaim, stk.StorageClass, "256Mi"))
	t0 := time.Now()
	must(t, sandbox.WaitPVCsBound(ctx, c, stackNS, []string{stackClaim}, 60*time.Second))
	pvc, err := c.CoreV1().PersistentVolumeClaims(stackNS).Get(ctx, stackClaim, metav1.GetOptions{})
	must(t, err)
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	must(t, err)
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != vigil.DriverName {
		t.Fatalf("PV %s has CSI source %+v, want driver %s", pv.Name, pv.Spec.CSI, vigil.DriverName)
	}
	volID := pv.Spec.CSI.VolumeHandle
	t.Logf("claim %s bound to %s (datapath volume %s), provisioned in %.1fs", stackClaim, pv.Name, volID, time.Since(t0).Seconds())
	checkStackIdentities(t, ctx, s, stk, volID)

	grace := int64(podGraceSeconds)
	w := sandbox.Workload{Namespace: stackNS, Name: stackApp, Prefer: []string{stackNodeA}, Claims: []string{stackClaim},
		TerminationGracePeriodSeconds: &grace}
	t1 := time.Now()
	_, err = c.AppsV1().StatefulSets(stackNS).Create(ctx, w.StatefulSet(1), metav1.CreateOptions{})
	must(t, err)
	podA := waitStackPod(t, ctx, s, "", stackNodeA)
	epochA := waitAttached(t, ctx, s, pv.Name, stackNodeA)
	targetA := waitPublished(t, ctx, s, stackNodeA, podA, pv.Name)
	t.Logf("pod %s on %s: attached with epoch %d, published at %s, %.1fs after creation",
		podA.Name, stackNodeA, epochA, targetA, time.Since(t1).Seconds())
	payload := writePayload(t, targetA)
	// A node that has run its pod for a while: the attach-detach controller has
	// recorded the attachment (node status volumesAttached). Before that its
	// attach operation is still pending and blocks any detach of the volume.
	waitVolumesAttached(t, ctx, s, stackNodeA, volID)

	// Power cut of node A, then the fence and the reap the manager will do.
	start := time.Now()
	must(t, s.Stop(stackNodeA))
	tl := newTimeline(start)
	tl.mark("power cut of node-1 (kwok, engine, kubelet stand-in SIGKILLed)", time.Now())
	fenceEpoch := fenceNode(t, ctx, s, stk, volID, stackNodeA)
	tl.mark(evFenced, time.Now())
	reap(t, ctx, c, podA, pv.Name, volID, stackNodeA)
	tl.mark(evReaped, time.Now())

	podB := waitStackPod(t, ctx, s, string(podA.UID), stackNodeB)
	tl.mark(evReplScheduled, time.Now())
	epochB := waitAttached(t, ctx, s, pv.Name, stackNodeB)
	tl.mark(evReplAttached, time.Now())
	podB = waitStackPodRunning(t, ctx, c, podB)
	tl.mark(evReplRunning, time.Now())
	targetB := waitPublished(t, ctx, s, stackNodeB, podB, pv.Name)
	tl.mark(evReplStaged, time.Now())
	got, err := os.ReadFile(filepath.Join(targetB, stackPayload))
	if err != nil || !bytes.Equal(got, payload) {
		t.Errorf("on %s, %s holds %q (err %v), want %q written on %s before the power cut",
			stackNodeB, stackPayload, got, err, payload, stackNodeA)
	} else {
		tl.mark(evDataRead, time.Now())
	}
	if epochB <= epochA || epochB <= fenceEpoch {
		t.Errorf("epoch on %s = %d, want above %s's %d and the fence's %d", stackNodeB, epochB, stackNodeA, epochA, fenceEpoch)
	}

	// Kubernetes sees node A dead before it comes back.
	must(t, s.WaitNodeReady(ctx, 60*time.Second, corev1.ConditionUnknown, stackNodeA))
	tl.mark(evANotReady, time.Now())
	t.Log(tl.table(fmt.Sprintf("Power cut of %s → replacement on %s (fence and reap done by the test)", stackNodeA, stackNodeB)))

	// Node A boots again: its engine must clean up and remove the taint.
	boot := time.Now()
	must(t, s.Start(stackNodeA))
	tb := newTimeline(boot)
	tb.mark(evBooted, time.Now())
	waitNodeACleaned(t, ctx, s, tb, targetA)
	checkGrants(t, ctx, stk, volID, epochB)
	t.Logf("%s's engine after the start:\n%s", stackNodeA, engineLogSince(t, s, stackNodeA, boot))
	t.Log(tb.table(fmt.Sprintf("Start of %s → engine cleanup (taint set %.1fs before the start)",
		stackNodeA, boot.Sub(start).Seconds()-tl.at[evFenced].Seconds())))
	t.Logf("figures: epoch %s %d, fence %d, %s %d; replacement staged %.1fs after the power cut; taint removed %.1fs after %s started",
		stackNodeA, epochA, fenceEpoch, stackNodeB, epochB, tl.at[evReplStaged].Seconds(), tb.at[evUntainted].Seconds(), stackNodeA)
}

// upStack brings up the test's own 2-node sandbox with the Vigil stack; the
// cleanup, registered first so that it runs after the sandbox's Down, checks
// that nothing stays mounted or attached to a loop device.
func upStack(t *testing.T) (*sandbox.Sandbox, *sandbox.Stack) {
	t.Helper()
	workDir := filepath.Join(os.TempDir(), "vigil-e2e-stack")
	must(t, sandbox.DownWorkDir(workDir)) // a crashed run's leftovers
	t.Cleanup(func() {
		if os.Getenv("VIGIL_E2E_KEEP") != "" && t.Failed() {
			return
		}
		if mps := mountsUnder(t, workDir); len(mps) > 0 {
			t.Errorf("after sandbox down, still mounted under %s: %v", workDir, mps)
		}
		if loops := loopsUnder(t, workDir); len(loops) > 0 {
			t.Errorf("after sandbox down, loop devices backed under %s: %v", workDir, loops)
		}
	})
	cfg := sandbox.Config{Name: stackName, WorkDir: workDir, Nodes: 2, NodeMonitorGracePeriod: nodeMonitorGrace,
		DefaultTolerationSeconds: tolerationSeconds, Subnet: stackSubnet}
	cfg.Logf = t.Logf
	t.Cleanup(func() {
		if os.Getenv("VIGIL_E2E_KEEP") != "" && t.Failed() {
			t.Logf("VIGIL_E2E_KEEP: sandbox left in %s for inspection; bin/vigil-sandbox --workdir %s down removes it", workDir, workDir)
			return
		}
		if err := sandbox.DownWorkDir(workDir); err != nil {
			t.Errorf("sandbox down: %v", err)
		}
	})
	upCtx, upCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer upCancel()
	s, err := sandbox.Up(upCtx, cfg)
	if err != nil {
		t.Fatalf("sandbox up: %v", err)
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin"))
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	stk, err := s.StartStack(ctx, sandbox.StackConfig{VigilBinDir: bin})
	if err != nil {
		t.Fatalf("start stack (binaries of `make build` in %s): %v", bin, err)
	}
	t.Logf("stack up in %.1fs: datapath %s, CSI controller %s", time.Since(t0).Seconds(), stk.DatapathAddr, stk.ControllerEndpoint)
	return s, stk
}

func nodeDir(s *sandbox.Sandbox, node string) string {
	return filepath.Join(s.WorkDir(), "nodes", node)
}

// describeStack is the diagnostics of a failed wait: pods, claims, attachments,
// nodes and the tail of the stack's logs.
func describeStack(s *sandbox.Sandbox) func(ctx context.Context) string {
	return func(ctx context.Context) string {
		c := s.Client()
		out := sandbox.DescribePods(ctx, c, stackNS, "") + sandbox.DescribePVCs(ctx, c, stackNS) +
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

// waitStackPod waits for the app's pod, other than the one of UID notUID, to be
// scheduled on node.
func waitStackPod(t *testing.T, ctx context.Context, s *sandbox.Sandbox, notUID, node string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	must(t, sandbox.Poll(ctx, 60*time.Second, fmt.Sprintf("pod of %s on %s", stackApp, node), func(ctx context.Context) (bool, string, error) {
		pods, err := s.Client().CoreV1().Pods(stackNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + stackApp})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range pods.Items {
			if string(p.UID) != notUID && p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
				if p.Spec.NodeName != node {
					return false, "", fmt.Errorf("pod %s scheduled on %s, want %s", p.Name, p.Spec.NodeName, node)
				}
				pod = p
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d pods", len(pods.Items)), nil
	}, describeStack(s)))
	return pod
}

func waitStackPodRunning(t *testing.T, ctx context.Context, c kubernetes.Interface, pod corev1.Pod) corev1.Pod {
	t.Helper()
	must(t, sandbox.Poll(ctx, 30*time.Second, "pod "+pod.Name+" Running", func(ctx context.Context) (bool, string, error) {
		p, err := c.CoreV1().Pods(stackNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		if p.UID != pod.UID {
			return false, "", fmt.Errorf("pod %s was replaced (UID %s, want %s)", pod.Name, p.UID, pod.UID)
		}
		pod = *p
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase), nil
	}, nil))
	return pod
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

// waitPublished waits until the kubelet stand-in of node has the pod's volume
// published (its target path is a mount point) and returns the target path.
func waitPublished(t *testing.T, ctx context.Context, s *sandbox.Sandbox, node string, pod corev1.Pod, pv string) string {
	t.Helper()
	target := filepath.Join(nodeDir(s, node), "kubelet", "pods", string(pod.UID), "volumes", "kubernetes.io~csi", pv, "mount")
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

// fenceNode fences node from the volume in the datapath and taints it
// vigil.io/fenced:NoSchedule, as the manager will; it returns the fence's epoch.
func fenceNode(t *testing.T, ctx context.Context, s *sandbox.Sandbox, stk *sandbox.Stack, volID, node string) uint64 {
	t.Helper()
	dp := dialStack(t, ctx, stk, stk.TokenFile)
	defer dp.Close()
	epoch, err := dp.Fence(ctx, volID, node)
	if err != nil {
		t.Fatalf("fence %s from volume %s: %v", node, volID, err)
	}
	n, err := s.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: vigil.FencedTaintKey, Effect: corev1.TaintEffectNoSchedule,
		TimeAdded: &metav1.Time{Time: time.Now()}})
	if _, err := s.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("taint %s: %v", node, err)
	}
	return epoch
}

// reap does what the manager's reaper will once the node is fenced: it drops
// the volume from the dead node's status.volumesInUse (the attach-detach
// controller otherwise waits its hard-coded 6 minutes before it lets the volume
// go: the node's kubelet is dead and will never report the unmount, and the
// fence makes the report moot), force-deletes the pod (UID precondition) and
// deletes its VolumeAttachment on node.
func reap(t *testing.T, ctx context.Context, c kubernetes.Interface, pod corev1.Pod, pv, handle, node string) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(t, err)
	inUse := []corev1.UniqueVolumeName{}
	for _, v := range n.Status.VolumesInUse {
		if v != corev1.UniqueVolumeName("kubernetes.io/csi/"+vigil.DriverName+"^"+handle) {
			inUse = append(inUse, v)
		}
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"volumesInUse": inUse}})
	must(t, err)
	_, err = c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	must(t, err)
	zero := int64(0)
	uid := pod.UID
	err = c.CoreV1().Pods(stackNS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &uid}})
	must(t, err)
	vas, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, va := range vas.Items {
		if va.Spec.NodeName == node && deref(va.Spec.Source.PersistentVolumeName) == pv {
			must(t, c.StorageV1().VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}))
		}
	}
}

// waitNodeACleaned waits for node A to be Ready, its taint gone and nothing of
// the old pod mounted or attached to a loop device, marking each on tb.
func waitNodeACleaned(t *testing.T, ctx context.Context, s *sandbox.Sandbox, tb *timeline, oldTarget string) {
	t.Helper()
	dirA := nodeDir(s, stackNodeA)
	must(t, sandbox.Poll(ctx, 90*time.Second, stackNodeA+" clean and untainted", func(ctx context.Context) (bool, string, error) {
		n, err := s.Client().CoreV1().Nodes().Get(ctx, stackNodeA, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		now := time.Now()
		tainted := false
		for _, tn := range n.Spec.Taints {
			tainted = tainted || tn.Key == vigil.FencedTaintKey
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				tb.mark(evAReady, now)
			}
		}
		if !tainted {
			tb.mark(evUntainted, now)
		}
		mps, loops := mountsUnder(t, dirA), loopsUnder(t, dirA)
		if len(mps) == 0 && len(loops) == 0 {
			tb.mark(evAClean, now)
		}
		_, ready := tb.seen(evAReady)
		return ready && !tainted && len(mps) == 0 && len(loops) == 0, fmt.Sprintf("tainted %v, mounts %v, loops %v", tainted, mps, loops), nil
	}, describeStack(s)))
	if _, err := os.Stat(oldTarget); err == nil {
		t.Errorf("the old pod's target path %s still exists on %s", oldTarget, stackNodeA)
	}
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

// checkGrants asks the datapath who may write the volume: node B only, with
// its epoch; node A's grant is gone (fenced, then released).
func checkGrants(t *testing.T, ctx context.Context, stk *sandbox.Stack, volID string, epochB uint64) {
	t.Helper()
	dp := dialStack(t, ctx, stk, stk.TokenFile)
	defer dp.Close()
	atts, err := dp.Attachments(ctx, volID)
	must(t, err)
	for _, a := range atts {
		switch {
		case a.Node == stackNodeA && a.Live():
			t.Errorf("datapath: %s still holds a live grant on %s (epoch %d)", stackNodeA, volID, a.Epoch)
		case a.Node == stackNodeB && (!a.Live() || a.Epoch != epochB):
			t.Errorf("datapath: %s's attachment %+v, want a live grant of epoch %d", stackNodeB, a, epochB)
		}
	}
	t.Logf("datapath attachments of %s: %+v", volID, atts)
}

// engineLogSince returns the lines node's engine logged since t0 (its log
// starts each line with time=RFC3339).
func engineLogSince(t *testing.T, s *sandbox.Sandbox, node string, t0 time.Time) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nodeDir(s, node), sandbox.StackEngine+".log"))
	if err != nil {
		return err.Error()
	}
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		ts, ok := bytes.CutPrefix(l, []byte("time="))
		if !ok {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, string(bytes.Fields(ts)[0])); err == nil && !at.Before(t0.Add(-time.Second)) {
			out = append(out, l)
		}
	}
	return lastN(string(bytes.Join(out, []byte("\n"))), 25)
}

// dialStack connects to the stack's datapath over TLS with the token in
// tokenFile (read again when it changes).
func dialStack(t *testing.T, ctx context.Context, stk *sandbox.Stack, tokenFile string) *dpclient.Client {
	t.Helper()
	dp, err := dpclient.Dial(ctx, stk.DatapathAddr, "", dpclient.WithTokenFile(tokenFile), dpclient.WithCAFile(stk.CAFile))
	must(t, err)
	return dp
}

// checkStackIdentities: on the running stack, node A's engine credentials
// (a ServiceAccount token bound to node A, checked by TokenReview) heartbeat
// as node A but cannot heartbeat, write or fence as node B nor grant; a
// client without the CA is refused.
func checkStackIdentities(t *testing.T, ctx context.Context, s *sandbox.Sandbox, stk *sandbox.Stack, volID string) {
	t.Helper()
	a := dialStack(t, ctx, stk, sandbox.NodeTokenFile(nodeDir(s, stackNodeA)))
	defer a.Close()
	if err := a.Heartbeat(ctx, stackNodeA); err != nil {
		t.Fatalf("%s's engine credentials heartbeat as %s: %v", stackNodeA, stackNodeA, err)
	}
	for what, err := range map[string]error{
		"heartbeat as " + stackNodeB: a.Heartbeat(ctx, stackNodeB),
		"write as " + stackNodeB:     a.WriteAt(ctx, volID, stackNodeB, 1, 0, []byte("x")),
		"fence " + stackNodeB:        second(a.Fence(ctx, volID, stackNodeB)),
		"grant itself":               second(a.Grant(ctx, volID, stackNodeA)),
	} {
		if !errors.Is(err, datapath.ErrPermissionDenied) {
			t.Errorf("%s's engine credentials %s: %v; want ErrPermissionDenied", stackNodeA, what, err)
		}
	}
	tok, err := datapath.ReadTokenFile(stk.TokenFile)
	must(t, err)
	plain, err := dpclient.Dial(ctx, stk.DatapathAddr, tok, dpclient.WithRetries(0), dpclient.WithTimeout(3*time.Second))
	must(t, err)
	defer plain.Close()
	if _, err := plain.ListVolumes(ctx); err == nil {
		t.Error("a plaintext client got an answer from the stack's TLS datapath")
	}
}

func second[T any](_ T, err error) error { return err }
