package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/kubelet"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// writer is the writer of one pod: it runs on the pod's node (RunOnNode) on
// the target path the kubelet stand-in published, and acknowledges records in
// its ledger on the host.
type writer struct {
	Pod     types.UID `json:"pod"`
	PodName string    `json:"podName"`
	Claim   string    `json:"claim"`
	Handle  string    `json:"volume"`
	Node    string    `json:"node"`
	Target  string    `json:"target"`
	Ledger  string    `json:"ledger"`
	Started time.Time `json:"started"`
	// Stopped: the pod is gone and its node could see it; the writer was killed,
	// as the kubelet kills a deleted pod's containers.
	Stopped bool `json:"stopped"`
}

func (w *writer) proc() string { return "writer-" + string(w.Pod) }

// podClaim is the workload claim a pod mounts ("" if none).
func podClaim(p *corev1.Pod) string {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

// mountPoints is the set of mount points of the host (nodes share its mounts).
func mountPoints() map[string]bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	out := map[string]bool{}
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			out[unescape(f[4])] = true
		}
	}
	return out
}

// mountID is the mount ID of the mount at path (the last, topmost one), ""
// when nothing is mounted there.
func mountID(path string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	id := ""
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescape(f[4]) == path {
			id = f[0]
		}
	}
	return id
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// nodeDir is the directory of a sandbox node (VIGIL_NODE_DIR).
func (h *Harness) nodeDir(node string) string { return filepath.Join(h.sb.WorkDir(), "nodes", node) }

// targetPath is where the kubelet stand-in of node publishes pv for pod.
func (h *Harness) targetPath(node string, pod types.UID, pv string) string {
	return kubelet.TargetPath(filepath.Join(h.nodeDir(node), "kubelet"), pod, pv, false)
}

// reconcileWriters starts a writer for every running workload pod whose volume
// is published and whose writer does not run, and stops the writer of a pod
// that is gone or being deleted once its node can see that (powered, not cut
// off from the API server): a zombie's writer keeps writing.
func (h *Harness) reconcileWriters(ctx context.Context) {
	pods, err := h.workloadPods(ctx)
	if err != nil {
		return // the API server may be restarting: next round
	}
	mounts := mountPoints()
	live := map[types.UID]bool{}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
			continue
		}
		live[p.UID] = true
		ci, ok := h.claims[podClaim(p)]
		if !ok || h.off[p.Spec.NodeName] {
			continue
		}
		target := h.targetPath(p.Spec.NodeName, p.UID, ci.PV)
		if !mounts[target] {
			continue
		}
		w := h.writers[p.UID]
		if w == nil {
			w = &writer{Pod: p.UID, PodName: p.Name, Claim: podClaim(p), Handle: ci.Handle, Node: p.Spec.NodeName,
				Target: target, Ledger: filepath.Join(h.dir, "ledger", string(p.UID)+".ledger")}
			h.writers[p.UID] = w
		}
		if pid, err := h.sb.ProcessPID(w.Node, w.proc()); err == nil && pid != 0 {
			continue
		}
		err := h.sb.RunOnNode(w.Node, sandbox.ProcessSpec{Name: w.proc(), Args: []string{
			filepath.Join(h.bin, sandbox.BinVigilSandbox), "writer", "--dir", target, "--pod-uid", string(p.UID),
			"--ledger", w.Ledger, "--own-mount-namespace"}})
		if err != nil {
			h.Logf("chaos: start writer of %s on %s: %v", p.Name, w.Node, err)
			continue
		}
		w.Started = time.Now()
	}
	for _, w := range h.writers {
		if live[w.Pod] || w.Stopped || h.off[w.Node] || h.cut[w.Node] == sandbox.PartitionAll || h.cut[w.Node] == sandbox.PartitionAPIServer {
			continue
		}
		if pid, err := h.sb.ProcessPID(w.Node, w.proc()); err == nil && pid != 0 {
			if err := h.sb.KillProcess(w.Node, w.proc()); err != nil {
				h.Logf("chaos: stop writer of gone pod %s on %s: %v", w.PodName, w.Node, err)
				continue
			}
		}
		w.Stopped = true // killed now, or already gone with a power cut
	}
}

// current is the writer of each claim's running pod: the last started writer
// of the claim that is not stopped.
func (h *Harness) current() map[string]*writer {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]*writer{}
	for _, w := range h.writers {
		if w.Stopped || w.Started.IsZero() {
			continue
		}
		if c := out[w.Claim]; c == nil || w.Started.After(c.Started) {
			out[w.Claim] = w
		}
	}
	return out
}

// writersOf is every writer a claim has had, oldest first.
func (h *Harness) writersOf(claim string) []*writer {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*writer
	for _, w := range h.writers {
		if w.Claim == claim && !w.Started.IsZero() {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// lastAck is the time of the last record w acknowledged (zero if none).
func lastAck(w *writer) time.Time {
	acks, err := ledger.ReadLedger(w.Ledger)
	if err != nil || len(acks) == 0 {
		return time.Time{}
	}
	return acks[len(acks)-1].Time
}

// awaitProgress waits until every claim has a running pod whose writer
// acknowledged a record after since.
func (h *Harness) awaitProgress(ctx context.Context, since time.Time, bound time.Duration) error {
	return sandbox.Poll(ctx, bound, "every writer acknowledging records", func(context.Context) (bool, string, error) {
		cur := h.current()
		var behind []string
		for claim := range h.claims {
			w := cur[claim]
			switch {
			case w == nil:
				behind = append(behind, claim+": no writer")
			case !lastAck(w).After(since):
				behind = append(behind, fmt.Sprintf("%s: pod %s on %s silent since %s", claim, w.PodName, w.Node,
					lastAck(w).Format("15:04:05.000")))
			}
		}
		sort.Strings(behind)
		return len(behind) == 0, strings.Join(behind, "; "), nil
	}, h.describe)
}

// describe is the diagnostics of a failed wait: pods, nodes, attachments.
func (h *Harness) describe(ctx context.Context) string {
	c := h.sb.Client()
	return sandbox.DescribePods(ctx, c, namespace, "") + sandbox.DescribeNodes(ctx, c) + h.podDeletes()
}

// podDeletes lists, from the API server's audit log, who deleted the
// workload's pods in the last five minutes: a replacement deleted by something
// other than Vigil shows up there.
func (h *Harness) podDeletes() string {
	evs, err := h.sb.AuditEvents()
	if err != nil {
		return "pod deletions: " + err.Error() + "\n"
	}
	var b strings.Builder
	since := time.Now().Add(-5 * time.Minute)
	for _, e := range evs {
		if e.Resource != "pods" || e.Namespace != namespace || e.Subresource != "" || e.Time.Before(since) ||
			(e.Verb != "delete" && e.Verb != "deletecollection") {
			continue
		}
		fmt.Fprintf(&b, "  %s %s %s pods %s/%s: %d\n", e.Time.Format("15:04:05.000"), e.User, e.Verb, e.Namespace, e.Name, e.Code)
	}
	if b.Len() == 0 {
		return "pod deletions in the last 5 minutes (audit log): none\n"
	}
	return "pod deletions in the last 5 minutes (audit log):\n" + b.String()
}
