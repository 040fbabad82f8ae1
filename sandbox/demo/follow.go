package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vigil "github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/kubelet"
	"github.com/vigil-storage/vigil/sandbox/ledger"
)

var metav1CreateOptions = metav1.CreateOptions{}

// pollInterval is how often the follower looks at the cluster.
const pollInterval = 250 * time.Millisecond

// ErrDataLost: a data check found acknowledged records missing, or records of
// another pod, on a replacement's volume.
var ErrDataLost = errors.New("data check failed")

// writer is one writer the demo started, for one pod.
type writer struct {
	pod          string
	uid          types.UID
	node, ledger string
	started      time.Time
	checked      bool
}

// follower watches the demo workload and the recovery records, prints what
// changes, and runs a writer for each pod whose volume is published.
type follower struct {
	d       *demo
	rc      *v1alpha1.Client
	printed map[string]bool
	seen    map[types.UID]corev1.Pod
	writers []*writer
	pod     *corev1.Pod // the current pod: scheduled, not terminating
	recs    []v1alpha1.NodeRecovery
	pending []line    // printed by flush, in the order the steps happened
	origin  time.Time // the power cut of the auto mode; times are printed from it
}

func newFollower(d *demo) *follower {
	rc, _ := v1alpha1.NewForConfig(d.s.RESTConfig())
	return &follower{d: d, rc: rc, printed: map[string]bool{}, seen: map[types.UID]corev1.Pod{}}
}

// line is one step of the timeline.
type line struct {
	at   time.Time
	text string
}

// print queues one line, once per key, stamped with at, for flush.
func (f *follower) print(key string, at time.Time, format string, args ...any) {
	if f.printed[key] {
		return
	}
	f.printed[key] = true
	f.pending = append(f.pending, line{at, fmt.Sprintf(format, args...)})
}

// printDelay is how long a step waits before it is printed, so that the
// steps the manager records a moment after they happened (a NodeRecovery's
// status is written once its step is done) come out in the order they
// happened, among the ones the demo sees itself.
const printDelay = time.Second

// flush prints the queued lines that happened up to upTo, in time order: the
// wall clock, and the time since the power cut in the auto mode.
func (f *follower) flush(upTo time.Time) {
	sort.SliceStable(f.pending, func(i, j int) bool { return f.pending[i].at.Before(f.pending[j].at) })
	n := 0
	for _, l := range f.pending {
		if l.at.After(upTo) {
			break
		}
		stamp := l.at.Format("15:04:05.000")
		if !f.origin.IsZero() {
			stamp += fmt.Sprintf(" %+7.2fs", l.at.Sub(f.origin).Seconds())
		}
		fmt.Fprintf(f.d.cfg.Out, "  %s  %s\n", stamp, l.text)
		n++
	}
	f.pending = append(f.pending[:0], f.pending[n:]...)
}

// flushAll prints every queued line.
func (f *follower) flushAll() { f.flush(time.Now().Add(time.Hour)) }

// follow looks at the cluster every pollInterval until ctx ends (nil) or
// done reports true (nil); a failed data check ends it with ErrDataLost.
// Every step it saw is printed when it returns.
func (f *follower) follow(ctx context.Context, done func() bool) error {
	defer f.flushAll()
	for {
		if err := f.once(ctx); err != nil {
			return err
		}
		if done != nil && done() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollInterval):
		}
	}
}

// waitWriting follows until the first pod's writer acknowledged records.
func (f *follower) waitWriting(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := f.follow(ctx, func() bool { return len(f.writers) > 0 && f.acked(f.writers[0]) >= 3 }); err != nil {
		return err
	}
	if len(f.writers) == 0 || f.acked(f.writers[0]) < 3 {
		return fmt.Errorf("the demo pod did not run with its volume and writer within %s:\n%s", timeout, f.describe(context.Background()))
	}
	return nil
}

func (f *follower) acked(w *writer) int {
	acks, _ := ledger.ReadLedger(w.ledger)
	return len(acks)
}

// podNode is the current pod's node.
func (f *follower) podNode() string {
	if f.pod == nil {
		return ""
	}
	return f.pod.Spec.NodeName
}

// once looks at the pods, the recoveries and the volume once.
func (f *follower) once(ctx context.Context) error {
	c := f.d.s.Client()
	pods, err := c.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + App})
	if err != nil {
		return nil // the API server may be away for a moment; look again
	}
	f.pods(pods.Items)
	if f.rc != nil {
		if recs, err := f.rc.List(ctx, metav1.ListOptions{}); err == nil {
			f.recs = recs.Items
			f.recoveries(recs.Items)
		}
	}
	defer func() { f.flush(time.Now().Add(-printDelay)) }()
	f.volumeSteps(ctx)
	return f.writer(ctx)
}

// volumeSteps prints, for the current pod until its writer runs, when its
// volume is attached to its node (the VolumeAttachment, after the datapath
// granted it) and when the node's kubelet reports it in use
// (status.volumesInUse), which a kubelet waits for before staging it: on
// real nodes its node-status sync (every 10 s by default) is most of a
// recovery.
func (f *follower) volumeSteps(ctx context.Context) {
	p := f.pod
	if p == nil || f.writerOf(p.UID) != nil {
		return
	}
	c := f.d.s.Client()
	pvc, err := c.CoreV1().PersistentVolumeClaims(Namespace).Get(ctx, "data-"+p.Name, metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName == "" {
		return
	}
	node, pv := p.Spec.NodeName, pvc.Spec.VolumeName
	if !f.printed["attached/"+string(p.UID)] {
		if vas, err := c.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err == nil {
			for _, va := range vas.Items {
				if va.Spec.NodeName == node && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv &&
					va.Status.Attached && va.DeletionTimestamp == nil {
					f.print("attached/"+string(p.UID), time.Now(), "%s attached to %s (VolumeAttachment %.16s…)", pv, node, va.Name)
				}
			}
		}
	}
	if f.printed["in-use/"+string(p.UID)] {
		return
	}
	n, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	want := f.volumeOf(ctx, pv)
	if err != nil || want == "" {
		return
	}
	for _, v := range n.Status.VolumesInUse {
		if string(v) == want {
			f.print("in-use/"+string(p.UID), time.Now(), "%s's kubelet reports %s in use (status.volumesInUse): it may stage it now", node, pv)
		}
	}
}

// volumeOf is the unique volume name a kubelet reports PersistentVolume pv
// under in status.volumesInUse; "" if pv is not a volume of Vigil's driver.
func (f *follower) volumeOf(ctx context.Context, pv string) string {
	v, err := f.d.s.Client().CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
	if err != nil || v.Spec.CSI == nil || v.Spec.CSI.Driver != vigil.DriverName {
		return ""
	}
	return kubelet.UniqueVolumeName(vigil.DriverName, v.Spec.CSI.VolumeHandle)
}

// pods prints each pod's steps and picks the current one.
func (f *follower) pods(items []corev1.Pod) {
	now := time.Now()
	here := map[types.UID]bool{}
	f.pod = nil
	for i := range items {
		p := &items[i]
		here[p.UID] = true
		f.seen[p.UID] = *p
		id := fmt.Sprintf("pod %s (uid %.8s)", p.Name, p.UID)
		if p.Spec.NodeName != "" {
			f.print("scheduled/"+string(p.UID), now, "%s scheduled on %s", id, p.Spec.NodeName)
		}
		if p.Status.Phase == corev1.PodRunning {
			f.print("running/"+string(p.UID), now, "%s Running on %s", id, p.Spec.NodeName)
		}
		if p.DeletionTimestamp != nil {
			f.print("terminating/"+string(p.UID), now, "%s Terminating", id)
		} else if p.Spec.NodeName != "" && f.pod == nil {
			f.pod = p
		}
	}
	for uid, p := range f.seen {
		if !here[uid] {
			f.print("gone/"+string(uid), now, "pod %s (uid %.8s) deleted", p.Name, uid)
		}
	}
}

// recoveries prints the steps of every NodeRecovery, in the order they happened.
func (f *follower) recoveries(recs []v1alpha1.NodeRecovery) {
	type step struct {
		key, what string
		at        time.Time
	}
	var steps []step
	for _, r := range recs {
		s := r.Status
		add := func(t *metav1.MicroTime, key, format string, args ...any) {
			if t != nil {
				steps = append(steps, step{r.Name + "/" + key, fmt.Sprintf("manager: "+format, args...), t.Time})
			}
		}
		add(s.DetectedAt, "detected", "%s is down (%s), NodeRecovery %s", r.Spec.NodeName, s.Reason, r.Name)
		add(s.FencedAt, "fenced", "fenced %s at the datapath: %d volume(s), a new epoch each, its writes refused from now on", r.Spec.NodeName, len(s.Volumes))
		add(s.TaintedAt, "tainted", "tainted %s vigil.io/fenced:NoSchedule", r.Spec.NodeName)
		for i := range s.Pods {
			add(&s.Pods[i].ReapedAt, "reaped/"+string(s.Pods[i].UID), "force-deleted pod %s (%s)", s.Pods[i].Name, s.Pods[i].Trigger)
		}
		for i := range s.Attachments {
			a := s.Attachments[i]
			add(&a.FreedAt, "freed/"+a.Action+"/"+a.Name, "%s", freedText(a, r.Spec.NodeName))
		}
		for _, p := range s.Replacements {
			add(p.RunningAt, "replacement/"+string(p.UID), "replacement %s Running on %s", p.Name, p.NodeName)
		}
		if s.RecoveredAt != nil {
			add(s.RecoveredAt, "recovered", "recovered %s: time to recover %s", r.Spec.NodeName, s.TimeToRecover)
		}
		if ret := s.Return; ret != nil {
			add(ret.ReadyAt, "ready", "%s is back (Ready)", r.Spec.NodeName)
			add(ret.UntaintedAt, "untainted", "%s's engine cleaned up and removed vigil.io/fenced", r.Spec.NodeName)
		}
	}
	for _, st := range steps {
		f.print(st.key, st.at, "%s", st.what)
	}
}

// freedText says what attachment recovery did, in words for the two actions
// the manager records.
func freedText(a v1alpha1.FreedAttachment, node string) string {
	name := a.Name
	if len(name) > 16 {
		name = name[:16] + "…"
	}
	switch a.Action {
	case "delete-volumeattachment":
		return fmt.Sprintf("deleted VolumeAttachment %s of %s on %s", name, a.PVName, node)
	case "clear-volume-in-use":
		return fmt.Sprintf("removed %s from %s's status.volumesInUse (its kubelet is dead)", a.PVName, node)
	}
	return a.Action + " " + name
}

// writer checks the data and starts a writer once the current pod's volume
// is published on its node: on real nodes the writer is the pod's container,
// on kwok nodes a process of the node.
func (f *follower) writer(ctx context.Context) error {
	p := f.pod
	if p == nil || p.Status.Phase != corev1.PodRunning || f.writerOf(p.UID) != nil {
		return nil
	}
	target, ok := f.published(ctx, p)
	if !ok {
		return nil
	}
	f.print("published/"+string(p.UID), time.Now(), "pod %s's volume staged and published on %s %s", p.Name, p.Spec.NodeName, f.d.words.published)
	if err := f.checkData(p, target); err != nil {
		return err
	}
	w := &writer{pod: p.Name, uid: p.UID, node: p.Spec.NodeName, ledger: sandbox.LedgerFile(f.d.ledgerDir(), string(p.UID)), started: time.Now()}
	how := "(the pod's container)"
	if f.d.writerImage == "" {
		how = "(a process of the node)"
		if err := os.MkdirAll(filepath.Dir(w.ledger), 0o755); err != nil {
			return err
		}
		err := f.d.s.RunOnNode(w.node, sandbox.ProcessSpec{Name: fmt.Sprintf("writer-%.8s", p.UID), Args: []string{
			filepath.Join(f.d.cfg.VigilBinDir, sandbox.BinVigilSandbox), "writer", "--dir", target, "--pod-uid", string(p.UID), "--ledger", w.ledger, "--own-mount-namespace"}})
		if errors.Is(err, sandbox.ErrNodeOff) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	f.writers = append(f.writers, w)
	f.print("writer/"+string(p.UID), time.Now(), "writer started for pod %s on %s %s", p.Name, w.node, how)
	return nil
}

// checkData checks, on the volume published at target on pod p's node, the
// records of every earlier writer not checked yet: every record it
// acknowledged must be there, and none written after its node was fenced.
func (f *follower) checkData(p *corev1.Pod, target string) error {
	for _, w := range f.writers {
		if w.checked {
			continue
		}
		w.checked = true
		found, err := ledger.ReadRecords(filepath.Join(target, ledger.RecordsFile(string(w.uid))))
		if err != nil {
			return fmt.Errorf("%w: read the records of pod %s on %s: %v", ErrDataLost, w.pod, p.Spec.NodeName, err)
		}
		acks, err := ledger.ReadLedger(w.ledger)
		if err != nil {
			return fmt.Errorf("%w: ledger %s: %v", ErrDataLost, w.ledger, err)
		}
		res := ledger.Verify(ledger.Pod{UID: string(w.uid), Node: w.node, Acks: acks, Found: found, Fenced: f.fencedSpans(w)})
		if !res.OK() {
			return fmt.Errorf("%w on %s: %s", ErrDataLost, p.Spec.NodeName, res)
		}
		f.print("checked/"+string(w.uid), time.Now(), "data check on %s: all %d records pod %.8s acknowledged on %s are on the volume",
			p.Spec.NodeName, res.Acked, w.uid, w.node)
	}
	return nil
}

// fencedSpans are the fences of w's node since w started, from the node's
// NodeRecoveries: a record w wrote from then on must not be on the volume.
func (f *follower) fencedSpans(w *writer) []ledger.Span {
	var out []ledger.Span
	for _, r := range f.recs {
		if r.Spec.NodeName == w.node && r.Status.FencedAt != nil && r.Status.FencedAt.Time.After(w.started) {
			out = append(out, ledger.Span{From: r.Status.FencedAt.Time})
		}
	}
	return out
}

func (f *follower) writerOf(uid types.UID) *writer {
	for _, w := range f.writers {
		if w.uid == uid {
			return w
		}
	}
	return nil
}

// published returns the pod's target path once its volume is mounted there.
func (f *follower) published(ctx context.Context, p *corev1.Pod) (string, bool) {
	claim := "data-" + p.Name
	pvc, err := f.d.s.Client().CoreV1().PersistentVolumeClaims(Namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName == "" {
		return "", false
	}
	target := f.d.s.PodVolumeDir(p.Spec.NodeName, p.UID, pvc.Spec.VolumeName)
	return target, isMountPoint(target)
}

// isMountPoint reports whether path is mounted (another device than its parent).
func isMountPoint(path string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(path, &st) != nil || syscall.Stat(filepath.Dir(path), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// describe is the state of the demo for an error message.
func (f *follower) describe(ctx context.Context) string {
	c := f.d.s.Client()
	return sandbox.DescribePods(ctx, c, Namespace, "") + sandbox.DescribePVCs(ctx, c, Namespace) + sandbox.DescribeNodes(ctx, c)
}
