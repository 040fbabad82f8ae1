package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/settings"
)

// zombieWriter appends records "seq issued-unix-nanos" to a file on a node's
// mount, fsyncing each, and remembers which were acknowledged (fsync returned
// nil) and when.
type zombieWriter struct {
	path string
	stop chan struct{}
	done chan struct{}

	mu        sync.Mutex
	acked     map[int]time.Time // seq → when its fsync returned nil
	issued    map[int]time.Time
	firstFail time.Time
	failErr   error
}

func startZombieWriter(t *testing.T, dir string) *zombieWriter {
	t.Helper()
	w := &zombieWriter{path: filepath.Join(dir, "ledger.log"), stop: make(chan struct{}), done: make(chan struct{}),
		acked: map[int]time.Time{}, issued: map[int]time.Time{}}
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	go func() {
		defer close(w.done)
		defer f.Close()
		for seq := 1; ; seq++ {
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			issued := time.Now()
			_, err := fmt.Fprintf(f, "%d %d\n", seq, issued.UnixNano())
			if err == nil {
				err = f.Sync()
			}
			w.mu.Lock()
			w.issued[seq] = issued
			if err == nil {
				w.acked[seq] = time.Now()
			} else if w.firstFail.IsZero() {
				w.firstFail, w.failErr = time.Now(), err
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// halt stops the writer and closes its file (an open file would keep the old
// mount busy).
func (w *zombieWriter) halt() {
	select {
	case <-w.done:
	default:
		close(w.stop)
		<-w.done
	}
}

// check compares the writer's ledger with the file as read on another node
// after the fence at fencedAt: every acknowledged record is there, none issued
// after the fence is, and nothing was acknowledged after it.
func (w *zombieWriter) check(t *testing.T, copyPath string, fencedAt time.Time) {
	t.Helper()
	f, err := os.Open(copyPath)
	must(t, err)
	defer f.Close()
	present := map[int]time.Time{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue // a torn last line of an unacknowledged write
		}
		seq, err1 := strconv.Atoi(fields[0])
		ns, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 == nil && err2 == nil {
			present[seq] = time.Unix(0, ns)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var lost, afterFence, ackedAfter []int
	for seq := range w.acked {
		if _, ok := present[seq]; !ok {
			lost = append(lost, seq)
		}
		if w.acked[seq].After(fencedAt) {
			ackedAfter = append(ackedAfter, seq)
		}
	}
	for seq, issued := range present {
		if issued.After(fencedAt) {
			afterFence = append(afterFence, seq)
		}
	}
	if len(lost) > 0 || len(afterFence) > 0 || len(ackedAfter) > 0 {
		t.Errorf("zombie ledger: %d acknowledged records lost %v; %d records issued after the fence are in the volume %v; %d acknowledged after the fence %v",
			len(lost), lost, len(afterFence), afterFence, len(ackedAfter), ackedAfter)
	}
	if w.firstFail.IsZero() {
		t.Errorf("the zombie's writes never failed after the fence")
	} else {
		t.Logf("zombie ledger: %d writes issued, %d acknowledged, all %d present on the new node; first refused write %.2fs after the fence: %v",
			len(w.issued), len(w.acked), len(w.acked), w.firstFail.Sub(fencedAt).Seconds(), w.failErr)
	}
	if !w.firstFail.IsZero() && !errors.Is(w.failErr, syscall.EIO) {
		t.Errorf("the zombie's writes failed with %v, want an I/O error (the fence, not the network)", w.failErr)
	}
}

// testZombie cuts a node off from the API server only: its engine still reaches
// the datapath, so a writer on it keeps writing. Kubernetes calls it down, the
// manager fences it after the grace, and from then on the fence, not the
// network, refuses the zombie's writes with an I/O error. The replacement comes
// up elsewhere with every acknowledged record and none written after the fence.
func (e *loopEnv) testZombie(t *testing.T) {
	ctx := context.Background()
	app := e.newLoopApp(t, "zb", "node-2")
	podA := e.waitAppPod(t, app, "", "", 60*time.Second)
	victim := podA.Spec.NodeName
	waitAttached(t, ctx, e.s, app.pv, victim)
	target := waitPublished(t, ctx, e.s, victim, podA, app.pv)
	waitVolumesAttached(t, ctx, e.s, victim, app.handle)
	e.waitVolumesInUse(t, victim, app.handle)
	w := startZombieWriter(t, target)
	defer w.halt()
	time.Sleep(time.Second)

	start := time.Now()
	must(t, e.s.Partition(victim, sandbox.PartitionAPIServer))
	tl := newTimeline(start)
	tl.mark(victim+" cut off from the API server only (still reaches the datapath)", time.Now())
	podB := e.waitAppPod(t, app, string(podA.UID), victim, 90*time.Second)
	nodeB := podB.Spec.NodeName
	tl.mark("replacement scheduled on "+nodeB, time.Now())
	waitAttached(t, ctx, e.s, app.pv, nodeB)
	targetB := waitPublished(t, ctx, e.s, nodeB, podB, app.pv)
	tl.mark("replacement's volume published on "+nodeB, time.Now())
	rec := e.waitRecovery(t, victim, start, v1alpha1.PhaseReaping, 30*time.Second)
	if rec.Status.FencedAt == nil {
		t.Fatalf("NodeRecovery %s has no fence time: %+v", rec.Name, rec.Status)
	}
	// Let the zombie keep trying for a while after the fence: every try must fail.
	time.Sleep(2 * time.Second)
	w.halt()
	tl.mark("zombie writer stopped", time.Now())
	w.check(t, filepath.Join(targetB, "ledger.log"), rec.Status.FencedAt.Time)
	if a := e.grants(t, app.handle)[victim]; a.Live() {
		t.Errorf("datapath: the zombie %s still holds a live grant %+v", victim, a)
	}
	markRecovery(tl, rec)
	t.Log(tl.table(fmt.Sprintf("Zombie %s (API server cut only) → fenced, replacement on %s", victim, nodeB)))

	must(t, e.s.Heal(victim))
	e.waitNodeClean(t, victim, nil)
	e.waitRecovery(t, victim, start, v1alpha1.PhaseNodeReturned, 60*time.Second)
}

// testDatapathOnlyCut cuts a node off from the datapath only: Kubernetes still
// calls it Ready, but its engine is silent, so the manager judges it
// storage-isolated, fences it and fails its pod over.
func (e *loopEnv) testDatapathOnlyCut(t *testing.T) {
	ctx := context.Background()
	app := e.newLoopApp(t, "dp", "node-3")
	podA := e.waitAppPod(t, app, "", "", 60*time.Second)
	victim := podA.Spec.NodeName
	waitAttached(t, ctx, e.s, app.pv, victim)
	waitPublished(t, ctx, e.s, victim, podA, app.pv)
	waitVolumesAttached(t, ctx, e.s, victim, app.handle)
	e.waitVolumesInUse(t, victim, app.handle)

	start := time.Now()
	must(t, e.s.Partition(victim, sandbox.PartitionDatapath))
	tl := newTimeline(start)
	tl.mark(victim+" cut off from the datapath only", time.Now())
	podB := e.waitAppPod(t, app, string(podA.UID), victim, 60*time.Second)
	nodeB := podB.Spec.NodeName
	waitAttached(t, ctx, e.s, app.pv, nodeB)
	waitPublished(t, ctx, e.s, nodeB, podB, app.pv)
	tl.mark("replacement's volume published on "+nodeB, time.Now())
	if st := e.readyStatus(t, victim); st != corev1.ConditionTrue {
		t.Errorf("Kubernetes says %s is Ready=%s: the failover should have come from the storage view alone", victim, st)
	}
	rec := e.waitRecovery(t, victim, start, v1alpha1.PhaseRecovered, 30*time.Second)
	if rec.Status.Reason != "storage-isolated" {
		t.Errorf("NodeRecovery %s reason %q, want storage-isolated", rec.Name, rec.Status.Reason)
	}
	markRecovery(tl, rec)
	t.Log(tl.table(fmt.Sprintf("Datapath-only cut of %s (Kubernetes: Ready) → storage-isolated, fenced, replacement on %s", victim, nodeB)))

	must(t, e.s.Heal(victim))
	e.waitNodeClean(t, victim, nil)
	e.waitRecovery(t, victim, start, v1alpha1.PhaseNodeReturned, 60*time.Second)
}

// testGracefulEngineRestart stops a healthy node's engine with SIGTERM, as a
// DaemonSet rolling update does, for longer than the connectivity-loss
// threshold: it announced the stop to the datapath, so nothing fails over. Then
// a crashed engine (SIGKILL) on the same node does cause a failover.
func (e *loopEnv) testGracefulEngineRestart(t *testing.T) {
	ctx := context.Background()
	app := e.newLoopApp(t, "gr", "node-3")
	podA := e.waitAppPod(t, app, "", "", 60*time.Second)
	node := podA.Spec.NodeName
	waitAttached(t, ctx, e.s, app.pv, node)
	waitPublished(t, ctx, e.s, node, podA, app.pv)

	pid, err := e.s.ProcessPID(node, sandbox.StackEngine)
	must(t, err)
	start := time.Now()
	must(t, syscall.Kill(pid, syscall.SIGTERM))
	must(t, sandbox.Poll(ctx, 30*time.Second, "engine of "+node+" exited", func(context.Context) (bool, string, error) {
		p, err := e.s.ProcessPID(node, sandbox.StackEngine)
		return p == 0, fmt.Sprint(p), err
	}, nil))
	// Stay down well past the threshold (3 s) and a few storage polls.
	time.Sleep(8 * time.Second)
	must(t, e.s.StartProcess(node, sandbox.StackEngine))
	time.Sleep(2 * time.Second)
	recs, err := e.rc.List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, r := range recs.Items {
		if r.Spec.NodeName == node && r.Status.DetectedAt != nil && r.Status.DetectedAt.After(start) {
			t.Errorf("a graceful engine stop caused a failover: NodeRecovery %s %+v", r.Name, r.Status)
		}
	}
	if a := e.grants(t, app.handle)[node]; !a.Live() {
		t.Errorf("after a graceful engine restart %s's grant is %+v, want live", node, a)
	}
	pods, err := e.s.Client().CoreV1().Pods(loopNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app.name})
	must(t, err)
	if len(pods.Items) != 1 || pods.Items[0].UID != podA.UID {
		t.Errorf("after a graceful engine restart the pods are %d (want the same %s)", len(pods.Items), podA.UID)
	}
	t.Logf("graceful engine stop of %.0fs on %s: no failover", 8.0, node)

	// A crash is different: it announces nothing, and while no engine serves
	// the node's FUSE connections (the fd keeper holds them) its I/O waits; an
	// engine that stays away past the threshold is failed over.
	crash := time.Now()
	must(t, e.s.KillProcess(node, sandbox.StackEngine))
	podB := e.waitAppPod(t, app, string(podA.UID), node, 60*time.Second)
	rec := e.waitRecovery(t, node, crash, v1alpha1.PhaseReaping, 30*time.Second)
	t.Logf("crashed engine on %s: failed over to %s %.1fs after the crash (NodeRecovery %s, reason %s)",
		node, podB.Spec.NodeName, time.Since(crash).Seconds(), rec.Name, rec.Status.Reason)
	must(t, e.s.StartProcess(node, sandbox.StackEngine))
	e.waitNodeClean(t, node, nil)
	e.waitRecovery(t, node, crash, v1alpha1.PhaseNodeReturned, 60*time.Second)
}

// testAttachmentPolicies: with never, the reaped pod's attachment and the dead
// node's volumesInUse are left to Kubernetes' timeout, and the replacement
// waits; switching to wait frees them at once, because the replacement is
// waiting.
func (e *loopEnv) testAttachmentPolicies(t *testing.T) {
	ctx := context.Background()
	e.set(t, settings.NameVolumeAttachmentRecoveryPolicy, string(settings.RecoveryNever))
	defer e.set(t, settings.NameVolumeAttachmentRecoveryPolicy, string(settings.RecoveryImmediate))
	app := e.newLoopApp(t, "ap", "node-1")
	podA := e.waitAppPod(t, app, "", "", 60*time.Second)
	victim := podA.Spec.NodeName
	waitAttached(t, ctx, e.s, app.pv, victim)
	waitPublished(t, ctx, e.s, victim, podA, app.pv)
	waitVolumesAttached(t, ctx, e.s, victim, app.handle)
	e.waitVolumesInUse(t, victim, app.handle)

	start := time.Now()
	must(t, e.s.Stop(victim))
	podB := e.waitAppPod(t, app, string(podA.UID), victim, 60*time.Second)
	e.waitRecovery(t, victim, start, v1alpha1.PhaseReaping, 30*time.Second)
	time.Sleep(6 * time.Second)
	va := e.attachmentOn(t, app.pv, victim)
	if va == "" {
		t.Fatalf("policy never: the VolumeAttachment of %s on %s is gone", app.pv, victim)
	}
	if e.attachmentOn(t, app.pv, podB.Spec.NodeName) != "" && e.attachedOn(t, app.pv, podB.Spec.NodeName) {
		t.Fatalf("policy never: the replacement got the volume attached on %s", podB.Spec.NodeName)
	}
	t.Logf("policy never: 6 s after the reap %s still holds VolumeAttachment %s; the replacement waits", victim, va)

	switched := time.Now()
	e.set(t, settings.NameVolumeAttachmentRecoveryPolicy, string(settings.RecoveryWait))
	waitAttached(t, ctx, e.s, app.pv, podB.Spec.NodeName)
	t.Logf("policy wait (the replacement waits): attached on %s %.2fs after the settings change", podB.Spec.NodeName, time.Since(switched).Seconds())
	must(t, e.s.Start(victim))
	e.waitNodeClean(t, victim, nil)
}

// attachmentOn returns the name of the VolumeAttachment of pv on node ("").
func (e *loopEnv) attachmentOn(t *testing.T, pv, node string) string {
	t.Helper()
	vas, err := e.s.Client().StorageV1().VolumeAttachments().List(context.Background(), metav1.ListOptions{})
	must(t, err)
	for _, va := range vas.Items {
		if va.Spec.NodeName == node && deref(va.Spec.Source.PersistentVolumeName) == pv {
			return va.Name
		}
	}
	return ""
}

func (e *loopEnv) attachedOn(t *testing.T, pv, node string) bool {
	t.Helper()
	vas, err := e.s.Client().StorageV1().VolumeAttachments().List(context.Background(), metav1.ListOptions{})
	must(t, err)
	for _, va := range vas.Items {
		if va.Spec.NodeName == node && deref(va.Spec.Source.PersistentVolumeName) == pv {
			return va.Status.Attached
		}
	}
	return false
}

// testCrashLoop: a protected pod whose container crash-loops past the limit is
// deleted (not forced) once; its replacement crash-looping at once is held
// back by the owner's backoff.
func (e *loopEnv) testCrashLoop(t *testing.T) {
	ctx := context.Background()
	e.set(t, settings.NameCrashLoopRestartLimit, "3")
	e.set(t, settings.NameCrashLoopPodDeletion, "true")
	defer e.set(t, settings.NameCrashLoopPodDeletion, "false")
	app := e.newLoopApp(t, "cl", "node-2")
	podA := e.waitAppPod(t, app, "", "", 60*time.Second)
	waitStackPodRunningIn(t, ctx, e, podA)
	e.crashLoop(t, podA, 4)
	// The replacement that runs: kwok may delete the StatefulSet's first
	// new pod of the same name as it removes the old one (seen once:
	// three pods cl-0 scheduled within 0.6 s, the manager's deletion
	// counted once).
	podB := e.waitAppPodRunning(t, app, string(podA.UID), 60*time.Second)
	t.Logf("crash-looping pod %s deleted; replacement %s running on %s", podA.UID, podB.UID, podB.Spec.NodeName)
	e.crashLoop(t, podB, 9)
	time.Sleep(3 * time.Second)
	p, err := e.s.Client().CoreV1().Pods(loopNS).Get(ctx, podB.Name, metav1.GetOptions{})
	must(t, err)
	if p.UID != podB.UID || p.DeletionTimestamp != nil {
		t.Errorf("the replacement %s was deleted within the owner's backoff", podB.UID)
	}
	if v, ok := e.mgr.metric(t, `vigil_crashloop_pods_deleted_total{owner_kind="StatefulSet"}`); !ok || v != 1 {
		t.Errorf("vigil_crashloop_pods_deleted_total = %v (present %t), want 1", v, ok)
	}
}

// crashLoop writes a CrashLoopBackOff container status into the pod, as a
// kubelet whose container keeps failing would (kwok is the node's kubelet).
func (e *loopEnv) crashLoop(t *testing.T, pod corev1.Pod, restarts int32) {
	t.Helper()
	ctx := context.Background()
	p, err := e.s.Client().CoreV1().Pods(loopNS).Get(ctx, pod.Name, metav1.GetOptions{})
	must(t, err)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: sandbox.PauseImage, RestartCount: restarts,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off restarting failed container"}}}}
	_, err = e.s.Client().CoreV1().Pods(loopNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	must(t, err)
}

// waitAppPodRunning waits for a pod of app other than notUID, not being
// deleted, Running, and returns it.
func (e *loopEnv) waitAppPodRunning(t *testing.T, app loopApp, notUID string, timeout time.Duration) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	must(t, sandbox.Poll(context.Background(), timeout, "a Running pod of "+app.name+" other than "+notUID, func(ctx context.Context) (bool, string, error) {
		pods, err := e.s.Client().CoreV1().Pods(loopNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app.name})
		if err != nil {
			return false, err.Error(), nil
		}
		var seen []string
		for _, p := range pods.Items {
			seen = append(seen, fmt.Sprintf("%s %s", p.UID, p.Status.Phase))
			if string(p.UID) != notUID && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				pod = p
				return true, "", nil
			}
		}
		return false, strings.Join(seen, ", "), nil
	}, e.describe))
	return pod
}

func waitStackPodRunningIn(t *testing.T, ctx context.Context, e *loopEnv, pod corev1.Pod) {
	t.Helper()
	must(t, sandbox.Poll(ctx, 30*time.Second, "pod "+pod.Name+" Running", func(ctx context.Context) (bool, string, error) {
		p, err := e.s.Client().CoreV1().Pods(loopNS).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		return p.UID == pod.UID && p.Status.Phase == corev1.PodRunning, string(p.Status.Phase), nil
	}, e.describe))
}
