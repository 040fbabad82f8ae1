//go:build bench

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/settings"
)

// The recovery benchmark (`make bench-recovery`, build tag bench, not part of
// `make test`): a sandbox with Kubernetes' own default timings (node-monitor
// grace 50 s and period 5 s, 300 s default tolerations), 4 nodes, a
// 3-replica StatefulSet spread over them and a 1-replica Deployment, all on
// RWO Vigil volumes; then power cuts of nodes that hold pods. Per pod it
// measures power cut → replacement Running with its data readable on its new
// node. Modes: the fast trigger (BENCH_CYCLES cycles, default 10), the
// Kubernetes-compatible trigger (fast trigger off, one cycle) and do-nothing
// (one cycle, a bounded wait).
const (
	benchName   = "bench-recovery"
	benchSubnet = "10.213.208.0/24"
	benchNS     = "bench"
	benchSTS    = "bs"
	benchDeploy = "bd"
	benchMarker = "bench-marker.txt"
)

// benchPod is one pod of the workload at one instant.
type benchPod struct {
	key    string // the slot: StatefulSet pod name, or "bd" for the Deployment
	pod    corev1.Pod
	pv     string
	target string
}

type benchEnv struct {
	*loopEnv
	results []benchResult
	turn    int
}

// benchResult is one pod's recovery in one cycle.
type benchResult struct {
	Mode      string  `json:"mode"`
	Cycle     int     `json:"cycle"`
	Node      string  `json:"node"`
	Pod       string  `json:"pod"`
	Seconds   float64 `json:"seconds"`   // power cut → data readable on the new node
	Recovered bool    `json:"recovered"` // false: not within the bound
	NewNode   string  `json:"newNode,omitempty"`
	// EvictionDeadline is, for the Kubernetes-compatible trigger, when the old
	// pod's deletion deadline passed (eviction + its grace), from the power cut.
	EvictionDeadline float64 `json:"evictionDeadline,omitempty"`
	// Steps is when each step of the recovery was first seen, in seconds
	// from the power cut (benchSteps).
	Steps map[string]float64 `json:"steps,omitempty"`
}

func TestBench_Recovery(t *testing.T) {
	cycles := 10
	if v := os.Getenv("BENCH_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			t.Fatalf("BENCH_CYCLES=%q: want a number of cycles from 1 to 1000", v)
		}
		cycles = n
	}
	b := &benchEnv{loopEnv: upBench(t)}
	b.setupWorkload(t)
	for i := 1; i <= cycles; i++ {
		b.cycle(t, "fast", i, 90*time.Second)
	}
	if os.Getenv("BENCH_FAST_ONLY") == "" {
		b.set(t, settings.NameFastFencedTrigger, "false")
		b.cycle(t, "kubernetes-compatible", 1, 12*time.Minute)
		b.set(t, settings.NameFastFencedTrigger, "true")
		b.set(t, settings.NameNodeDownPodDeletionPolicy, string(settings.PolicyDoNothing))
		b.cycle(t, "do-nothing", 1, 2*time.Minute)
	}
	b.report(t)
}

// upBench is the loop sandbox with Kubernetes' default node-monitor timings.
func upBench(t *testing.T) *loopEnv {
	t.Helper()
	workDir := filepath.Join(os.TempDir(), "vigil-bench-recovery")
	must(t, sandbox.DownWorkDir(workDir))
	t.Cleanup(func() {
		if os.Getenv("VIGIL_E2E_KEEP") == "" || !t.Failed() {
			_ = sandbox.DownWorkDir(workDir)
		}
	})
	cfg := sandbox.Config{Name: benchName, WorkDir: workDir, Nodes: 4, Subnet: benchSubnet,
		NodeMonitorGracePeriod: 50 * time.Second, NodeMonitorPeriod: 5 * time.Second, DefaultTolerationSeconds: 300}
	cfg.Logf = t.Logf
	image := benchKubelet(t, &cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := sandbox.Up(ctx, cfg)
	must(t, err)
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin"))
	must(t, err)
	// DatapathServers 0, the host server: the benchmark cuts the writer's
	// node and needs its volume to survive; a volume's data has one copy,
	// which a server on the cut node would take down with it.
	stk, err := s.StartStack(ctx, sandbox.StackConfig{VigilBinDir: bin, DatapathServers: 0})
	must(t, err)
	must(t, sandbox.InstallCRDs(ctx, s.RESTConfig()))
	for _, ns := range []string{vigil.Namespace, benchNS} {
		must(t, sandbox.EnsureNamespace(ctx, s.Client(), ns))
	}
	e := &loopEnv{s: s, stk: stk, store: "bolt:" + filepath.Join(t.TempDir(), "settings.db"), writer: sandbox.Workload{Image: image}}
	// Vigil's defaults but for the two a user turns on for fast recovery.
	e.set(t, settings.NameNodeDownPodDeletionPolicy, string(settings.PolicyDeleteBoth))
	e.set(t, settings.NameFastFencedTrigger, "true")
	e.rc, err = v1alpha1.NewForConfig(s.RESTConfig())
	must(t, err)
	e.dp = dialStack(t, ctx, stk, stk.TokenFile)
	t.Cleanup(func() { _ = e.dp.Close() })
	kubeconfig, err := s.ComponentKubeconfig(ctx, vigil.ManagerServiceAccount, "")
	must(t, err)
	tokenFile := filepath.Join(t.TempDir(), "api-token")
	must(t, os.WriteFile(tokenFile, []byte(loopAPIToken+"\n"), 0o600))
	e.mgr = startManager(t, "bench", managerOpts{storeSpec: e.store, leaseNamespace: vigil.Namespace, leaseName: vigil.ManagerLeaseName,
		kubeconfig: kubeconfig, extra: []string{"--datapath", stk.DatapathAddr, "--datapath-token-file", stk.TokenFile,
			"--datapath-ca-file", stk.CAFile, "--api-token-file", tokenFile}})
	return e
}

// setupWorkload starts the StatefulSet (3 replicas on distinct nodes, claims
// from its template) and the Deployment (1 replica, its own claim).
func (b *benchEnv) setupWorkload(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := b.s.Client()
	grace := int64(30)
	sts := sandbox.Workload{Namespace: benchNS, Name: benchSTS, Spread: true, StorageClass: b.stk.StorageClass, Size: "128Mi",
		TerminationGracePeriodSeconds: &grace, Image: b.writer.Image}
	_, err := c.AppsV1().StatefulSets(benchNS).Create(ctx, sts.StatefulSet(3), metav1.CreateOptions{})
	must(t, err)
	must(t, sandbox.CreateClaim(ctx, c, benchNS, benchDeploy+"-data", b.stk.StorageClass, "128Mi"))
	must(t, sandbox.WaitPVCsBound(ctx, c, benchNS, []string{benchDeploy + "-data"}, 60*time.Second))
	dep := sandbox.Workload{Namespace: benchNS, Name: benchDeploy, Claims: []string{benchDeploy + "-data"}, TerminationGracePeriodSeconds: &grace,
		Image: b.writer.Image}
	_, err = c.AppsV1().Deployments(benchNS).Create(ctx, dep.Deployment(1), metav1.CreateOptions{})
	must(t, err)
	b.steady(t, 3*time.Minute)
}

// steady waits until all four pods are Running with their volumes published,
// and returns them by slot.
func (b *benchEnv) steady(t *testing.T, timeout time.Duration) map[string]benchPod {
	t.Helper()
	var out map[string]benchPod
	must(t, sandbox.Poll(context.Background(), timeout, "the workload's 4 pods Running with their volumes published", func(ctx context.Context) (bool, string, error) {
		pods, err := b.pods(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		if len(pods) != 4 {
			return false, fmt.Sprintf("%d pods", len(pods)), nil
		}
		for _, p := range pods {
			if p.pod.Status.Phase != corev1.PodRunning || !isMountPoint(t, p.target) {
				return false, p.key + " not Running or not published", nil
			}
		}
		out = pods
		return true, "", nil
	}, b.describe))
	return out
}

// pods lists the workload's live pods by slot with their PV and target path.
func (b *benchEnv) pods(ctx context.Context) (map[string]benchPod, error) {
	c := b.s.Client()
	list, err := c.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]benchPod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		key, claim := p.Name, "data-"+p.Name
		if p.Labels["app"] == benchDeploy {
			key, claim = benchDeploy, benchDeploy+"-data"
		}
		pvc, err := c.CoreV1().PersistentVolumeClaims(benchNS).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		out[key] = benchPod{key: key, pod: p, pv: pvc.Spec.VolumeName,
			target: b.s.PodVolumeDir(p.Spec.NodeName, p.UID, pvc.Spec.VolumeName)}
	}
	return out, nil
}

func isMountPoint(t *testing.T, path string) bool {
	for _, m := range mountsUnder(t, filepath.Dir(filepath.Dir(path))) {
		if m == path {
			return true
		}
	}
	return false
}

// cycle cuts the power of the next node holding pods, measures each of its
// pods, then starts the node again and waits for the workload to be steady.
func (b *benchEnv) cycle(t *testing.T, mode string, n int, bound time.Duration) {
	t.Helper()
	pods := b.steady(t, 5*time.Minute)
	byNode := map[string][]benchPod{}
	for _, p := range pods {
		byNode[p.pod.Spec.NodeName] = append(byNode[p.pod.Spec.NodeName], p)
	}
	var nodes []string
	for node := range byNode {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes)
	victim := nodes[b.turn%len(nodes)]
	b.turn++
	victims := byNode[victim]
	for _, p := range victims {
		writeDurable(t, filepath.Join(p.target, benchMarker), fmt.Sprintf("%s cycle %d %s\n", mode, n, p.key))
	}
	start := time.Now()
	must(t, b.s.Stop(victim))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range victims {
		wg.Go(func() {
			r := b.measure(t, mode, n, victim, p, start, bound)
			mu.Lock()
			b.results = append(b.results, r)
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("%s cycle %d: power cut of %s (%d pods)", mode, n, victim, len(victims))
	// Bring everything back: do-nothing leaves the pods to a person, so a
	// policy that reaps is put back first.
	if mode == "do-nothing" {
		b.set(t, settings.NameNodeDownPodDeletionPolicy, string(settings.PolicyDeleteBoth))
	}
	must(t, b.s.Start(victim))
	b.waitNodeClean(t, victim, nil)
}

// measure waits for the replacement of p, off victim, with its data readable.
func (b *benchEnv) measure(t *testing.T, mode string, n int, victim string, p benchPod, start time.Time, bound time.Duration) benchResult {
	r := benchResult{Mode: mode, Cycle: n, Node: victim, Pod: p.key, Steps: map[string]float64{}}
	want := fmt.Sprintf("%s cycle %d %s\n", mode, n, p.key)
	var evictedAt time.Time
	err := sandbox.Poll(context.Background(), bound, "replacement of "+p.key, func(ctx context.Context) (bool, string, error) {
		if evictedAt.IsZero() {
			if old, err := b.s.Client().CoreV1().Pods(benchNS).Get(ctx, p.pod.Name, metav1.GetOptions{}); err == nil &&
				old.UID == p.pod.UID && old.DeletionTimestamp != nil {
				evictedAt = old.DeletionTimestamp.Time
			}
		}
		pods, err := b.pods(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		np, ok := pods[p.key]
		if !ok || np.pod.UID == p.pod.UID || np.pod.Spec.NodeName == victim {
			return false, "no replacement yet", nil
		}
		b.markSteps(t, ctx, r.Steps, np, start)
		got, err := os.ReadFile(filepath.Join(np.target, benchMarker))
		if err != nil || string(got) != want {
			return false, fmt.Sprintf("marker %q (%v)", got, err), nil
		}
		if np.pod.Status.Phase != corev1.PodRunning {
			return false, "data readable, replacement not Running yet", nil // a real kubelet starts it after the mount
		}
		r.NewNode = np.pod.Spec.NodeName
		markStep(r.Steps, stepReadable, start)
		return true, "", nil
	}, nil)
	r.Seconds, r.Recovered = time.Since(start).Seconds(), err == nil
	if !evictedAt.IsZero() {
		r.EvictionDeadline = evictedAt.Sub(start).Seconds()
	}
	if !r.Recovered {
		r.Seconds = bound.Seconds()
	}
	return r
}

// writeDurable writes a file through a pod's mount as an application that
// needs it to survive a power cut does: the file and its directory fsynced.
func writeDurable(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.Create(path)
	must(t, err)
	if _, err := f.WriteString(content); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	must(t, f.Sync())
	must(t, f.Close())
	d, err := os.Open(filepath.Dir(path))
	must(t, err)
	defer d.Close()
	must(t, d.Sync())
}

// report prints the table per mode and writes the results as JSON next to it.
func (b *benchEnv) report(t *testing.T) {
	t.Helper()
	modes := map[string][]benchResult{}
	var order []string
	for _, r := range b.results {
		if _, ok := modes[r.Mode]; !ok {
			order = append(order, r.Mode)
		}
		modes[r.Mode] = append(modes[r.Mode], r)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nPower cut → replacement Running with its data readable on the new node (Kubernetes' default node timings; %s)\n", benchNodesKind())
	sb.WriteString("| mode | pods | recovered | median (s) | p90 (s) | max (s) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, m := range order {
		rs := modes[m]
		var secs []float64
		recovered := 0
		for _, r := range rs {
			if r.Recovered {
				recovered++
				secs = append(secs, r.Seconds)
			}
		}
		if recovered == 0 {
			fmt.Fprintf(&sb, "| %s | %d | 0 | not recovered in %.0f s | | |\n", m, len(rs), rs[0].Seconds)
			continue
		}
		sort.Float64s(secs)
		fmt.Fprintf(&sb, "| %s | %d | %d | %.2f | %.2f | %.2f |\n", m, len(rs), recovered,
			quantile(secs, 0.5), quantile(secs, 0.9), secs[len(secs)-1])
	}
	for _, r := range modes["kubernetes-compatible"] {
		fmt.Fprintf(&sb, "kubernetes-compatible %s: old pod's deletion deadline +%.1f s (eviction + grace), data readable +%.1f s: %.1f s after the deadline\n",
			r.Pod, r.EvictionDeadline, r.Seconds, r.Seconds-r.EvictionDeadline)
	}
	stepReport(&sb, modes, order)
	t.Log(sb.String())
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = filepath.Join(os.TempDir(), "vigil-bench-recovery.json")
	}
	data, err := json.MarshalIndent(b.results, "", "  ")
	must(t, err)
	must(t, os.WriteFile(out, data, 0o644))
	t.Logf("results: %s", out)
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// TestBench_Reap110Pods: 110 protected pods on one node (the kubelet's default
// pod limit), a real API server and a real datapath; the node's engine goes
// silent (its heartbeats stop and its kwok is killed). It measures the fence →
// all 110 force-deleted, from the manager's NodeRecovery and the pods' delete
// events. Target ≤ 2 s with the manager's default client rate limit.
func TestBench_Reap110Pods(t *testing.T) {
	const pods = 110
	workDir := filepath.Join(os.TempDir(), "vigil-bench-110")
	must(t, sandbox.DownWorkDir(workDir))
	t.Cleanup(func() { _ = sandbox.DownWorkDir(workDir) })
	cfg := sandbox.Config{Name: "bench-110", WorkDir: workDir, Nodes: 2, Subnet: "10.213.200.0/24",
		NodeMonitorGracePeriod: 50 * time.Second, NodeMonitorPeriod: 5 * time.Second, DefaultTolerationSeconds: 300}
	cfg.Logf = t.Logf
	ctx := context.Background()
	s, err := sandbox.Up(ctx, cfg)
	must(t, err)
	c := s.Client()
	must(t, sandbox.InstallCRDs(ctx, s.RESTConfig()))
	for _, ns := range []string{vigil.Namespace, benchNS} {
		must(t, sandbox.EnsureNamespace(ctx, c, ns))
	}
	// A real datapath on loopback, heartbeats from the test for both nodes.
	dpDir := t.TempDir()
	tokenFile := filepath.Join(dpDir, "token")
	// The datapath's tokens file: the manager's controller token and one
	// engine token per node, for the test's heartbeats as that node.
	const ctlToken, node1Token, node2Token = "bench-110-controller-token", "bench-110-node-1-token", "bench-110-node-2-token"
	tokensFile := filepath.Join(dpDir, "tokens")
	must(t, os.WriteFile(tokensFile, []byte(datapath.FormatTokens([]datapath.TokenEntry{{Token: ctlToken},
		{Node: "node-1", Token: node1Token}, {Node: "node-2", Token: node2Token}})), 0o600))
	must(t, os.WriteFile(tokenFile, []byte(ctlToken+"\n"), 0o600))
	addr := freeLoopback(t)
	dpBin, err := filepath.Abs(filepath.Join(filepath.Dir(managerBin), sandbox.BinVigilDatapath))
	must(t, err)
	startChild(t, dpBin, "serve", "--listen", addr, "--data-dir", filepath.Join(dpDir, "data"), "--token-file", tokensFile)
	must(t, sandbox.Poll(ctx, 30*time.Second, "datapath answering", func(context.Context) (bool, string, error) {
		cn, err := net.Dial("tcp", addr)
		if err == nil {
			cn.Close()
		}
		return err == nil, fmt.Sprint(err), nil
	}, nil))
	nodeClients := map[string]*dpclient.Client{}
	for node, tok := range map[string]string{"node-1": node1Token, "node-2": node2Token} {
		nc, err := dpclient.Dial(ctx, addr, tok)
		must(t, err)
		defer nc.Close()
		nodeClients[node] = nc
	}
	var beating sync.Map
	beating.Store("node-1", true)
	beating.Store("node-2", true)
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	go func() {
		for hbCtx.Err() == nil {
			beating.Range(func(k, v any) bool {
				if v.(bool) {
					_ = nodeClients[k.(string)].Heartbeat(hbCtx, k.(string))
				}
				return true
			})
			time.Sleep(300 * time.Millisecond)
		}
	}()
	// 110 static Vigil volumes and a StatefulSet of 110 pods on node-1.
	for i := range pods {
		must(t, sandbox.CreateStaticVolume(ctx, c, benchNS, fmt.Sprintf("data-many-%d", i), "1Gi"))
	}
	w := sandbox.Workload{Namespace: benchNS, Name: "many", Nodes: []string{"node-1"}, StorageClass: sandbox.StaticClaimClass}
	sts := w.StatefulSet(pods)
	sts.Spec.PodManagementPolicy = "Parallel"
	_, err = c.AppsV1().StatefulSets(benchNS).Create(ctx, sts, metav1.CreateOptions{})
	must(t, err)
	must(t, sandbox.Poll(ctx, 6*time.Minute, "110 pods Running on node-1", func(ctx context.Context) (bool, string, error) {
		list, err := c.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == "node-1" {
				running++
			}
		}
		return running == pods, fmt.Sprintf("%d running", running), nil
	}, nil))
	store := "bolt:" + filepath.Join(t.TempDir(), "settings.db")
	e := &loopEnv{s: s, store: store}
	e.set(t, settings.NameNodeDownPodDeletionPolicy, string(settings.PolicyDeleteBoth))
	e.set(t, settings.NameFastFencedTrigger, "true")
	mgr := startManager(t, "bench-110", managerOpts{storeSpec: store, leaseNamespace: vigil.Namespace, leaseName: vigil.ManagerLeaseName,
		kubeconfig: s.Kubeconfig(), extra: append([]string{"--datapath", addr, "--datapath-token-file", tokenFile}, strings.Fields(os.Getenv("BENCH_MANAGER_FLAGS"))...)})
	rc, err := v1alpha1.NewForConfig(s.RESTConfig())
	must(t, err)
	e.rc = rc

	// Record every deletion of an original pod as the watch delivers it.
	list, err := c.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{})
	must(t, err)
	originals := map[string]bool{}
	for _, p := range list.Items {
		originals[string(p.UID)] = true
	}
	wi, err := c.CoreV1().Pods(benchNS).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	must(t, err)
	defer func() { wi.Stop() }()
	start := time.Now()
	beating.Store("node-1", false)
	must(t, s.Stop("node-1"))
	var last time.Time
	deleted := 0
	deadline := time.After(60 * time.Second)
	for deleted < pods {
		select {
		case ev, open := <-wi.ResultChan():
			if !open {
				// The API server ended the watch: count what is gone and watch on.
				list, err := c.CoreV1().Pods(benchNS).List(ctx, metav1.ListOptions{})
				must(t, err)
				present := map[string]bool{}
				for _, p := range list.Items {
					present[string(p.UID)] = true
				}
				for uid := range originals {
					if !present[uid] {
						delete(originals, uid)
						deleted++
						last = time.Now()
					}
				}
				t.Logf("the pod watch ended after %s; %d deleted so far", time.Since(start).Round(time.Millisecond), deleted)
				wi, err = c.CoreV1().Pods(benchNS).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
				must(t, err)
				continue
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == "DELETED" && originals[string(p.UID)] {
				delete(originals, string(p.UID))
				deleted++
				last = time.Now()
			}
		case <-deadline:
			_, metrics := mgr.get("/metrics")
			var decisions []string
			for _, l := range strings.Split(metrics, "\n") {
				if strings.HasPrefix(l, "vigil_reaper_decisions_total") || strings.HasPrefix(l, "vigil_nodes_") || strings.HasPrefix(l, "vigil_fences_total") {
					decisions = append(decisions, l)
				}
			}
			evs, _ := c.CoreV1().Events(benchNS).List(ctx, metav1.ListOptions{FieldSelector: "reason=VigilPodNotReaped"})
			var why []string
			for _, ev := range evs.Items {
				why = append(why, ev.InvolvedObject.Name+": "+ev.Message)
			}
			t.Fatalf("%d of %d pods deleted within 60 s\nmanager metrics:\n%s\nnot-reaped Events (%d):\n%s\nmanager log tail:\n%s",
				deleted, pods, strings.Join(decisions, "\n"), len(why), strings.Join(why, "\n"), mgr.tail())
		}
	}
	rec := e.waitRecovery(t, "node-1", start, v1alpha1.PhaseReaping, 30*time.Second)
	fenced := rec.Status.FencedAt.Time
	var first, lastReap time.Time
	for _, p := range rec.Status.Pods {
		if first.IsZero() || p.ReapedAt.Before(&metav1.MicroTime{Time: first}) {
			first = p.ReapedAt.Time
		}
		if p.ReapedAt.Time.After(lastReap) {
			lastReap = p.ReapedAt.Time
		}
	}
	t.Logf("the manager's own record: first reap %.3fs after the fence, last %.3fs (%d pods recorded)",
		first.Sub(fenced).Seconds(), lastReap.Sub(fenced).Seconds(), len(rec.Status.Pods))
	if b, err := os.ReadFile(mgr.log); err == nil {
		n := strings.Count(string(b), "client-side throttling")
		t.Logf("manager log: %d client-side throttling waits", n)
	}
	t.Logf("110 pods on one node: engine silent → fenced %.2fs; fence → all %d force-deleted %.3fs (last delete seen by the watch); NodeRecovery %s lists %d pods",
		fenced.Sub(start).Seconds(), pods, last.Sub(fenced).Seconds(), rec.Name, rec.Status.PodCount)
}

// freeLoopback returns a free 127.0.0.1 address.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

// startChild runs a command for the rest of the test (killed at its end), its
// output into the test's log directory.
func startChild(t *testing.T, bin string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), filepath.Base(bin)+".log"))
	must(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})
}
