package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// testPodOnLeaderNode: the power cut of a node that runs a StatefulSet's pod
// and the datapath's leader at once, while the pod's volume (three copies,
// the stack's default; one on the cut node) is held by another server. Kwok nodes with the kubelet stand-in; the closed loop's
// manager (TestLoopKwok's, delete-both, the fast trigger, immediate
// attachment recovery) is started here, as a host process: no power cut of
// a node takes it down.
//
//  1. The claim is provisioned first, and where its data landed (the server
//     the group records as its holder) chooses the pod's node: the leader's,
//     after a restart of the holder's server (which hands the lead over) if
//     the holder leads. A second volume, granted to that node and written,
//     has its data on the node's own server (ownVolume): while the server
//     is silent it is an unknown grant of the node, which the fence must
//     leave alone while it goes ahead with the rest.
//  2. The StatefulSet's pod runs there; a ledger writer appends fsync'd
//     records to its volume and acknowledges each once fsync returned.
//  3. The node is powered off (its kwok, engine, kubelet stand-in, datapath
//     server and the writer die at once). The group elects a new leader,
//     the manager fences the node through it, reaps the pod and frees its
//     attachment; the replacement runs on another node with the volume
//     granted at a higher epoch, and every acknowledged record is on it.
//  4. The node is powered on: its write at its old epoch is refused, and its
//     engine cleans up and removes the fenced taint.
func (e *serversEnv) testPodOnLeaderNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	l := startLoopOn(t, ctx, e.s, e.stk, nil)
	t.Logf("closed loop (CRDs, settings, manager on the host) started in %.1fs", time.Since(t0).Seconds())

	app := l.newAppClaim(t, "leader-node")
	holder := groupHolder(t, ctx, e.ctl, app.handle)
	// The claim's StorageClass names no replica count: the stack's default
	// on three servers, three copies, as deploy/'s.
	if v := groupVolume(t, ctx, e.ctl, app.handle); len(v.Replicas) != 3 || !slices.Equal(v.InSync, v.Replicas) {
		t.Fatalf("the claim's volume %s: replicas %v, in sync %v; want three (the stack's default-replica-count on three servers), all in sync", app.handle, v.Replicas, v.InSync)
	}
	leader := waitDatapathLeader(t, ctx, e.s, "")
	if leader.Node == holder {
		if _, err := e.s.RestartProcess(holder, sandbox.StackDatapath, 10*time.Second); err != nil {
			t.Fatalf("restart the leader's server on %s, which holds %s: %v", holder, app.handle, err)
		}
		leader = waitDatapathLeader(t, ctx, e.s, holder)
	}
	victim := leader.Node
	l.startLoopApp(t, app, victim, nil)
	podA := l.waitAppPod(t, app, "", "", 60*time.Second)
	if podA.Spec.NodeName != victim {
		t.Fatalf("pod %s scheduled on %s, not on the leader's node %s it prefers", podA.Name, podA.Spec.NodeName, victim)
	}
	epochA := waitAttached(t, ctx, e.s, app.pv, victim)
	targetA := waitPublished(t, ctx, e.s, victim, podA, app.pv)
	waitVolumesAttached(t, ctx, e.s, victim, app.handle)
	l.waitVolumesInUse(t, victim, app.handle)
	ledgerFile := startLedgerWriter(t, e.s, victim, podA, targetA)
	if now := waitDatapathLeader(t, ctx, e.s, ""); now.Node != victim {
		t.Fatalf("the leader moved from %s to %s before the power cut", victim, now.Node)
	}
	own := e.ownVolume(t, ctx, leader)
	logHeldBy(t, ctx, e.ctl, victim)
	t.Logf("pod %s on %s, the leader's node; its volume %s of three copies held by %s, attached at epoch %d; ledger writer running", podA.Name, victim, app.handle, holder, epochA)

	start := time.Now()
	must(t, e.s.Stop(victim))
	tl := newTimeline(start)
	tl.mark("power cut of "+victim+" (kwok, engine, kubelet stand-in, datapath leader, writer SIGKILLed)", time.Now())
	next := waitDatapathLeader(t, ctx, e.s, victim)
	tl.mark("new datapath leader "+next.Node, time.Now())
	podB := l.waitAppPod(t, app, string(podA.UID), victim, 60*time.Second)
	nodeB := podB.Spec.NodeName
	tl.mark("replacement scheduled on "+nodeB, time.Now())
	epochB := waitAttached(t, ctx, e.s, app.pv, nodeB)
	targetB := waitPublished(t, ctx, e.s, nodeB, podB, app.pv)
	dataAt := time.Now()
	tl.mark("replacement's volume staged and published on "+nodeB, dataAt)

	rec := l.waitRecovery(t, victim, start, v1alpha1.PhaseRecovered, 30*time.Second)
	l.checkRecovery(t, rec, app, podA.UID, podB.UID)
	markRecovery(tl, rec)
	l.checkOldWriter(t, ledgerFile, targetB, podA, rec)
	g := l.grants(t, app.handle)
	if a := g[victim]; a.Live() || a.Epoch <= epochA {
		t.Errorf("datapath: %s's row %+v, want fenced or released at an epoch above %d", victim, a, epochA)
	}
	if b := g[nodeB]; !b.Live() || b.Epoch != epochB || epochB <= g[victim].Epoch {
		t.Errorf("datapath: %s's row %+v, want a live grant of epoch %d above the fence", nodeB, b, epochB)
	}
	if v, ok := l.mgr.metric(t, `vigil_fences_total{outcome="done"}`); !ok || v < 1 {
		t.Errorf("vigil_fences_total{outcome=\"done\"} = %v (present %t), want ≥ 1", v, ok)
	}
	t.Log(tl.table(fmt.Sprintf("Power cut of %s (a StatefulSet's pod and the datapath's leader; the volume held by %s) → replacement on %s", victim, holder, nodeB)))
	fencedAfter := "never"
	if f := rec.Status.FencedAt; f != nil {
		fencedAfter = fmt.Sprintf("%.2fs", f.Sub(start).Seconds())
	}
	t.Logf("FIGURE power cut of the leader's node %s with a pod on it: new leader %s, fenced by the manager %s, replacement's volume published on %s %.2fs after the cut; epochs %s %d → fence %d → %s %d",
		victim, next.Node, fencedAfter, nodeB, dataAt.Sub(start).Seconds(), victim, epochA, g[victim].Epoch, nodeB, epochB)

	boot := time.Now()
	must(t, e.s.Start(victim))
	zombie := dialServers(t, ctx, e.stk, sandbox.NodeTokenFile(e.s.NodeDir(victim)), next.Address)
	defer zombie.Close()
	if err := zombie.WriteAt(ctx, app.handle, victim, epochA, 0, []byte("zombie")); !errors.Is(err, datapath.ErrFenced) {
		t.Errorf("the returning %s's write at its old epoch %d: %v, want ErrFenced", victim, epochA, err)
	}
	tb := newTimeline(boot)
	tb.mark(victim+" started (new boot id); its write at epoch "+fmt.Sprint(epochA)+" refused", time.Now())
	l.waitNodeClean(t, victim, tb)
	t.Log(tb.table("Start of " + victim + " → its engine cleans up what the reaped pod left and removes the taint"))
	checkNeverFenced(t, ctx, e.ctl, own, victim)
}

// checkNeverFenced fails t if node was fenced on v (the volume whose data
// was on the node's own server, silent during the node's outage): once that
// server answers again, node's row must be at v's epoch and not fenced (its
// engine may have released it since).
func checkNeverFenced(t *testing.T, ctx context.Context, ctl *dpclient.Client, v grantedVolume, node string) {
	t.Helper()
	must(t, sandbox.Poll(ctx, 30*time.Second, node+"'s row on "+v.id+" once its server is back", func(ctx context.Context) (bool, string, error) {
		atts, err := ctl.Attachments(ctx, v.id)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, a := range atts {
			if a.Node != node {
				continue
			}
			if a.State == datapath.StateFenced || a.Epoch != v.epoch {
				return false, "", fmt.Errorf("%s's row on %s, whose data was on its own silent server: %+v; want it never fenced (epoch %d)", node, v.id, a, v.epoch)
			}
			return true, "", nil
		}
		return false, "", fmt.Errorf("%s has no row on %s: want its grant of epoch %d, never fenced", node, v.id, v.epoch)
	}, nil))
}

// ownVolume creates a volume whose data is on leader's own server (a create
// places it on the first server a client lists among equals: one disk
// here), grants it to leader's node and writes to it; it is released and
// deleted at the end of the test.
func (e *serversEnv) ownVolume(t *testing.T, ctx context.Context, leader sandbox.DatapathServerStatus) grantedVolume {
	t.Helper()
	creator := dialServers(t, ctx, e.stk, e.stk.TokenFile, leader.Address)
	defer creator.Close()
	v, err := creator.CreateVolume(ctx, "own-"+leader.Node, 1<<20, datapath.AccessRWO)
	must(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.ctl.Release(cctx, v.ID, leader.Node)
		if err := e.ctl.DeleteVolume(cctx, v.ID); err != nil {
			t.Errorf("delete volume %s: %v", v.ID, err)
		}
	})
	if h := groupHolder(t, ctx, e.ctl, v.ID); h != leader.Node {
		t.Fatalf("volume %s, created by a client that lists %s's server first, is held by %s", v.ID, leader.Node, h)
	}
	return grantWrite(t, ctx, e.s, e.stk, e.ctl, v.ID, leader.Address, leader.Node)
}

// logHeldBy logs the volumes of the group whose data is on node's server.
func logHeldBy(t *testing.T, ctx context.Context, ctl *dpclient.Client, node string) {
	t.Helper()
	vs, err := ctl.GroupVolumes(ctx)
	must(t, err)
	var held []string
	for _, v := range vs {
		if v.Server == node {
			held = append(held, v.ID)
		}
	}
	t.Logf("%s's server holds %d volume(s) %v: while it is silent they are unknown grants of %s, which its fence leaves alone", node, len(held), held, node)
}

// groupHolder is the node of the server the control group records as
// holding volume id's data.
func groupHolder(t *testing.T, ctx context.Context, ctl *dpclient.Client, id string) string {
	t.Helper()
	vs, err := ctl.GroupVolumes(ctx)
	must(t, err)
	var seen []string
	for _, v := range vs {
		if v.ID == id {
			if v.Server == "" {
				t.Fatalf("the group records no server holding %s", id)
			}
			return v.Server
		}
		seen = append(seen, v.ID)
	}
	t.Fatalf("the group's volumes %s lack %s", strings.Join(seen, ", "), id)
	return ""
}

// startLedgerWriter runs a ledger writer on node (as its process, so a power
// cut of the node kills it) on pod's volume at target, in a mount namespace
// of its own as a container's, and waits until it acknowledged 10 records.
// It returns the ledger's path on the host.
func startLedgerWriter(t *testing.T, s *sandbox.Sandbox, node string, pod corev1.Pod, target string) string {
	t.Helper()
	return startLedgerWriterIn(t, t.TempDir(), s, node, pod, target)
}

// startLedgerWriterIn is startLedgerWriter with the ledger in dir, for a
// writer that outlives the test that starts it.
func startLedgerWriterIn(t *testing.T, dir string, s *sandbox.Sandbox, node string, pod corev1.Pod, target string) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", sandbox.BinVigilSandbox))
	must(t, err)
	file := filepath.Join(dir, "ledger.log")
	must(t, s.RunOnNode(node, sandbox.ProcessSpec{Name: "writer-" + pod.Name, Args: []string{bin, "writer",
		"--dir", target, "--pod-uid", string(pod.UID), "--ledger", file, "--own-mount-namespace"}}))
	must(t, sandbox.Poll(context.Background(), 30*time.Second, "10 records acknowledged by the writer on "+node, func(context.Context) (bool, string, error) {
		acks, _ := ledger.ReadLedger(file)
		return len(acks) >= 10, fmt.Sprintf("%d acknowledged", len(acks)), nil
	}, nil))
	return file
}
