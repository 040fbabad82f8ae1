package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// testRealPowerCut is the power cut on real nodes: a StatefulSet's pod is a
// container of the writer image that appends fsync'd records to its Vigil
// volume and acknowledges each in a ledger on the host. Its node loses power
// (kubelet, containerd, the container and the engine at once). The manager
// fences, taints, reaps and frees the attachment; the real kubelet of
// another node stages and publishes the volume and starts the replacement's
// container, which finds every record the old one acknowledged; the old
// node's grant is fenced (a write as that node at its old epoch is refused).
// Started again, the node is let back only once its engine cleaned up and
// removed the taint. The timeline says where the seconds go
// (recoveryWatch).
func (e *loopEnv) testRealPowerCut(t *testing.T) {
	ctx := context.Background()
	s := e.s
	ledgers := e.writer.WriterLedgerDir
	app := e.newLoopApp(t, "rpc", "node-1")
	podA := e.waitRunning(t, e.waitAppPod(t, app, "", "", 90*time.Second), 90*time.Second)
	victim := podA.Spec.NodeName
	epochA := waitAttached(t, ctx, s, app.pv, victim)
	targetA := waitPublished(t, ctx, s, victim, podA, app.pv)
	e.waitVolumesInUse(t, victim, app.handle)
	ledgerA := sandbox.LedgerFile(ledgers, string(podA.UID))
	e.waitAcks(t, ledgerA, 20, 60*time.Second)
	t.Logf("pod %s's container on %s writes through the real kubelet's mount %s (epoch %d)", podA.Name, victim, targetA, epochA)

	w := &recoveryWatch{c: s.Client(), ns: loopNS, selector: "app=" + app.name, oldUID: string(podA.UID), victim: victim, pv: app.pv, handle: app.handle,
		podVolumeDir: func(node, uid string) string { return s.PodVolumeDir(node, types.UID(uid), app.pv) },
		ledger:       func(uid string) string { return sandbox.LedgerFile(ledgers, uid) }}
	start := time.Now()
	must(t, s.Stop(victim))
	tl := newTimeline(start)
	tl.mark("power cut of "+victim+" (its kubelet, containerd, the writer's container and its engine SIGKILLed)", time.Now())
	w.start(tl)
	podB := e.waitAppPod(t, app, string(podA.UID), victim, 90*time.Second)
	nodeB := podB.Spec.NodeName
	epochB := waitAttached(t, ctx, s, app.pv, nodeB)
	e.waitVolumesInUse(t, nodeB, app.handle)
	targetB := waitPublished(t, ctx, s, nodeB, podB, app.pv)
	podB = e.waitRunning(t, podB, 60*time.Second)
	e.waitAcks(t, sandbox.LedgerFile(ledgers, string(podB.UID)), 1, 60*time.Second)
	w.stop()

	rec := e.waitRecovery(t, victim, start, v1alpha1.PhaseRecovered, 60*time.Second)
	e.checkRecovery(t, rec, app, podA.UID, podB.UID)
	e.checkOldWriter(t, ledgerA, targetB, podA, rec)
	e.checkFenced(t, ctx, app, victim, nodeB, epochA, epochB)
	markRecovery(tl, rec)
	t.Log(tl.table(fmt.Sprintf("Power cut of real node %s → replacement's container on %s writing, with nothing but Vigil acting", victim, nodeB)))

	boot := time.Now()
	must(t, s.Start(victim))
	tb := newTimeline(boot)
	tb.mark(victim+" started (new boot id: kubelet, containerd, engine)", time.Now())
	e.waitNodeClean(t, victim, tb)
	rec = e.waitRecovery(t, victim, start, v1alpha1.PhaseNodeReturned, 60*time.Second)
	if r := rec.Status.Return; r == nil || r.ReadyAt == nil || r.UntaintedAt == nil {
		t.Errorf("NodeRecovery %s return %+v, want Ready and untainted times", rec.Name, r)
	}
	must(t, sandbox.Poll(ctx, 90*time.Second, "the old pod's target path "+targetA+" gone", func(context.Context) (bool, string, error) {
		_, err := os.Stat(targetA)
		return errors.Is(err, os.ErrNotExist), fmt.Sprint(err), nil
	}, e.describe))
	tb.mark("the old pod's target path gone on "+victim, time.Now())
	t.Log(tb.table("Start of real node " + victim + " → its engine cleans up what the reaped pod left and removes the taint"))
}

// waitRunning waits until pod (by UID) is Running with its container
// started, and returns it.
func (e *loopEnv) waitRunning(t *testing.T, pod corev1.Pod, timeout time.Duration) corev1.Pod {
	t.Helper()
	must(t, sandbox.Poll(context.Background(), timeout, "pod "+pod.Name+" Running on "+pod.Spec.NodeName, func(ctx context.Context) (bool, string, error) {
		p, err := e.s.Client().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID) {
			return false, "", fmt.Errorf("pod %s (uid %s) is gone", pod.Name, pod.UID)
		}
		if err != nil {
			return false, err.Error(), nil
		}
		pod = *p
		started := len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil
		return p.Status.Phase == corev1.PodRunning && started, fmt.Sprintf("phase %s, containers %+v", p.Status.Phase, p.Status.ContainerStatuses), nil
	}, e.describeAll))
	return pod
}

// waitAcks waits until the writer's ledger file holds at least n
// acknowledged records.
func (e *loopEnv) waitAcks(t *testing.T, file string, n int, timeout time.Duration) {
	t.Helper()
	must(t, sandbox.Poll(context.Background(), timeout, fmt.Sprintf("%d records acknowledged in %s", n, file), func(context.Context) (bool, string, error) {
		acks, err := ledger.ReadLedger(file)
		return err == nil && len(acks) >= n, fmt.Sprintf("%d (%v)", len(acks), err), nil
	}, e.describeAll))
}

// describeAll is describe with the stack's and the nodes' logs.
func (e *loopEnv) describeAll(ctx context.Context) string {
	return e.describe(ctx) + describeStack(e.s)(ctx)
}

// checkOldWriter: every record the reaped pod's writer acknowledged before
// the power cut is in its file on the volume, as the replacement's node
// reads it, and none is from after the fence.
func (e *loopEnv) checkOldWriter(t *testing.T, ledgerFile, target string, old corev1.Pod, rec *v1alpha1.NodeRecovery) {
	t.Helper()
	acks, err := ledger.ReadLedger(ledgerFile)
	must(t, err)
	found, err := ledger.ReadRecords(filepath.Join(target, ledger.RecordsFile(string(old.UID))))
	must(t, err)
	var fenced []ledger.Span
	if rec.Status.FencedAt != nil {
		fenced = append(fenced, ledger.Span{From: rec.Status.FencedAt.Time})
	}
	res := ledger.Verify(ledger.Pod{UID: string(old.UID), Node: old.Spec.NodeName, Acks: acks, Found: found, Fenced: fenced})
	if !res.OK() || res.Acked == 0 {
		t.Errorf("the reaped pod's writer: %s; want every acknowledged record on the volume, none after the fence", res)
		return
	}
	t.Logf("the reaped pod's writer (a container on %s): %s", old.Spec.NodeName, res)
}

// checkFenced: at the datapath the old node's grant is fenced below the new
// node's live one, and a write as the old node at its old epoch, with its
// own engine's credentials (what a zombie engine would send), is refused.
func (e *loopEnv) checkFenced(t *testing.T, ctx context.Context, app loopApp, victim, nodeB string, epochA, epochB uint64) {
	t.Helper()
	g := e.grants(t, app.handle)
	if a := g[victim]; a.Live() || a.Epoch <= epochA {
		t.Errorf("datapath: %s's row %+v, want fenced or released at an epoch above %d", victim, a, epochA)
	}
	if b := g[nodeB]; !b.Live() || b.Epoch != epochB || epochB <= g[victim].Epoch {
		t.Errorf("datapath: %s's row %+v, want a live grant of epoch %d above the fence", nodeB, b, epochB)
	}
	zombie := dialStack(t, ctx, e.stk, sandbox.NodeTokenFile(nodeDir(e.s, victim)))
	defer zombie.Close()
	err := zombie.WriteAt(ctx, app.handle, victim, epochA, 0, []byte("zombie"))
	if !errors.Is(err, datapath.ErrFenced) {
		t.Errorf("a write as %s at its old epoch %d: %v; want %v", victim, epochA, err, datapath.ErrFenced)
		return
	}
	t.Logf("a write as %s at its old epoch %d is refused: %v", victim, epochA, err)
}
