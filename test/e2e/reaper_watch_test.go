package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/vigil-storage/vigil/sandbox"
)

// deletion is when a watch saw an object go: its resourceVersion (etcd's revision,
// one counter for every resource, so it orders deletions of pods and
// VolumeAttachments) and the local time.
type deletion struct {
	rv   int64
	at   time.Time
	node string // for VolumeAttachments: spec.nodeName
	pv   string // for VolumeAttachments: the PV
}

// recorder watches one case's pods, every VolumeAttachment of its PVs and the
// victim node from before the power cut, and records what happened and when.
type recorder struct {
	ns, victim string
	tl         *timeline
	mu         sync.Mutex
	podGone    map[types.UID]deletion
	before     map[types.UID]bool  // pods that existed at the power cut
	vaGone     map[string]deletion // VolumeAttachment name -> first deletion
	watchErr   []string
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// watchCase starts the watches; they end at the end of the test.
func watchCase(t *testing.T, ns, victim string) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{ns: ns, victim: victim, tl: newTimeline(time.Now()), podGone: map[types.UID]deletion{},
		vaGone: map[string]deletion{}, cancel: cancel}
	c := sb.Client()
	pw, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	must(t, err)
	vw, err := c.StorageV1().VolumeAttachments().Watch(ctx, metav1.ListOptions{})
	must(t, err)
	nw, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", victim).String()})
	must(t, err)
	for _, w := range []struct {
		name string
		w    watch.Interface
		f    func(watch.Event)
	}{{"pods", pw, r.onPod}, {"volumeattachments", vw, r.onVA}, {"node", nw, r.onNode}} {
		r.wg.Add(1)
		go r.consume(ctx, w.name, w.w, w.f)
	}
	t.Cleanup(r.stop)
	return r
}

func (r *recorder) stop() {
	r.cancel()
	r.wg.Wait()
}

// start resets the timeline's origin to the power cut and notes the pods that
// exist then: any other pod on a healthy node is a replacement.
func (r *recorder) start(t *testing.T, at time.Time) {
	t.Helper()
	pods, err := sb.Client().CoreV1().Pods(r.ns).List(context.Background(), metav1.ListOptions{})
	must(t, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tl = newTimeline(at)
	r.before = map[types.UID]bool{}
	for _, p := range pods.Items {
		r.before[p.UID] = true
	}
}

func (r *recorder) mark(event string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tl.mark(event, time.Now())
}

func (r *recorder) consume(ctx context.Context, name string, w watch.Interface, f func(watch.Event)) {
	defer r.wg.Done()
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				if ctx.Err() == nil {
					r.mu.Lock()
					r.watchErr = append(r.watchErr, name+" watch closed early")
					r.mu.Unlock()
				}
				return
			}
			if ev.Type == watch.Error {
				r.mu.Lock()
				r.watchErr = append(r.watchErr, fmt.Sprintf("%s watch error: %v", name, ev.Object))
				r.mu.Unlock()
				continue
			}
			f(ev)
		}
	}
}

func revision(o metav1.Object) int64 {
	n, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return n
}

func (r *recorder) onPod(ev watch.Event) {
	p, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Type == watch.Deleted {
		r.podGone[p.UID] = deletion{rv: revision(p), at: now, node: p.Spec.NodeName}
		if p.Spec.NodeName == r.victim {
			r.tl.mark("pod "+p.Name+" deleted (gone from the API)", now)
		}
		return
	}
	if p.DeletionTimestamp != nil && p.Spec.NodeName == r.victim {
		r.tl.mark("eviction: first pod on "+r.victim+" Terminating", now)
	}
	if p.Spec.NodeName == "" || p.Spec.NodeName == r.victim {
		return
	}
	// A pod on another node: a replacement if it did not exist at the power cut.
	if r.before != nil && !r.before[p.UID] {
		r.tl.mark(fmt.Sprintf("replacement %s (app=%s) scheduled on %s", p.Name, p.Labels["app"], p.Spec.NodeName), now)
		if p.Status.Phase == corev1.PodRunning {
			r.tl.mark(fmt.Sprintf("replacement %s (app=%s) Running", p.Name, p.Labels["app"]), now)
		}
	}
}

func (r *recorder) onVA(ev watch.Event) {
	va, ok := ev.Object.(*storagev1.VolumeAttachment)
	if !ok || va.Spec.Source.PersistentVolumeName == nil {
		return
	}
	pv := *va.Spec.Source.PersistentVolumeName
	if !strings.HasPrefix(pv, "pv-"+r.ns+"-") || (ev.Type != watch.Deleted && va.DeletionTimestamp == nil) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.vaGone[va.Name]; ok {
		return
	}
	r.vaGone[va.Name] = deletion{rv: revision(va), at: now, node: va.Spec.NodeName, pv: pv}
	r.tl.mark(fmt.Sprintf("VolumeAttachment of %s on %s deleted", strings.TrimPrefix(pv, "pv-"+r.ns+"-"), va.Spec.NodeName), now)
}

func (r *recorder) onNode(ev watch.Event) {
	n, ok := ev.Object.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if sandbox.NodeReadyStatus(n) != corev1.ConditionTrue {
		r.tl.mark("node "+n.Name+" NotReady (Ready="+string(sandbox.NodeReadyStatus(n))+")", now)
	}
	for _, tn := range n.Spec.Taints {
		if tn.Key == corev1.TaintNodeUnreachable && tn.Effect == corev1.TaintEffectNoExecute {
			r.tl.mark("taint unreachable:NoExecute", now)
		}
	}
}

// gone returns the recorded deletion of a pod.
func (r *recorder) gone(uid types.UID) (deletion, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.podGone[uid]
	return d, ok
}

// attachmentDeletions returns a copy of the VolumeAttachment deletions seen.
func (r *recorder) attachmentDeletions() map[string]deletion {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]deletion, len(r.vaGone))
	for k, v := range r.vaGone {
		out[k] = v
	}
	return out
}

func (r *recorder) table(title string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tl.table(title)
}

func (r *recorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.watchErr...)
}
