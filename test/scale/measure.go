package scale

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/sandbox"
)

// cutRack is the rack the benchmark powers off.
const cutRack = "rack-1"

// Failure is what the benchmark measured from the power cut.
type Failure struct {
	Rack         string `json:"rack"`
	Nodes        int    `json:"nodes"`
	PodsOnRack   int    `json:"podsOnRack"`
	CoveredPods  int    `json:"coveredPods"`
	Reaped       int    `json:"reaped"`
	Replacements int    `json:"replacementsScheduled"`
	// Detection: every node of the rack Ready=Unknown, from the cut
	// (Kubernetes' detection).
	Detection time.Duration `json:"detection"`
	// ManagerDetection and ManagerFenced: the last of the rack's NodeRecovery
	// records' detectedAt and fencedAt, from the cut (zero without records);
	// Reasons counts the records by the reason of their detection.
	ManagerDetection time.Duration  `json:"managerDetection"`
	ManagerFenced    time.Duration  `json:"managerFenced"`
	Recoveries       int            `json:"recoveries"`
	Reasons          map[string]int `json:"reasons,omitempty"`
	// Reaped and Scheduled: the last covered pod gone, the last replacement
	// bound to a node, from the cut; ReapedAfterDetection the same from the
	// manager's detection (Kubernetes' when there is no record).
	ReapedAt             time.Duration `json:"reapedAt"`
	ScheduledAt          time.Duration `json:"scheduledAt"`
	ReapedAfterDetection time.Duration `json:"reapedAfterDetection"`
	// Complete is false when the bound passed first; the times are then zero.
	Complete bool `json:"complete"`
}

// watcher records, from informers, when each node of the rack went
// Ready=Unknown, when each covered pod went away and when its replacement was
// bound.
type watcher struct {
	mu        sync.Mutex
	rack      map[string]bool
	unknown   map[string]time.Time
	covered   map[types.UID]string // UID -> pod name
	names     map[string]bool      // names of the covered pods
	gone      map[types.UID]time.Time
	scheduled map[string]time.Time // pod name -> replacement bound
}

func newWatcher(rack []string, covered []corev1.Pod) *watcher {
	w := &watcher{rack: map[string]bool{}, unknown: map[string]time.Time{}, covered: map[types.UID]string{},
		names: map[string]bool{}, gone: map[types.UID]time.Time{}, scheduled: map[string]time.Time{}}
	for _, n := range rack {
		w.rack[n] = true
	}
	for _, p := range covered {
		w.covered[p.UID] = p.Name
		w.names[p.Name] = true
	}
	return w
}

func (w *watcher) node(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || !w.rack[n.Name] || sandbox.NodeReadyStatus(n) != corev1.ConditionUnknown {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.unknown[n.Name]; !seen {
		w.unknown[n.Name] = time.Now()
	}
}

func (w *watcher) pod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, cov := w.covered[p.UID]; cov || !w.names[p.Name] || p.Spec.NodeName == "" {
		return
	}
	if _, seen := w.scheduled[p.Name]; !seen {
		w.scheduled[p.Name] = time.Now()
	}
}

func (w *watcher) deleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, cov := w.covered[p.UID]; cov {
		if _, seen := w.gone[p.UID]; !seen {
			w.gone[p.UID] = time.Now()
		}
	}
}

// result fills f from what was seen, relative to cut.
func (w *watcher) result(f *Failure, cut time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	f.Reaped, f.Replacements = len(w.gone), len(w.scheduled)
	done := len(w.unknown) == len(w.rack) && len(w.gone) == len(w.covered) && len(w.scheduled) == len(w.covered)
	if !done {
		return false
	}
	latest := func(ts []time.Time) time.Duration {
		var m time.Duration
		for _, t := range ts {
			m = max(m, t.Sub(cut))
		}
		return m
	}
	var u, g, s []time.Time
	for _, t := range w.unknown {
		u = append(u, t)
	}
	for _, t := range w.gone {
		g = append(g, t)
	}
	for _, t := range w.scheduled {
		s = append(s, t)
	}
	f.Detection, f.ReapedAt, f.ScheduledAt = latest(u), latest(g), latest(s)
	f.ReapedAfterDetection, f.Complete = f.ReapedAt-f.Detection, true
	return true
}

// cutAndMeasure powers rack-1 off and waits, up to bound, for detection, every
// covered pod reaped and every replacement scheduled.
func (w *world) cutAndMeasure(ctx context.Context, bound time.Duration) (Failure, time.Time, error) {
	st, err := w.sb.Status(ctx)
	if err != nil {
		return Failure{}, time.Time{}, err
	}
	var rack []string
	for _, n := range st.Nodes {
		if n.Name == cutRack {
			rack = n.Members
		}
	}
	onRack := map[string]bool{}
	for _, n := range rack {
		onRack[n] = true
	}
	pods, err := w.c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Failure{}, time.Time{}, err
	}
	f := Failure{Rack: cutRack, Nodes: len(rack)}
	var covered []corev1.Pod
	for _, p := range pods.Items {
		if onRack[p.Spec.NodeName] {
			f.PodsOnRack++
			if strings.HasPrefix(p.Name, "db-") {
				covered = append(covered, p)
			}
		}
	}
	f.CoveredPods = len(covered)
	wt := newWatcher(rack, covered)
	factory := informers.NewSharedInformerFactoryWithOptions(w.c, 0, informers.WithNamespace(namespace))
	nodeFactory := informers.NewSharedInformerFactory(w.c, 0)
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: wt.pod, UpdateFunc: func(_, o any) { wt.pod(o) }, DeleteFunc: wt.deleted})
	_, _ = nodeFactory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: wt.node, UpdateFunc: func(_, o any) { wt.node(o) }})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(wctx.Done())
	nodeFactory.Start(wctx.Done())
	factory.WaitForCacheSync(wctx.Done())
	nodeFactory.WaitForCacheSync(wctx.Done())
	cut := time.Now()
	if err := w.sb.Stop(cutRack); err != nil {
		return f, cut, err
	}
	err = sandbox.Poll(ctx, bound, "rack failure handled", func(context.Context) (bool, string, error) {
		done := wt.result(&f, cut)
		return done, fmt.Sprintf("%d of %d covered pods reaped, %d replacements scheduled", f.Reaped, f.CoveredPods, f.Replacements), nil
	}, nil)
	if rerr := w.recoveries(ctx, &f, rack, cut); rerr != nil && err == nil {
		err = fmt.Errorf("read the NodeRecovery records: %w", rerr)
	}
	return f, cut, err
}

// recoveries fills the manager's detection and fence times from the rack's
// NodeRecovery records made after cut.
func (w *world) recoveries(ctx context.Context, f *Failure, rack []string, cut time.Time) error {
	rc, err := v1alpha1.NewForConfig(w.sb.RESTConfig())
	if err != nil {
		return err
	}
	recs, err := rc.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	onRack := map[string]bool{}
	for _, n := range rack {
		onRack[n] = true
	}
	f.Reasons = map[string]int{}
	for _, r := range recs.Items {
		if !onRack[r.Spec.NodeName] || r.Status.DetectedAt == nil || r.Status.DetectedAt.Time.Before(cut) {
			continue
		}
		f.Recoveries++
		f.Reasons[r.Status.Reason]++
		f.ManagerDetection = max(f.ManagerDetection, r.Status.DetectedAt.Time.Sub(cut))
		if r.Status.FencedAt != nil {
			f.ManagerFenced = max(f.ManagerFenced, r.Status.FencedAt.Time.Sub(cut))
		}
	}
	if f.Recoveries > 0 && f.Complete {
		f.ReapedAfterDetection = f.ReapedAt - f.ManagerDetection
	}
	return nil
}

// cpuTicks is the user+system CPU time of pid in clock ticks (1/100 s).
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return u + k, nil
}

// memOf reads VmRSS and VmHWM (peak) of pid, in bytes.
func memOf(pid int) (rss, peak int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n << 10
		case "VmHWM":
			peak = n << 10
		}
	}
	return rss, peak
}

// Process is one process's memory.
type Process struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
	RSS  int64  `json:"rssBytes"`
	Peak int64  `json:"peakBytes"`
}

// controlPlane is the memory of every process of the sandbox: the control
// plane (from kwokctl's PID files), each rack's kwok and heartbeat, and the
// stack's host processes.
func (w *world) controlPlane(ctx context.Context) []Process {
	var out []Process
	files, _ := filepath.Glob(filepath.Join(w.sb.WorkDir(), "kwok", "clusters", sandboxName, "pids", "*.pid"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			rss, peak := memOf(pid)
			out = append(out, Process{Name: strings.TrimSuffix(filepath.Base(f), ".pid"), PID: pid, RSS: rss, Peak: peak})
		}
	}
	if st, err := w.sb.Status(ctx); err == nil {
		for _, n := range st.Nodes {
			for _, p := range n.Processes {
				if p.Running {
					rss, peak := memOf(p.PID)
					out = append(out, Process{Name: n.Name + " " + p.Name, PID: p.PID, RSS: rss, Peak: peak})
				}
			}
		}
		for _, p := range st.Host {
			if p.Running {
				rss, peak := memOf(p.PID)
				out = append(out, Process{Name: p.Name, PID: p.PID, RSS: rss, Peak: peak})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
