package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

// recoveryWatch marks on a timeline, as the test sees them, the steps of a
// recovery from a node's power cut that Kubernetes' objects show: the
// victim's Ready condition and taints, the acting manager's Lease changing
// hands, the old pod going, the old VolumeAttachment going, the replacement
// created, scheduled, its VolumeAttachment created and attached, the volume
// in the new node's status.volumesInUse (the kubelet's node-status sync),
// published (its target path mounted), the container started, and its
// writer's first acknowledged record. It polls every 200 ms, so each time is
// the first poll that saw the step: at most 0.2 s (plus the API's answer)
// late. Together with the manager's own record (markRecovery) it says where
// the seconds of a recovery go.
type recoveryWatch struct {
	c kubernetes.Interface
	// ns and selector find the application's pods; oldUID is the pod on
	// victim, pv its volume's PersistentVolume and handle its volume handle.
	ns, selector, oldUID, victim, pv, handle string
	// leaseNS and lease name the acting manager's Lease; "" when no Lease
	// is watched.
	leaseNS, lease string
	// podVolumeDir is where the kubelet of node publishes the volume of a
	// pod (its target path, a mount point once published).
	podVolumeDir func(node, podUID string) string
	// ledger is the writer's ledger file of a pod; nil when the pods have
	// no writer.
	ledger func(podUID string) string

	tl     *timeline
	holder string
	cancel context.CancelFunc
	done   chan struct{}
}

// start polls until stop; tl is the timeline it marks (safe for the test to
// mark too).
func (w *recoveryWatch) start(tl *timeline) {
	w.tl = tl
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan struct{})
	if w.lease != "" {
		if l, err := w.c.CoordinationV1().Leases(w.leaseNS).Get(ctx, w.lease, metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
			w.holder = *l.Spec.HolderIdentity
		}
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			w.poll(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// stop ends the polling (after one last poll) and waits for it.
func (w *recoveryWatch) stop() {
	if w.cancel == nil {
		return
	}
	w.cancel()
	<-w.done
}

func (w *recoveryWatch) mark(event string) { w.tl.mark(event, time.Now()) }

func (w *recoveryWatch) poll(ctx context.Context) {
	if n, err := w.c.CoreV1().Nodes().Get(ctx, w.victim, metav1.GetOptions{}); err == nil {
		w.victimNode(n)
	}
	if w.lease != "" {
		if l, err := w.c.CoordinationV1().Leases(w.leaseNS).Get(ctx, w.lease, metav1.GetOptions{}); err == nil &&
			l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != w.holder {
			w.mark(fmt.Sprintf("Lease %s taken over by %s (held by %s at the cut)", w.lease, *l.Spec.HolderIdentity, w.holder))
		}
	}
	pods, err := w.c.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: w.selector})
	if err != nil {
		return
	}
	var repl *corev1.Pod
	oldSeen := false
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case string(p.UID) == w.oldUID:
			oldSeen = true
			if p.DeletionTimestamp != nil {
				w.mark("old pod " + p.Name + " terminating (deletionTimestamp set)")
			}
		case p.DeletionTimestamp == nil:
			repl = p
		}
	}
	if !oldSeen {
		w.mark("old pod gone from the API (force-deleted)")
	}
	w.attachments(ctx, repl)
	if repl != nil {
		w.replacement(ctx, repl)
	}
}

func (w *recoveryWatch) victimNode(n *corev1.Node) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			w.mark(fmt.Sprintf("Kubernetes: %s Ready=%s (node-monitor grace)", w.victim, c.Status))
		}
	}
	for _, tn := range n.Spec.Taints {
		switch tn.Key {
		case vigil.FencedTaintKey:
			w.mark(w.victim + " tainted " + vigil.FencedTaintKey)
		case corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady:
			w.mark(fmt.Sprintf("Kubernetes: %s tainted %s:%s", w.victim, tn.Key, tn.Effect))
		}
	}
}

// attachments marks the old node's VolumeAttachment of pv going and the
// replacement's node's appearing and attached.
func (w *recoveryWatch) attachments(ctx context.Context, repl *corev1.Pod) {
	vas, err := w.c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	oldSeen := false
	for _, va := range vas.Items {
		if deref(va.Spec.Source.PersistentVolumeName) != w.pv {
			continue
		}
		switch {
		case va.Spec.NodeName == w.victim:
			oldSeen = true
		case repl != nil && va.Spec.NodeName == repl.Spec.NodeName:
			w.mark("VolumeAttachment created for " + va.Spec.NodeName + " (attach-detach controller)")
			if va.Status.Attached {
				w.mark("VolumeAttachment attached on " + va.Spec.NodeName + " (csi-attacher, ControllerPublish: the grant)")
			}
		}
	}
	if !oldSeen {
		w.mark("old node's VolumeAttachment gone")
	}
}

func (w *recoveryWatch) replacement(ctx context.Context, p *corev1.Pod) {
	w.mark("replacement " + p.Name + " created (uid " + string(p.UID) + ")")
	node := p.Spec.NodeName
	if node == "" {
		return
	}
	w.mark("replacement scheduled on " + node)
	if n, err := w.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		want := corev1.UniqueVolumeName("kubernetes.io/csi/" + vigil.DriverName + "^" + w.handle)
		if slices.Contains(n.Status.VolumesInUse, want) {
			w.mark(node + "'s kubelet reported the volume in status.volumesInUse (its node-status sync)")
		}
	}
	if w.podVolumeDir != nil && mountedAt(w.podVolumeDir(node, string(p.UID))) {
		w.mark("volume staged and published on " + node + " (target path mounted)")
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			w.mark("replacement's container started (" + cs.Name + ")")
		}
	}
	if w.ledger != nil {
		if acks, err := ledger.ReadLedger(w.ledger(string(p.UID))); err == nil && len(acks) > 0 {
			w.mark("replacement's writer acknowledged its first record")
		}
	}
}

// mountedAt reports whether path is a mount point of this process's mount
// namespace (the host's, where real nodes' kubelet mounts propagate).
func mountedAt(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	want := []byte(filepath.Clean(path))
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := bytes.Fields(line); len(f) > 4 && bytes.Equal(f[4], want) {
			return true
		}
	}
	return false
}
