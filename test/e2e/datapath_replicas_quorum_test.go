package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// testReplicaQuorumLoss: two of three replicas' nodes cut under the writer
// of ReplicaPowerCut's volume (whose first cut replica is back, out of
// sync), then one of them back.
//
//  1. The nodes of both replicas other than the holder are powered off
//     (cutPower): the in-sync one and the out-of-sync one. The holder's
//     server is the group's last, so the control group has lost its
//     majority too. No write can be acknowledged: the in-sync replica does
//     not take it and no committed change can take it out of sync. The
//     writer stalls, then its records fail (not acknowledged) once the
//     engine gives the write up; a read through the mount returns an error
//     or the acknowledged data.
//  2. The in-sync replica's node is powered on: the group has a majority
//     again. The writer's ext4 went read-only at the I/O error (an error on
//     its journal is fatal to it), so the application restarts as it would
//     after the error: a new pod on the same node, the volume staged again,
//     a new writer. Its records are acknowledged, and every record either
//     writer acknowledged is on the volume.
func (e *serversEnv) testReplicaQuorumLoss(t *testing.T) {
	r := e.replicated
	if r == nil {
		t.Fatal("ReplicaPowerCut left no volume of three copies")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	now := groupVolume(t, ctx, e.ctl, r.before.ID)
	other := ""
	for _, n := range now.InSync {
		if n != now.Server {
			other = n
		}
	}
	if other == "" || len(now.InSync) != 2 {
		t.Fatalf("volume %s: in sync %v (holder %s); want the holder and one more", now.ID, now.InSync, now.Server)
	}
	leader := waitDatapathLeader(t, ctx, e.s, "")
	t.Logf("volume %s: in sync %v at member epoch %d, holder %s; the leader is %s; cutting %s (in sync) and %s (out of sync)",
		now.ID, now.InSync, now.MemberEpoch, now.Server, leader.Node, other, r.victim)

	start := time.Now()
	cutPower(t, e.s, other)
	cutPower(t, e.s, r.victim)
	failedAt := waitWriterFails(t, e.s, r, start)
	t.Logf("the writer's first failed record %.2fs after the cut: %s", failedAt.Sub(start).Seconds(), lastLogLine(e.s, r.writerNode, "writer-"+r.pod.Name, "not acknowledged"))
	t.Logf("the writer's engine on %s: %s", r.writerNode, lastLogLine(e.s, r.writerNode, sandbox.StackEngine, "no quorum"))
	readDuringLoss(t, r)

	back := time.Now()
	restorePower(t, ctx, e.s, other)
	t.Logf("%s powered on, the group has a majority again %.2fs later", other, time.Since(back).Seconds())
	a, err := ledger.CheckFile(r.ledgerFile, start, back)
	must(t, err)
	if len(a.Acks) == 0 {
		t.Fatalf("the writer's ledger %s holds no acknowledged record: nothing to judge", r.ledgerFile)
	}
	if n := a.AckedBetween(start.Add(dpclient.DefaultReplicaDeadline), back); n > 0 {
		t.Errorf("the writer acknowledged %d records while two of three replicas were cut: %s", n, a)
	}
	pod, target, ledgerFile := e.restartWriter(t, ctx, r)
	t.Logf("FIGURE two of three replicas' nodes cut (%s in sync, %s out of sync; the group's majority with them) under a writer on %s: no record acknowledged, the first failed %.2fs after the cut (the engine's --io-timeout); %s back: the application's pod started again (its ext4 read-only after the error) and writing %.2fs after the power-on",
		other, r.victim, r.writerNode, failedAt.Sub(start).Seconds(), other, time.Since(back).Seconds())
	checkOnVolume(t, r.ledgerFile, target, r.pod)
	checkOnVolume(t, ledgerFile, target, pod)
	restorePower(t, ctx, e.s, r.victim)
}

// restartWriter does what a crashed application's restart does once its
// file system went read-only after an I/O error: the writer is killed, its
// pod deleted (the volume unpublished and unstaged) and a new pod started
// on the same node (staged again: the journal replayed), with a new writer
// whose ledger it returns with the pod and its target path.
func (e *serversEnv) restartWriter(t *testing.T, ctx context.Context, r *replicatedRun) (corev1.Pod, string, string) {
	t.Helper()
	c := e.s.Client()
	// The writer may be in an uninterruptible fsync whose write the engine
	// still holds (up to its --io-timeout, 30 s, when the quorum came back
	// during it): SIGKILL ends it once that returns.
	must(t, sandbox.Poll(ctx, 45*time.Second, "the old writer gone after SIGKILL", func(context.Context) (bool, string, error) {
		err := e.s.KillProcess(r.writerNode, "writer-"+r.pod.Name)
		return err == nil, fmt.Sprint(err), nil
	}, nil))
	zero := int64(0)
	must(t, c.CoreV1().Pods(serversNS).Delete(ctx, r.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	must(t, sandbox.Poll(ctx, 60*time.Second, "the old pod's volume unpublished", func(context.Context) (bool, string, error) {
		return !slices.Contains(mountsUnder(t, nodeDir(e.s, r.writerNode)), r.target), "", nil
	}, describeStack(e.s)))
	w := sandbox.Workload{Namespace: serversNS, Name: replicaClaim + "-again", Nodes: []string{r.writerNode}, Claims: []string{replicaClaim}}
	_, err := c.CoreV1().Pods(serversNS).Create(ctx, w.Pod(), metav1.CreateOptions{})
	must(t, err)
	pods, err := sandbox.WaitPodsRunning(ctx, c, serversNS, w.Selector(), 1, 60*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, describeStack(e.s)(ctx))
	}
	target := waitPublished(t, ctx, e.s, r.writerNode, pods[0], "pv-"+replicaClaim)
	dir := filepath.Join(e.dir, "again")
	must(t, os.MkdirAll(dir, 0o755))
	return pods[0], target, startLedgerWriterIn(t, dir, e.s, r.writerNode, pods[0], target)
}

// waitWriterFails waits up to 90 s until the writer's log says a record
// failed after since, and returns when (the poll's time).
func waitWriterFails(t *testing.T, s *sandbox.Sandbox, r *replicatedRun, since time.Time) time.Time {
	t.Helper()
	log := filepath.Join(s.NodeDir(r.writerNode), "writer-"+r.pod.Name+".log")
	seen := countLines(log, "not acknowledged")
	var at time.Time
	must(t, sandbox.Poll(context.Background(), 90*time.Second, "a failed record of the writer", func(context.Context) (bool, string, error) {
		a, _ := ledger.CheckFile(r.ledgerFile, since, time.Now())
		if countLines(log, "not acknowledged") > seen {
			at = time.Now()
			return true, "", nil
		}
		return false, a.String(), nil
	}, nil))
	return at
}

// readDuringLoss reads the writer's records through the mount (O_DIRECT)
// while the volume has no quorum: within 60 s it must return an error or
// every record acknowledged so far.
func readDuringLoss(t *testing.T, r *replicatedRun) {
	t.Helper()
	acks, err := ledger.ReadLedger(r.ledgerFile)
	must(t, err)
	type read struct {
		recs ledger.Records
		err  error
	}
	done := make(chan read, 1)
	t0 := time.Now()
	go func() {
		recs, err := ledger.ReadRecords(filepath.Join(r.target, ledger.RecordsFile(string(r.pod.UID))))
		done <- read{recs, err}
	}()
	select {
	case got := <-done:
		if got.err != nil {
			t.Logf("a read through the mount with no quorum: an error after %.2fs: %v", time.Since(t0).Seconds(), got.err)
			return
		}
		res := ledger.Verify(ledger.Pod{UID: string(r.pod.UID), Node: r.writerNode, Acks: acks, Found: got.recs})
		if !res.OK() {
			t.Errorf("a read through the mount with no quorum: %s; want an error or every acknowledged record", res)
		}
		t.Logf("a read through the mount with no quorum, after %.2fs: %s", time.Since(t0).Seconds(), res)
	case <-time.After(60 * time.Second):
		t.Errorf("a read through the mount with no quorum answered nothing in 60 s; want an error or the acknowledged data")
	}
}

// countLines counts the lines of file that contain s.
func countLines(file, s string) int {
	b, _ := os.ReadFile(file)
	return strings.Count(string(b), s)
}

// lastLogLine is the last line of process name's log on node that contains s,
// or a note that none does.
func lastLogLine(s *sandbox.Sandbox, node, name, sub string) string {
	file := filepath.Join(s.NodeDir(node), name+".log")
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return fmt.Sprintf("no line of %s has %q", file, sub)
}
