package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/sandbox"
)

// testFenceNeverStrands: a node holding a StatefulSet pod and an opted-out pod
// (vigil.io/reap: "false"), each on a volume of its own, is cut off from the
// datapath. The manager fences the node and fails the StatefulSet pod over, but
// it fences only the volume of the pod it reaps: the opted-out pod's grant stays
// live at the same epoch. When the cut heals, the opted-out pod's I/O works
// again, through the same mount, with its data.
func (e *loopEnv) testFenceNeverStrands(t *testing.T) {
	ctx := context.Background()
	c := e.s.Client()
	app := e.newLoopApp(t, "fns", "node-2")
	podA := e.waitAppPod(t, app, "", "", 60*time.Second)
	victim := podA.Spec.NodeName
	waitAttached(t, ctx, e.s, app.pv, victim)
	waitPublished(t, ctx, e.s, victim, podA, app.pv)

	keep := e.newOptedOutApp(t, "keep", victim)
	keepPod := e.waitAppPod(t, keep, "", "", 60*time.Second)
	keepEpoch := waitAttached(t, ctx, e.s, keep.pv, victim)
	keepTarget := waitPublished(t, ctx, e.s, victim, keepPod, keep.pv)
	payload := writePayload(t, keepTarget)
	waitVolumesAttached(t, ctx, e.s, victim, app.handle)
	e.waitVolumesInUse(t, victim, app.handle)

	start := time.Now()
	must(t, e.s.Partition(victim, sandbox.PartitionDatapath))
	tl := newTimeline(start)
	tl.mark(victim+" cut off from the datapath", time.Now())
	podB := e.waitAppPod(t, app, string(podA.UID), victim, 60*time.Second)
	tl.mark("StatefulSet pod replaced on "+podB.Spec.NodeName, time.Now())
	rec := e.waitRecovery(t, victim, start, v1alpha1.PhaseReaping, 30*time.Second)
	for _, v := range rec.Status.Volumes {
		if v.Handle == keep.handle {
			t.Errorf("NodeRecovery %s lists the opted-out pod's volume %s as fenced", rec.Name, keep.handle)
		}
	}
	if a := e.grants(t, keep.handle)[victim]; !a.Live() || a.Epoch != keepEpoch {
		t.Errorf("datapath: %s's row on the opted-out pod's volume %s is %+v; want its grant live at epoch %d, untouched by the fence",
			victim, keep.handle, a, keepEpoch)
	}
	if a := e.grants(t, app.handle)[victim]; a.Live() {
		t.Errorf("datapath: %s still live on the reaped pod's volume %s: %+v", victim, app.handle, a)
	}
	if p, err := c.CoreV1().Pods(loopNS).Get(ctx, keepPod.Name, metav1.GetOptions{}); err != nil || p.UID != keepPod.UID || p.DeletionTimestamp != nil {
		t.Errorf("the opted-out pod %s after the fence: %v (err %v); want it untouched", keepPod.Name, p, err)
	}

	heal := time.Now()
	must(t, e.s.Heal(victim))
	tl.mark(victim+" reaches the datapath again", heal)
	var lastErr error
	must(t, sandbox.Poll(ctx, 30*time.Second, "a write through the opted-out pod's mount on "+victim, func(context.Context) (bool, string, error) {
		lastErr = writeAndSync(filepath.Join(keepTarget, "after-heal.txt"), []byte("written after the cut healed\n"))
		return lastErr == nil, fmt.Sprint(lastErr), nil
	}, e.describe))
	tl.mark("opted-out pod's volume writable again on "+victim, time.Now())
	if got, err := os.ReadFile(filepath.Join(keepTarget, stackPayload)); err != nil || !bytes.Equal(got, payload) {
		t.Errorf("the opted-out pod's data after the heal: %q (err %v), want %q", got, err, payload)
	}
	t.Log(tl.table(fmt.Sprintf("Datapath cut of %s with an opted-out pod: only the reaped pod's volume is fenced", victim)))

	// Leave the node as the next case wants it: the opted-out app goes, the
	// engine cleans up and removes the taint.
	must(t, c.AppsV1().StatefulSets(loopNS).Delete(ctx, keep.name, metav1.DeleteOptions{}))
	e.waitNodeClean(t, victim, nil)
	e.waitRecovery(t, victim, start, v1alpha1.PhaseNodeReturned, 60*time.Second)
}

// newOptedOutApp is newLoopApp for a StatefulSet whose pod carries
// vigil.io/reap: "false" and may run only on node.
func (e *loopEnv) newOptedOutApp(t *testing.T, name, node string) loopApp {
	t.Helper()
	ctx := context.Background()
	c := e.s.Client()
	a := e.newAppClaim(t, name)
	grace := int64(1)
	ss := sandbox.Workload{Namespace: loopNS, Name: name, Nodes: []string{node}, Claims: []string{a.claim},
		TerminationGracePeriodSeconds: &grace, Image: e.writer.Image, WriterLedgerDir: e.writer.WriterLedgerDir}.StatefulSet(1)
	ss.Spec.Template.Annotations = map[string]string{vigil.ReapAnnotation: "false"}
	_, err := c.AppsV1().StatefulSets(loopNS).Create(ctx, ss, metav1.CreateOptions{})
	must(t, err)
	return a
}

// writeAndSync writes b to path and fsyncs it: an error is what the pod's I/O
// would see.
func writeAndSync(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
