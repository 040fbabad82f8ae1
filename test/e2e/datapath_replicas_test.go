package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// replicaClaim names the claim, PersistentVolume and pod of
// testReplicaPowerCut's volume of three copies.
const replicaClaim = "replicated"

// replicaStallTarget is the longest stall of a writer a replica's power cut
// should cost (reported, not asserted: the machine is shared).
const replicaStallTarget = 3 * time.Second

// replicatedRun is what testReplicaPowerCut leaves to the cases after it:
// its volume of three copies, written on.
type replicatedRun struct {
	before     datapath.GroupVolume // as created: three replicas in sync
	victim     string               // the node cut first, its replica out of sync
	pod        corev1.Pod
	target     string // the pod's volume's target path on its node
	ledgerFile string
	writerNode string
}

// testReplicaPowerCut: the power cut of a node holding one replica of a
// volume of three copies, under a writer on a node with no server; the write
// path of the replicas alone (the cut node neither holds the volume nor
// leads the group), through the writer node's engine as any Vigil volume.
//
//  1. The volume is created with a copy on each server (CreateReplicated,
//     all in sync) and bound to a claim through a PersistentVolume of its
//     id; a pod on node-4 mounts it, and a ledger writer appends fsync'd
//     records and acknowledges each once fsync returned.
//  2. The node of a replica that neither holds the volume nor leads is
//     powered off as a power loss does it (cutPower: its link silent, then
//     its processes killed, so nothing answers, not even a reset). The
//     writer's engine takes that replica out of sync by a committed change
//     (the member epoch one up) once it is past the replica deadline (2 s),
//     and goes on: every record acknowledged, none failed; its longest
//     stall is the figure.
//  3. The node is powered on. Resync is not built: its replica stays out of
//     sync, the writer goes on, and every acknowledged record is on the
//     volume as a direct read through the mount finds it.
func (e *serversEnv) testReplicaPowerCut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	vol, err := e.ctl.CreateReplicated(ctx, "replicated-cut", 64<<20, datapath.AccessRWO, 3)
	must(t, err)
	r := &replicatedRun{before: groupVolume(t, ctx, e.ctl, vol.ID), writerNode: sandbox.NodeName(3)}
	before := r.before
	if len(before.Replicas) != 3 || !slices.Equal(before.InSync, before.Replicas) {
		t.Fatalf("volume %s: replicas %v, in sync %v; want three, all in sync", vol.ID, before.Replicas, before.InSync)
	}
	r.pod, r.target = e.mountReplicated(t, ctx, vol.ID, r.writerNode)
	r.ledgerFile = startLedgerWriterIn(t, e.dir, e.s, r.writerNode, r.pod, r.target)
	t.Logf("volume %s: replicas %v (holder %s), member epoch %d; mounted on %s and written by its ledger writer %.1fs after its create",
		vol.ID, before.Replicas, before.Server, before.MemberEpoch, r.writerNode, time.Since(t0).Seconds())

	leader := waitDatapathLeader(t, ctx, e.s, "")
	for _, n := range before.Replicas {
		if n != before.Server && n != leader.Node && r.victim == "" {
			r.victim = n
		}
	}
	t.Logf("the group's leader is %s, the volume's holder %s: the power cut is %s's, a replica of neither", leader.Node, before.Server, r.victim)

	start := time.Now()
	cutPower(t, e.s, r.victim)
	out := waitOutOfSync(t, ctx, e.ctl, vol.ID, r.victim)
	outAt := time.Since(start)
	if out.MemberEpoch != before.MemberEpoch+1 || !slices.Contains(out.Replicas, r.victim) {
		t.Errorf("volume %s after the cut: replicas %v, in sync %v at member epoch %d; want %s still a replica, out of sync, at member epoch %d",
			vol.ID, out.Replicas, out.InSync, out.MemberEpoch, r.victim, before.MemberEpoch+1)
	}
	waitAckedSince(t, r.ledgerFile, time.Now(), 20)
	cut := auditWriter(t, r.ledgerFile, start, time.Now(), "the power cut")
	t.Logf("FIGURE power cut of %s, a replica of a volume of three copies (neither its holder %s nor the leader %s), under a writer on %s: longest stall %.2fs (target %.0f s), no record failed (%d acknowledged in %.1fs); out of sync at member epoch %d in the group's view %.2fs after the cut",
		r.victim, before.Server, leader.Node, r.writerNode, cut.Stall.Seconds(), replicaStallTarget.Seconds(), cut.Observed, cut.To.Sub(cut.From).Seconds(), out.MemberEpoch, outAt.Seconds())
	if cut.Stall > replicaStallTarget {
		t.Logf("the longest stall %.2fs is past the %.0f s target", cut.Stall.Seconds(), replicaStallTarget.Seconds())
	}

	restorePower(t, ctx, e.s, r.victim)
	waitAckedSince(t, r.ledgerFile, time.Now(), 20)
	after := groupVolume(t, ctx, e.ctl, vol.ID)
	if slices.Contains(after.InSync, r.victim) {
		t.Errorf("volume %s: %s back in sync %v at member epoch %d with no resync built", vol.ID, r.victim, after.InSync, after.MemberEpoch)
	}
	t.Logf("%s powered on, its server caught up with the group; its replica stays out of sync (no resync yet): in sync %v at member epoch %d", r.victim, after.InSync, after.MemberEpoch)
	auditWriter(t, r.ledgerFile, start, time.Now(), "the cut and the return")
	checkOnVolume(t, r.ledgerFile, r.target, r.pod)
	e.replicated = r
}

// cutPower powers node off as a power loss does: its link goes silent first
// (every packet dropped, so nothing answers, not even a reset), then every
// process of the node is killed.
func cutPower(t *testing.T, s *sandbox.Sandbox, node string) {
	t.Helper()
	must(t, s.Partition(node, sandbox.PartitionAll))
	must(t, s.Stop(node))
}

// restorePower heals node's link, powers it on and waits until its
// datapath server is a follower caught up with the group.
func restorePower(t *testing.T, ctx context.Context, s *sandbox.Sandbox, node string) {
	t.Helper()
	must(t, s.Heal(node))
	must(t, s.Start(node))
	waitRejoined(t, ctx, s, node)
}

// mountReplicated binds volume id to a claim through a PersistentVolume of
// its id (as an administrator would a volume made outside Kubernetes), runs
// a pod with it on node and waits until it is attached and published there;
// it returns the pod and its volume's target path.
func (e *serversEnv) mountReplicated(t *testing.T, ctx context.Context, id, node string) (corev1.Pod, string) {
	t.Helper()
	c := e.s.Client()
	size := resource.MustParse("64Mi")
	pvName := "pv-" + replicaClaim
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              sandbox.StaticClaimClass,
			ClaimRef:                      &corev1.ObjectReference{Namespace: serversNS, Name: replicaClaim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: vigil.DriverName, VolumeHandle: id, FSType: "ext4"}},
		},
	}
	_, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	must(t, err)
	class := sandbox.StaticClaimClass
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: serversNS, Name: replicaClaim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &class,
			VolumeName:       pvName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	_, err = c.CoreV1().PersistentVolumeClaims(serversNS).Create(ctx, pvc, metav1.CreateOptions{})
	must(t, err)
	must(t, sandbox.WaitPVCsBound(ctx, c, serversNS, []string{replicaClaim}, 60*time.Second))
	w := sandbox.Workload{Namespace: serversNS, Name: replicaClaim, Nodes: []string{node}, Claims: []string{replicaClaim}}
	_, err = c.CoreV1().Pods(serversNS).Create(ctx, w.Pod(), metav1.CreateOptions{})
	must(t, err)
	pods, err := sandbox.WaitPodsRunning(ctx, c, serversNS, w.Selector(), 1, 60*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, describeStack(e.s)(ctx))
	}
	waitAttached(t, ctx, e.s, pvName, node)
	return pods[0], waitPublished(t, ctx, e.s, node, pods[0], pvName)
}

// groupVolume is volume id as the control group records it.
func groupVolume(t *testing.T, ctx context.Context, ctl *dpclient.Client, id string) datapath.GroupVolume {
	t.Helper()
	vs, err := ctl.GroupVolumes(ctx)
	must(t, err)
	for _, v := range vs {
		if v.ID == id {
			return v
		}
	}
	t.Fatalf("the group's volumes %+v lack %s", vs, id)
	return datapath.GroupVolume{}
}

// waitOutOfSync waits up to 30 s until the group records node's replica of
// volume id out of sync, and returns the volume as it records it then.
func waitOutOfSync(t *testing.T, ctx context.Context, ctl *dpclient.Client, id, node string) datapath.GroupVolume {
	t.Helper()
	var got datapath.GroupVolume
	must(t, sandbox.Poll(ctx, 30*time.Second, node+"'s replica of "+id+" out of sync", func(ctx context.Context) (bool, string, error) {
		vs, err := ctl.GroupVolumes(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		for _, v := range vs {
			if v.ID == id {
				got = v
				return !slices.Contains(v.InSync, node), fmt.Sprintf("in sync %v at member epoch %d", v.InSync, v.MemberEpoch), nil
			}
		}
		return false, "", fmt.Errorf("the group lost volume %s: %+v", id, vs)
	}, nil))
	return got
}

// waitAckedSince waits up to 30 s until the writer of ledgerFile acknowledged n
// records after since.
func waitAckedSince(t *testing.T, ledgerFile string, since time.Time, n int) {
	t.Helper()
	must(t, sandbox.Poll(context.Background(), 30*time.Second, fmt.Sprintf("%d records acknowledged", n), func(context.Context) (bool, string, error) {
		a, err := ledger.CheckFile(ledgerFile, since, time.Now())
		if err != nil {
			return false, "", err
		}
		return a.Observed >= n, a.String(), nil
	}, nil))
}

// auditWriter audits the writer's ledger over [from, to] and fails t unless
// it is gapless: no record failed.
func auditWriter(t *testing.T, ledgerFile string, from, to time.Time, what string) ledger.Audit {
	t.Helper()
	a, err := ledger.CheckFile(ledgerFile, from, to)
	must(t, err)
	if !a.Gapless() || a.Observed == 0 {
		t.Errorf("the writer over %s: %s; want every record acknowledged, none failed", what, a)
	}
	t.Logf("the writer over %s: %s", what, a)
	return a
}

// checkOnVolume fails t unless every record the writer acknowledged is in
// its file on the volume, read with O_DIRECT through the mount.
func checkOnVolume(t *testing.T, ledgerFile, target string, pod corev1.Pod) {
	t.Helper()
	acks, err := ledger.ReadLedger(ledgerFile)
	must(t, err)
	found, err := ledger.ReadRecords(filepath.Join(target, ledger.RecordsFile(string(pod.UID))))
	must(t, err)
	res := ledger.Verify(ledger.Pod{UID: string(pod.UID), Node: pod.Spec.NodeName, Acks: acks, Found: found})
	if !res.OK() || res.Acked == 0 {
		t.Errorf("the writer on the volume of three copies: %s; want every acknowledged record on it", res)
		return
	}
	t.Logf("the writer on the volume of three copies: %s", res)
}
