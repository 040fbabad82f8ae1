package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// checkData verifies the ledger of every writer a claim has had against the
// records on the claim's volume, read (O_DIRECT) through the mount of the
// claim's current pod: no acknowledged record lost, none written by a node
// while the datapath had it fenced.
func (h *Harness) checkData() ([]ledger.Result, []string) {
	var results []ledger.Result
	var violations []string
	cur := h.current()
	claims := make([]string, 0, len(h.claims))
	for c := range h.claims {
		claims = append(claims, c)
	}
	sort.Strings(claims)
	for _, claim := range claims {
		res, v := h.checkClaim(claim, cur[claim])
		results, violations = append(results, res...), append(violations, v...)
	}
	return results, violations
}

// claimReadBound bounds the wait for a claim's volume to be mounted for a
// read (a replacement deleted and recreated right after the recovery leaves it
// unmounted for a moment).
const claimReadBound = time.Minute

// checkClaim reads every writer's records of claim through the mount of its
// current writer c. The read counts only if that mount was there, the same
// one, before and after it: a path read while unmounted is an empty directory
// of the host, and every record would look lost (seen once: the kubelet
// stand-in unpublished and published db-1 again under the check).
func (h *Harness) checkClaim(claim string, c *writer) ([]ledger.Result, []string) {
	deadline := time.Now().Add(claimReadBound)
	for {
		if c != nil {
			if id := mountID(c.Target); id != "" {
				var results []ledger.Result
				var violations []string
				for _, w := range h.writersOf(claim) {
					res, err := h.verifyWriter(c, w)
					if err != nil {
						violations = append(violations, fmt.Sprintf("claim %s, pod %s: %v", claim, w.PodName, err))
						continue
					}
					results = append(results, res)
					if !res.OK() {
						violations = append(violations, fmt.Sprintf("claim %s (volume %s, read on %s): %s", claim, w.Handle, c.Node, res))
					}
				}
				if mountID(c.Target) == id {
					return results, violations
				}
			}
		}
		if time.Now().After(deadline) {
			if c == nil {
				return nil, []string{fmt.Sprintf("claim %s: no running pod to read its volume through", claim)}
			}
			return nil, []string{fmt.Sprintf("claim %s: the volume of its running pod %s is not mounted (or was remounted under every read) at %s for %s",
				claim, c.PodName, c.Target, claimReadBound)}
		}
		time.Sleep(500 * time.Millisecond)
		c = h.current()[claim]
	}
}

// verifyWriter checks w's ledger against its records file as seen through the
// mount of through, the claim's current writer.
func (h *Harness) verifyWriter(through, w *writer) (ledger.Result, error) {
	acks, err := ledger.ReadLedger(w.Ledger)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ledger.Result{}, err
	}
	found, err := readRecords(filepath.Join(through.Target, ledger.RecordsFile(string(w.Pod))), readBound)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return ledger.Result{}, fmt.Errorf("read records through %s: %w", through.Target, err)
	}
	return ledger.Verify(ledger.Pod{UID: string(w.Pod), Node: w.Node, Acks: acks, Found: found,
		Fenced: h.hist.spans(w.Handle, w.Node)}), nil
}

// readBound bounds a read of a records file: a volume whose FUSE server is
// gone can block a read in the kernel for good.
const readBound = 30 * time.Second

// readRecords is ledger.ReadRecords given up after bound (the read itself may
// stay blocked until the sandbox's teardown aborts the FUSE connection).
func readRecords(path string, bound time.Duration) (ledger.Records, error) {
	type result struct {
		r   ledger.Records
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := ledger.ReadRecords(path)
		ch <- result{r, err}
	}()
	select {
	case res := <-ch:
		return res.r, res.err
	case <-time.After(bound):
		return ledger.Records{}, fmt.Errorf("no answer in %s (the volume hangs)", bound)
	}
}

// placement is, per claim, the UID of the pod whose writer is current.
func (h *Harness) placement() map[string]string {
	out := map[string]string{}
	for claim, w := range h.current() {
		out[claim] = string(w.Pod) + "@" + w.Node
	}
	return out
}

// checkNoFailover: every claim is still served by the same pod on the same
// node, and the datapath fenced nobody.
func (h *Harness) checkNoFailover(before map[string]string, fencesBefore map[string]int) []string {
	var v []string
	after := h.placement()
	for claim, was := range before {
		if now := after[claim]; now != was {
			v = append(v, fmt.Sprintf("claim %s failed over (pod@node %s, now %q) though the fault expects no failover", claim, was, now))
		}
	}
	for node, n := range fencesBefore {
		if got := h.hist.fences(node); got != n {
			v = append(v, fmt.Sprintf("%s was fenced %d times during a fault that expects no failover", node, got-n))
		}
	}
	sort.Strings(v)
	return v
}

// fenceCounts is h.hist.fences of every node.
func (h *Harness) fenceCounts() map[string]int {
	out := map[string]int{}
	for i := range sandboxNodes {
		out[sandbox.NodeName(i)] = h.hist.fences(sandbox.NodeName(i))
	}
	return out
}

// checkNodes waits up to returnBound for every node that is powered and not cut
// off to be Ready, without Vigil's fenced taint, and without a mount, FUSE disk or
// loop device that no pod of the node explains; what is still wrong then is a
// violation.
func (h *Harness) checkNodes(ctx context.Context) []string {
	var last []string
	err := sandbox.Poll(ctx, returnBound, "every node Ready, untainted and clean", func(ctx context.Context) (bool, string, error) {
		last = h.nodeProblems(ctx, "")
		return len(last) == 0, strings.Join(last, "; "), nil
	}, nil)
	if err == nil {
		return nil
	}
	return last
}

// nodeProblems is what is wrong with the nodes now. Vigil's fenced taint on
// taintOK is no problem: the engine keeps it while a pod the fence did not
// reap (opted out, not covered) still has its volume published there.
func (h *Harness) nodeProblems(ctx context.Context, taintOK string) []string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := h.sb.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"list nodes: " + err.Error()}
	}
	pods, err := h.sb.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"list pods: " + err.Error()}
	}
	var out []string
	for _, n := range nodes.Items {
		h.mu.Lock()
		away := h.off[n.Name] || h.cut[n.Name] != ""
		h.mu.Unlock()
		if away {
			continue
		}
		if st := sandbox.NodeReadyStatus(&n); st != corev1.ConditionTrue {
			out = append(out, fmt.Sprintf("%s Ready=%s", n.Name, st))
		}
		for _, t := range n.Spec.Taints {
			if t.Key == vigil.FencedTaintKey && n.Name != taintOK {
				out = append(out, fmt.Sprintf("%s still tainted %s", n.Name, vigil.FencedTaintKey))
			}
		}
		out = append(out, h.orphans(n.Name, pods.Items)...)
	}
	return out
}

// orphans lists the mounts, FUSE disks and loop devices of node that belong to
// no pod bound to it: pod target paths of pods not there, staging mounts and
// FUSE disks of volumes no pod there uses, and anything else mounted under the
// node's directory.
func (h *Harness) orphans(node string, pods []corev1.Pod) []string {
	want := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ci := range h.claimsOf(&p) {
			want[h.targetPath(node, p.UID, ci.PV)] = true
			want[stagingPath(h.nodeDir(node), ci.Handle)] = true
			want[diskDir(h.nodeDir(node), ci.Handle)] = true
		}
	}
	var out []string
	prefix := h.nodeDir(node) + "/"
	for mp := range mountPoints() {
		if strings.HasPrefix(mp, prefix) && !want[mp] {
			out = append(out, fmt.Sprintf("%s: %s mounted, no pod of the node uses it", node, strings.TrimPrefix(mp, prefix)))
		}
	}
	for dev, backing := range loopDevices() {
		if strings.HasPrefix(backing, prefix) && !want[filepath.Dir(backing)] {
			out = append(out, fmt.Sprintf("%s: %s backed by %s, no pod of the node uses it", node, dev, strings.TrimPrefix(backing, prefix)))
		}
	}
	sort.Strings(out)
	return out
}

// claimsOf is the workload claims p mounts.
func (h *Harness) claimsOf(p *corev1.Pod) map[string]claimInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]claimInfo{}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil || p.Namespace != namespace {
			continue
		}
		if ci, ok := h.claims[v.PersistentVolumeClaim.ClaimName]; ok {
			out[v.PersistentVolumeClaim.ClaimName] = ci
		}
	}
	return out
}

// stagingPath is where the kubelet stand-in of the node in nodeDir stages a
// Filesystem volume of Vigil's driver.
func stagingPath(nodeDir, handle string) string {
	sum := sha256.Sum256([]byte(handle))
	return filepath.Join(nodeDir, "kubelet", "plugins", "kubernetes.io", "csi", vigil.DriverName, hex.EncodeToString(sum[:]), "globalmount")
}

// diskDir is where the engine of the node in nodeDir mounts the FUSE disk of a
// volume: STATE_DIR/disks/<first 12 bytes of sha256(volume id), hex> (the
// engine's layout, engine-node/stack.go), with the sandbox's STATE_DIR
// nodeDir/engine.
func diskDir(nodeDir, handle string) string {
	sum := sha256.Sum256([]byte(handle))
	return filepath.Join(nodeDir, "engine", "disks", hex.EncodeToString(sum[:12]))
}

// loopDevices maps each bound loop device to its backing file.
func loopDevices() map[string]string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		out["/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f)))] = strings.TrimSpace(string(b))
	}
	return out
}
