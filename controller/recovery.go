package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/fenceapi"
)

// RecoveryClient is what the recorder needs of the NodeRecovery API;
// *v1alpha1.Client implements it.
type RecoveryClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.NodeRecoveryList, error)
	Create(ctx context.Context, r *v1alpha1.NodeRecovery, opts metav1.CreateOptions) (*v1alpha1.NodeRecovery, error)
	UpdateStatus(ctx context.Context, r *v1alpha1.NodeRecovery, opts metav1.UpdateOptions) (*v1alpha1.NodeRecovery, error)
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1alpha1.NodeRecovery, error)
}

var _ RecoveryClient = (*v1alpha1.Client)(nil)

// recoveryFlush is how often changed recoveries are written to the API server:
// every change of the interval goes out in one status write per record. A
// rack's failure reaps hundreds of pods in a few seconds; at 100 ms the
// 100-node bench wrote 679 statuses for 46 records in 50 s.
const recoveryFlush = 500 * time.Millisecond

// recoveries keeps, per node, the open NodeRecovery of its current failure and
// writes it to the API server in the background: the controllers note steps
// (detected, fenced, pods reaped, attachments freed, replacements seen, node
// back) without waiting for the API, and a burst of 110 reaps becomes a few
// status writes. A new leader loads the open records first and continues them.
// A nil *recoveries (no client configured) records nothing.
type recoveries struct {
	client  RecoveryClient
	metrics *Metrics
	owners  func(ownerKey string) []types.UID // UIDs of the pods an owner has now

	mu    sync.Mutex
	nodes map[string]*recoveryState
	// closing are closed recoveries replaced in nodes (the node failed again)
	// before their last state was written.
	closing []*recoveryState
}

type recoveryState struct {
	obj     *v1alpha1.NodeRecovery // the desired object; status is the truth
	created bool
	dirty   bool
	// preexisting holds, per reaped pod UID, the UIDs its owner had at the reap:
	// a replacement is a pod of the same owner that is none of them.
	preexisting map[types.UID]map[types.UID]bool
	ownerKeys   map[types.UID]string
	observed    bool // RecoveryDuration observed
}

func newRecoveries(c RecoveryClient, m *Metrics, owners func(string) []types.UID) *recoveries {
	if c == nil {
		return nil
	}
	return &recoveries{client: c, metrics: m, owners: owners, nodes: map[string]*recoveryState{}}
}

// recoveryName names a node's recovery: the node and the detection time, with a
// hash instead of the tail of a node name too long for both.
func recoveryName(node string, at time.Time) string {
	suffix := "-" + at.UTC().Format("20060102-150405")
	max := validation.DNS1123SubdomainMaxLength - len(suffix)
	name := strings.ToLower(node)
	if len(name) > max {
		h := sha256.Sum256([]byte(node))
		name = name[:max-9] + "-" + hex.EncodeToString(h[:4])
	}
	return name + suffix
}

// load reads the open recoveries at the start of a leadership.
func (rs *recoveries) load(ctx context.Context) error {
	if rs == nil {
		return nil
	}
	list, err := rs.client.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list NodeRecoveries: %w", err)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for i := range list.Items {
		item := &list.Items[i]
		if item.Status.Phase.Closed() {
			continue
		}
		if cur := rs.nodes[item.Spec.NodeName]; cur != nil && cur.obj.CreationTimestamp.After(item.CreationTimestamp.Time) {
			continue
		}
		rs.nodes[item.Spec.NodeName] = &recoveryState{obj: item.DeepCopy(), created: true,
			preexisting: map[types.UID]map[types.UID]bool{}, ownerKeys: map[types.UID]string{},
			observed: item.Status.RecoveredAt != nil}
	}
	return nil
}

// with runs f on the node's open recovery, if there is one, and marks it dirty.
func (rs *recoveries) with(node string, f func(st *recoveryState, s *v1alpha1.NodeRecoveryStatus)) {
	if rs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st := rs.nodes[node]
	if st == nil || st.obj.Status.Phase.Closed() {
		return
	}
	f(st, &st.obj.Status)
	st.dirty = true
}

// open reports whether the node has an open recovery.
func (rs *recoveries) open(node string) bool {
	if rs == nil {
		return false
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st := rs.nodes[node]
	return st != nil && !st.obj.Status.Phase.Closed()
}

func advance(s *v1alpha1.NodeRecoveryStatus, p v1alpha1.Phase) {
	if v1alpha1.PhaseOrder(p) > v1alpha1.PhaseOrder(s.Phase) {
		s.Phase = p
	}
}

func mt(t time.Time) *metav1.MicroTime { m := metav1.NewMicroTime(t); return &m }

// detected opens a recovery for the node unless one is open.
func (rs *recoveries) detected(node, uid, reason string, at time.Time) {
	if rs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if st := rs.nodes[node]; st != nil {
		if !st.obj.Status.Phase.Closed() {
			return
		}
		if st.dirty {
			rs.closing = append(rs.closing, st)
		}
	}
	obj := &v1alpha1.NodeRecovery{
		ObjectMeta: metav1.ObjectMeta{Name: recoveryName(node, at)},
		Spec:       v1alpha1.NodeRecoverySpec{NodeName: node, NodeUID: types.UID(uid)},
		Status: v1alpha1.NodeRecoveryStatus{Phase: v1alpha1.PhaseDetected, DetectedAt: mt(at), Reason: reason,
			Message: fmt.Sprintf("node %s judged down (%s)", node, reason)},
	}
	if len(validation.IsValidLabelValue(node)) == 0 {
		obj.Labels = map[string]string{vigil.NodeLabel: node}
	}
	rs.nodes[node] = &recoveryState{obj: obj, dirty: true,
		preexisting: map[types.UID]map[types.UID]bool{}, ownerKeys: map[types.UID]string{}}
}

// fenced records the volumes fenced on the node.
func (rs *recoveries) fenced(node string, fs []fenceapi.Fenced, at time.Time) {
	rs.with(node, func(_ *recoveryState, s *v1alpha1.NodeRecoveryStatus) {
		if s.FencedAt == nil {
			s.FencedAt = mt(at)
		}
		have := map[string]bool{}
		for _, v := range s.Volumes {
			have[fmt.Sprintf("%s/%d", v.Handle, v.Epoch)] = true
		}
		for _, f := range fs {
			if !have[fmt.Sprintf("%s/%d", f.Handle, f.Epoch)] {
				s.Volumes = append(s.Volumes, v1alpha1.FencedVolume{Handle: f.Handle, Epoch: f.Epoch, FencedAt: metav1.NewMicroTime(at)})
			}
		}
		advance(s, v1alpha1.PhaseFenced)
		s.Message = fmt.Sprintf("%d volume(s) fenced", len(s.Volumes))
	})
}

// tainted records the fenced taint.
func (rs *recoveries) tainted(node string, at time.Time) {
	rs.with(node, func(_ *recoveryState, s *v1alpha1.NodeRecoveryStatus) {
		if s.TaintedAt == nil {
			s.TaintedAt = mt(at)
		}
	})
}

// ownerOf names a pod's controller as Kind/name (StatefulSet/db,
// ReplicaSet/web-7f9c4), "" for none.
func ownerOf(refs []metav1.OwnerReference) string {
	for i := range refs {
		if refs[i].Controller != nil && *refs[i].Controller {
			return refs[i].Kind + "/" + refs[i].Name
		}
	}
	return ""
}

// ownerPods lists the pods ownerKey's owner has now. The reaper asks it before
// the delete: asked after, a replacement its owner made at once could already
// be among them, and would never count as the replacement.
func (rs *recoveries) ownerPods(ownerKey string) []types.UID {
	if rs == nil || rs.owners == nil || ownerKey == "" {
		return nil
	}
	return rs.owners(ownerKey)
}

// podReaped records a force-deleted pod and pre, the pods its owner had just
// before the delete (ownerPods).
func (rs *recoveries) podReaped(node string, pod *corev1.Pod, owner OwnerKind, ownerKey string, pre []types.UID, trigger string, at time.Time) {
	rs.with(node, func(st *recoveryState, s *v1alpha1.NodeRecoveryStatus) {
		for _, p := range s.Pods {
			if p.UID == pod.UID {
				return
			}
		}
		s.Pods = append(s.Pods, v1alpha1.ReapedPod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			Owner: ownerOf(pod.OwnerReferences), Trigger: trigger, ReapedAt: metav1.NewMicroTime(at)})
		s.PodCount = len(s.Pods)
		set := map[types.UID]bool{pod.UID: true}
		for _, u := range pre {
			set[u] = true
		}
		st.preexisting[pod.UID], st.ownerKeys[pod.UID] = set, ownerKey
		advance(s, v1alpha1.PhaseReaping)
		s.Message = fmt.Sprintf("%d pod(s) reaped, waiting for replacements", len(s.Pods))
	})
}

// attachmentFreed records a VolumeAttachment deleted or a volume cleared from
// the node's volumesInUse.
func (rs *recoveries) attachmentFreed(node, name, pv, action string, at time.Time) {
	rs.with(node, func(_ *recoveryState, s *v1alpha1.NodeRecoveryStatus) {
		for _, a := range s.Attachments {
			if a.Name == name && a.Action == action {
				return
			}
		}
		s.Attachments = append(s.Attachments, v1alpha1.FreedAttachment{Name: name, PVName: pv, Action: action, FreedAt: metav1.NewMicroTime(at)})
	})
}

// observePod notes a pod that may replace one reaped from a node: same owner, a
// UID its owner did not have at the reap, on another node. It records when the
// replacement was scheduled and Running, and closes the recovery's reaping once
// every reaped pod has a replacement Running.
func (rs *recoveries) observePod(p *cachedPod, ownerKey string, at time.Time) {
	if rs == nil || ownerKey == "" {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for node, st := range rs.nodes {
		if st.obj.Status.Phase.Closed() || len(st.obj.Status.Pods) == 0 || p.NodeName == node {
			continue
		}
		if rs.matchReplacement(st, p, ownerKey, at) {
			st.dirty = true
		}
	}
}

func (rs *recoveries) matchReplacement(st *recoveryState, p *cachedPod, ownerKey string, at time.Time) bool {
	s := &st.obj.Status
	idx := -1
	for i := range s.Replacements {
		if s.Replacements[i].UID == p.UID {
			idx = i
		}
	}
	if idx < 0 && p.DeletionTimestamp == nil {
		for _, reaped := range s.Pods {
			if st.ownerKeys[reaped.UID] != ownerKey || st.preexisting[reaped.UID][p.UID] || reaped.Namespace != p.Namespace ||
				(strings.HasPrefix(reaped.Owner, string(OwnerStatefulSet)+"/") && reaped.Name != p.Name) {
				continue
			}
			r := v1alpha1.Replacement{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Replaces: reaped.UID}
			j := rs.replacementOf(s, reaped.UID)
			if j < 0 {
				s.Replacements = append(s.Replacements, r)
				idx = len(s.Replacements) - 1
				break
			}
			if s.Replacements[j].RunningAt == nil {
				// The replacement seen first went away before it ran (its
				// owner made another): this one replaces the reaped pod now.
				s.Replacements[j], idx = r, j
				break
			}
		}
	}
	if idx < 0 {
		return false
	}
	r := &s.Replacements[idx]
	changed := false
	if p.NodeName != "" && r.ScheduledAt == nil {
		r.NodeName, r.ScheduledAt, changed = p.NodeName, mt(at), true
	}
	if p.Phase == corev1.PodRunning && r.RunningAt == nil {
		r.RunningAt, changed = mt(at), true
	}
	if changed {
		rs.checkRecovered(st, at)
	}
	return changed
}

// replacementOf returns the index of the reaped pod's replacement, or -1.
func (rs *recoveries) replacementOf(s *v1alpha1.NodeRecoveryStatus, uid types.UID) int {
	for i, r := range s.Replacements {
		if r.Replaces == uid {
			return i
		}
	}
	return -1
}

// heldInOutage marks the node's open recovery, if any, as held in a
// control-plane outage: nothing advances it while the hold lasts.
func (rs *recoveries) heldInOutage(node string) {
	if rs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st := rs.nodes[node]
	if st == nil || st.obj.Status.Phase.Closed() || st.obj.Status.Reason == RecoveryReasonControlPlaneOutage {
		return
	}
	st.obj.Status.Reason = RecoveryReasonControlPlaneOutage
	st.obj.Status.Message = fmt.Sprintf("node %s is held: the control plane, not the node, is taken to have failed "+
		"(its engine still heartbeats to the datapath, as do its peers'); nothing is fenced or reaped on Kubernetes' verdict while it lasts", node)
	st.dirty = true
}

// checkRecovered marks the recovery Recovered once every reaped pod has a
// replacement Running, and observes vigil_recovery_duration_seconds once.
func (rs *recoveries) checkRecovered(st *recoveryState, at time.Time) {
	s := &st.obj.Status
	if len(s.Pods) == 0 || s.RecoveredAt != nil {
		return
	}
	running := map[types.UID]bool{}
	for _, r := range s.Replacements {
		if r.RunningAt != nil {
			running[r.Replaces] = true
		}
	}
	for _, p := range s.Pods {
		if !running[p.UID] {
			return
		}
	}
	s.RecoveredAt = mt(at)
	if s.DetectedAt != nil {
		secs := at.Sub(s.DetectedAt.Time).Seconds()
		s.RecoverySeconds = &secs
		s.TimeToRecover = fmt.Sprintf("%.2fs", secs)
		if !st.observed && rs.metrics != nil {
			rs.metrics.RecoveryDuration.Observe(secs)
		}
		st.observed = true
	}
	advance(s, v1alpha1.PhaseRecovered)
	s.Message = fmt.Sprintf("every reaped pod (%d) has a replacement Running", len(s.Pods))
}

// nodeUp notes a node that is no longer down: Ready again, and whether its
// engine has removed the fenced taint. The recovery closes once the node is
// untainted (NodeReturned) or, if nothing was done, at once (Abandoned).
func (rs *recoveries) nodeUp(name string, node *corev1.Node, at time.Time) {
	if node == nil || !isNodeReady(node) {
		return
	}
	rs.with(name, func(_ *recoveryState, s *v1alpha1.NodeRecoveryStatus) {
		if s.FencedAt == nil && len(s.Pods) == 0 && len(s.Attachments) == 0 {
			s.Phase = v1alpha1.PhaseAbandoned
			s.Message = "the node came back before anything was done"
			return
		}
		if s.Return == nil {
			s.Return = &v1alpha1.NodeReturn{}
		}
		if s.Return.ReadyAt == nil {
			s.Return.ReadyAt = mt(at)
			s.Message = "the node is back; waiting for its engine to clean up and remove " + vigil.FencedTaintKey
		}
		if fencedTaint(node) == nil {
			s.Return.UntaintedAt = mt(at)
			s.Phase = v1alpha1.PhaseNodeReturned
			s.Message = "the node is back, cleaned up and untainted"
		}
	})
}

// run writes changed recoveries every recoveryFlush until ctx ends, then once
// more.
func (rs *recoveries) run(ctx context.Context) {
	if rs == nil {
		return
	}
	t := time.NewTicker(recoveryFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			rs.flush(fctx)
			cancel()
			return
		case <-t.C:
			rs.flush(ctx)
		}
	}
}

// flush writes every dirty recovery: create it if needed, then its status.
// Failures stay dirty and are retried at the next tick.
func (rs *recoveries) flush(ctx context.Context) {
	// Each write pairs a copy of the record with its state: what the API
	// server answers (resourceVersion, UID) goes to that state and no other.
	type job struct {
		obj *v1alpha1.NodeRecovery
		st  *recoveryState
	}
	rs.mu.Lock()
	var todo []job
	for _, st := range append(rs.closing, mapValues(rs.nodes)...) {
		if st.dirty {
			st.dirty = false
			todo = append(todo, job{st.obj.DeepCopy(), st})
		}
	}
	rs.closing = nil
	rs.mu.Unlock()
	sort.Slice(todo, func(i, j int) bool { return todo[i].obj.Name < todo[j].obj.Name })
	for _, j := range todo {
		obj, st := j.obj, j.st
		out, err := rs.write(ctx, obj, st)
		rs.mu.Lock()
		if err != nil {
			st.dirty = true
			if st.obj.Status.Phase.Closed() && rs.nodes[st.obj.Spec.NodeName] != st {
				rs.closing = append(rs.closing, st)
			}
			klog.FromContext(ctx).Error(err, "writing NodeRecovery; retrying", "name", obj.Name)
		} else {
			st.created = true
			st.obj.ResourceVersion = out.ResourceVersion
			st.obj.UID = out.UID
			st.obj.CreationTimestamp = out.CreationTimestamp
			if st.obj.Status.Phase.Closed() && !st.dirty {
				for node, cur := range rs.nodes {
					if cur == st {
						delete(rs.nodes, node)
					}
				}
			}
		}
		rs.mu.Unlock()
	}
}

func (rs *recoveries) write(ctx context.Context, obj *v1alpha1.NodeRecovery, st *recoveryState) (*v1alpha1.NodeRecovery, error) {
	rs.mu.Lock()
	created := st.created
	rs.mu.Unlock()
	if !created {
		out, err := rs.create(ctx, obj, st)
		if err != nil {
			return nil, err
		}
		obj.ResourceVersion = out.ResourceVersion
	}
	out, err := rs.client.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: vigil.FieldManager})
	if apierrors.IsConflict(err) {
		// Only the leader writes recoveries, so a conflict is this process's own
		// earlier write racing: take the latest version and write the status again.
		cur, gerr := rs.client.Get(ctx, obj.Name, metav1.GetOptions{})
		if gerr != nil {
			return nil, gerr
		}
		obj.ResourceVersion = cur.ResourceVersion
		out, err = rs.client.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: vigil.FieldManager})
	}
	if err != nil {
		return nil, fmt.Errorf("update NodeRecovery %s status: %w", obj.Name, err)
	}
	return out, nil
}

// create creates obj's record. A record of that name that exists already is
// this episode's when its status is not written yet or has the same detection
// (an earlier create whose answer was lost); otherwise it is an earlier episode
// of the same node in the same second, which is never overwritten: the new one
// takes the next free name (-2, -3, ...).
func (rs *recoveries) create(ctx context.Context, obj *v1alpha1.NodeRecovery, st *recoveryState) (*v1alpha1.NodeRecovery, error) {
	base := obj.Name
	for i := 2; ; i++ {
		out, err := rs.client.Create(ctx, &v1alpha1.NodeRecovery{ObjectMeta: obj.ObjectMeta, Spec: obj.Spec}, metav1.CreateOptions{FieldManager: vigil.FieldManager})
		if err == nil {
			return out, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create NodeRecovery %s: %w", obj.Name, err)
		}
		cur, err := rs.client.Get(ctx, obj.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if cur.Status.Phase == "" || sameDetection(cur.Status.DetectedAt, obj.Status.DetectedAt) {
			return cur, nil
		}
		if i > maxRecoveryNameTries {
			return nil, fmt.Errorf("create NodeRecovery %s: %d records of node %s in the same second", base, i-1, obj.Spec.NodeName)
		}
		obj.Name = fmt.Sprintf("%s-%d", base, i)
		rs.mu.Lock()
		st.obj.Name = obj.Name
		rs.mu.Unlock()
	}
}

// maxRecoveryNameTries bounds the names tried for one node and second.
const maxRecoveryNameTries = 20

func sameDetection(a, b *metav1.MicroTime) bool {
	return a != nil && b != nil && a.Time.Equal(b.Time)
}

func mapValues(m map[string]*recoveryState) []*recoveryState {
	out := make([]*recoveryState, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
