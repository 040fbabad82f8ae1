package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vigil "github.com/vigil-storage/vigil"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
)

// The suite's sandbox: a name, subnet and work directory of its own, so that it
// never meets the end-to-end suite's sandboxes.
const (
	sandboxName   = "chaos"
	sandboxSubnet = "10.213.192.0/24"
	sandboxNodes  = 5
	// nodeMonitorGrace is the sandbox's node-monitor-grace-period.
	nodeMonitorGrace = 10 * time.Second
	// connectivityThreshold is datapath-connectivity-loss-threshold's default.
	connectivityThreshold = 3 * time.Second
	podGrace              = int64(5)
	statefulSetName       = "db"
	deploymentName        = "app"
	deploymentClaim       = "app-data"
	volumeSize            = "256Mi"
)

// Harness is one run of the suite: the sandbox with Vigil's stack, two managers,
// the workload and its writers, and what it observed.
type Harness struct {
	Logf    func(format string, args ...any)
	sb      *sandbox.Sandbox
	stk     *sandbox.Stack
	dp      *dpclient.Client
	dir     string // the suite's own files: ledgers, settings, manager logs
	bin     string // Vigil's binaries (make build)
	loop    bool
	mgrs    []*manager
	hist    *history
	mem     *memory
	stopBG  func()
	mu      sync.Mutex
	writers map[types.UID]*writer
	claims  map[string]claimInfo // by claim name
	cut     map[string]sandbox.PartitionTarget
	off     map[string]bool
	// group is what was seen of the datapath's group of servers on nodes;
	// nil with the one host server.
	group *groupState
}

// claimInfo is what the suite needs of a bound claim.
type claimInfo struct {
	PV, Handle string
}

// Setup brings the run's world up: sandbox and stack under workDir, settings,
// two managers, the workload, one writer per pod. On error the caller's
// cleanup (Teardown, then sandbox.DownWorkDir) removes what was made.
//
// With powerLoss the datapath's data directory lives on the power-loss layer
// (sandbox.StackConfig.DatapathPowerLoss), which DatapathPowerCut needs. With
// servers > 0 the datapath is that many servers on the first nodes
// (sandbox.StackConfig.DatapathServers), which ServerKinds need.
func Setup(ctx context.Context, workDir, vigilBin string, powerLoss bool, servers int, logf func(string, ...any)) (*Harness, error) {
	h := &Harness{Logf: logf, dir: filepath.Join(workDir, "chaos"), bin: vigilBin, hist: newHistory(), mem: newMemory(),
		writers: map[types.UID]*writer{}, claims: map[string]claimInfo{}, cut: map[string]sandbox.PartitionTarget{},
		off: map[string]bool{}}
	t0 := time.Now()
	sb, err := sandbox.Up(ctx, sandbox.Config{Name: sandboxName, WorkDir: workDir, Nodes: sandboxNodes,
		NodeMonitorGracePeriod: nodeMonitorGrace, Subnet: sandboxSubnet, AuditLog: true, Logf: logf})
	if err != nil {
		return nil, fmt.Errorf("sandbox up: %w", err)
	}
	h.sb = sb
	if h.stk, err = sb.StartStack(ctx, sandbox.StackConfig{VigilBinDir: vigilBin, DatapathPowerLoss: powerLoss,
		DatapathServers: servers}); err != nil {
		return h, fmt.Errorf("start stack: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(h.dir, "ledger"), 0o755); err != nil {
		return h, err
	}
	if h.dp, err = dialGroup(ctx, h.stk); err != nil {
		return h, fmt.Errorf("datapath client: %w", err)
	}
	if servers > 0 {
		if h.group, err = h.newGroupState(ctx); err != nil {
			return h, err
		}
	}
	logf("chaos: sandbox and stack up in %.1fs", time.Since(t0).Seconds())
	if err := h.startManagers(); err != nil {
		return h, err
	}
	if err := h.createWorkload(ctx); err != nil {
		return h, err
	}
	if err := h.createProbe(ctx); err != nil {
		return h, err
	}
	h.startBackground()
	if err := h.awaitProgress(ctx, time.Now(), 3*time.Minute); err != nil {
		return h, fmt.Errorf("workload never wrote: %w", err)
	}
	logf("chaos: workload of %d pods writing, %.1fs after the start", len(h.claims), time.Since(t0).Seconds())
	return h, nil
}

// Loop reports whether the managers fence and reap by themselves.
func (h *Harness) Loop() bool { return h.loop }

// startManagers writes the settings of a closed-loop run, installs Vigil's CRDs
// (the managers record each recovery in a NodeRecovery) and starts two managers.
func (h *Harness) startManagers() error {
	mgr := filepath.Join(h.bin, sandbox.BinVigilManager)
	loop, err := managerHasLoop(mgr)
	if err != nil {
		return err
	}
	h.loop = loop
	store := filepath.Join(h.dir, "settings.db")
	for _, kv := range [][2]string{{"node-down-pod-deletion-policy", "delete-both-statefulset-and-deployment-pod"},
		{"fast-fenced-trigger", "true"}, {"volume-attachment-recovery-policy", "immediate"}} {
		out, err := exec.Command(mgr, "settings", "set", "--store", "bolt:"+store, kv[0], kv[1]).CombinedOutput()
		if err != nil {
			return fmt.Errorf("vigil-manager settings set %s %s: %v: %s", kv[0], kv[1], err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sandbox.EnsureNamespace(ctx, h.sb.Client(), namespace); err != nil {
		return err
	}
	if err := sandbox.InstallCRDs(ctx, h.sb.RESTConfig()); err != nil {
		return err
	}
	// The managers run as deploy/'s vigil-manager, as in a cluster.
	kubeconfig, err := h.sb.ComponentKubeconfig(ctx, vigil.ManagerServiceAccount, "")
	if err != nil {
		return err
	}
	for _, name := range []string{"manager-a", "manager-b"} {
		args := managerArgs(mgr, kubeconfig, store, filepath.Join(h.dir, name), h.stk, loop)
		m := newManager(name, args, h.dir)
		h.mgrs = append(h.mgrs, m)
		if err := m.start(); err != nil {
			return err
		}
	}
	h.Logf("chaos: two managers running (closed loop: %v)", loop)
	return nil
}

// createWorkload creates a StatefulSet of 3 (a volumeClaimTemplate, one pod per
// node) and a Deployment of 1 on its own claim, all on RWO volumes of the stack's
// StorageClass. The claims, the StatefulSet's included, are created first and
// bound before any pod exists: a pod the scheduler first sees with an unbound
// claim can wait minutes before it is tried again.
func (h *Harness) createWorkload(ctx context.Context) error {
	c := h.sb.Client()
	grace := podGrace
	names := []string{deploymentClaim}
	for i := range 3 {
		names = append(names, fmt.Sprintf("data-%s-%d", statefulSetName, i))
	}
	for _, n := range names {
		if err := sandbox.CreateClaim(ctx, c, namespace, n, h.stk.StorageClass, volumeSize); err != nil {
			return err
		}
	}
	if err := sandbox.WaitPVCsBound(ctx, c, namespace, names, 2*time.Minute); err != nil {
		return err
	}
	for _, n := range names {
		pvc, err := c.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pv.Spec.CSI == nil {
			return fmt.Errorf("PV %s of claim %s has no CSI source", pv.Name, n)
		}
		h.claims[n] = claimInfo{PV: pv.Name, Handle: pv.Spec.CSI.VolumeHandle}
	}
	ss := sandbox.Workload{Namespace: namespace, Name: statefulSetName, StorageClass: h.stk.StorageClass, Size: volumeSize,
		Spread: true, TerminationGracePeriodSeconds: &grace}
	// Parallel: the StatefulSet controller recreates a reaped pod without
	// waiting for its siblings to be Ready. With the default OrderedReady a
	// reaped db-1 waited forever once db-0 had been marked Ready=False by the
	// node controller (an API server restart marks every node NotReady for a
	// moment): kwok, the sandbox's kubelet, never reports a pod Ready again,
	// where a real kubelet would. What Vigil does is the same either way.
	set := ss.StatefulSet(3)
	set.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	if _, err := c.AppsV1().StatefulSets(namespace).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create StatefulSet: %w", err)
	}
	dep := sandbox.Workload{Namespace: namespace, Name: deploymentName, Claims: []string{deploymentClaim},
		TerminationGracePeriodSeconds: &grace}
	if _, err := c.AppsV1().Deployments(namespace).Create(ctx, dep.Deployment(1), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Deployment: %w", err)
	}
	return nil
}

// startBackground runs, every 500 ms until Teardown: the writers' reconcile
// (start for new pods, stop for deleted ones, as a kubelet would) and a poll of
// the datapath's attachment rows of every volume; and, on a loop of its own so
// that nothing the others wait for can hold it up, the managers' supervisor.
func (h *Harness) startBackground() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	every := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				f(ctx)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	every(func(ctx context.Context) {
		start := time.Now()
		h.reconcileWriters(ctx)
		h.pollAttachments(ctx)
		if d := time.Since(start); d > 10*time.Second {
			h.Logf("chaos: one round of the writers' reconcile and the attachment poll took %.1fs", d.Seconds())
		}
	})
	every(h.superviseManagers)
	if h.group != nil {
		every(h.pollGroup)
	}
	h.stopBG = func() { cancel(); wg.Wait() }
}

// superviseManagers starts a manager that exited again, as its Deployment
// would: a leader exits when it loses its Lease (an API server restart longer
// than its renew deadline), and a fault may SIGKILL it.
func (h *Harness) superviseManagers(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	for _, m := range h.mgrs {
		if !m.running() {
			h.Logf("chaos: manager %s exited (%s); starting it again", m.name, m.exitStatus())
			if err := m.start(); err != nil {
				h.Logf("chaos: restart manager %s: %v", m.name, err)
			}
		}
	}
}

// managerRestarts is how many times the managers were started again so far.
func (h *Harness) managerRestarts() int {
	n := 0
	for _, m := range h.mgrs {
		n += m.restarts()
	}
	return n
}

// pollAttachments records the attachment rows of every workload volume.
func (h *Harness) pollAttachments(ctx context.Context) {
	for _, ci := range h.claimList() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		atts, err := h.dp.Attachments(cctx, ci.Handle)
		cancel()
		if err == nil {
			h.hist.observe(ci.Handle, atts)
		}
	}
}

func (h *Harness) claimList() []claimInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]claimInfo, 0, len(h.claims))
	for _, ci := range h.claims {
		out = append(out, ci)
	}
	return out
}

// env is what the next fault may be drawn from.
func (h *Harness) env(ctx context.Context) (Env, error) {
	e := Env{Thresholds: Thresholds{NodeMonitorGrace: nodeMonitorGrace, Connectivity: connectivityThreshold}, Loop: h.loop}
	for _, s := range h.stk.DatapathServers {
		e.Servers = append(e.Servers, s.Node)
	}
	sort.Strings(e.Servers)
	for i := range sandboxNodes {
		e.Nodes = append(e.Nodes, sandbox.NodeName(i))
	}
	pods, err := h.workloadPods(ctx)
	if err != nil {
		return e, err
	}
	seen := map[string]bool{}
	for _, p := range pods {
		if p.Labels["app"] == uncoveredApp {
			continue // lives for one cycle: the draws stay those of the covered workload
		}
		if p.Spec.NodeName != "" && !seen[p.Spec.NodeName] {
			seen[p.Spec.NodeName] = true
			e.PodNodes = append(e.PodNodes, p.Spec.NodeName)
		}
	}
	sort.Strings(e.PodNodes)
	return e, nil
}

// workloadPods lists the pods of the StatefulSet and the Deployment, and the
// uncovered pod of a FenceUncoveredPod cycle.
func (h *Harness) workloadPods(ctx context.Context) ([]corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := h.sb.Client().CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app in (" + statefulSetName + "," + deploymentName + "," + uncoveredApp + ")"})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// sampleMemory records the RSS of the managers, the engines and the datapath.
func (h *Harness) sampleMemory(cycle int) {
	for _, m := range h.mgrs {
		h.mem.sample(cycle, "manager", m.pid())
	}
	for i := range sandboxNodes {
		if pid, err := h.sb.ProcessPID(sandbox.NodeName(i), sandbox.StackEngine); err == nil {
			h.mem.sample(cycle, "engine "+sandbox.NodeName(i), pid)
		}
	}
	if pid, err := h.sb.ProcessPID("", sandbox.StackDatapath); err == nil {
		h.mem.sample(cycle, "datapath", pid)
	}
	for _, s := range h.stk.DatapathServers {
		if pid, err := h.sb.ProcessPID(s.Node, sandbox.StackDatapath); err == nil {
			h.mem.sample(cycle, "datapath "+s.Node, pid)
		}
	}
}

// Teardown stops the background loop and the managers (the sandbox's Down kills
// the rest).
func (h *Harness) Teardown() {
	if h.stopBG != nil {
		h.stopBG()
		h.stopBG = nil
	}
	for _, m := range h.mgrs {
		m.stop()
	}
	if h.dp != nil {
		h.dp.Close()
	}
	if h.group != nil {
		h.group.close()
	}
}
