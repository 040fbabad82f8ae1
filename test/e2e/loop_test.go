package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
	"github.com/vigil-storage/vigil/settings"
)

// The closed-loop tests run a sandbox of their own with Vigil's whole stack and
// `vigil-manager run` wired to the datapath: nothing in these tests fences,
// taints, reaps or frees an attachment; the manager does all of it.
const (
	loopName      = "e2e-loop"
	loopSubnet    = "10.213.176.0/24"
	loopPodSubnet = "10.219.0.0/16"
	// The kwok loop's (TestLoopKwok).
	loopKwokName   = "e2e-loop-kwok"
	loopKwokSubnet = "10.213.177.0/24"
	loopNS         = "loop"
	loopNodes      = 3
	// loopSettings is the manager's settings ConfigMap, as in deploy/: the
	// manager reads and watches it; a person (the test, as admin) writes it.
	loopSettings = "vigil-settings"
)

// loopEnv is the closed-loop sandbox: the stack, the manager, and clients.
type loopEnv struct {
	s     *sandbox.Sandbox
	stk   *sandbox.Stack
	mgr   *manager
	store string // the manager's settings store: the ConfigMap of deploy/
	dp    *dpclient.Client
	rc    *v1alpha1.Client
	// mgrOpts is how mgr was started, to start another one like it.
	mgrOpts managerOpts
	// writer, on real nodes, is the container of the apps' pods: its Image
	// and WriterLedgerDir (sandbox.Workload); zero for the pause container.
	writer sandbox.Workload
}

// TestLoop is the end-to-end proof on real nodes: one sandbox of 3 real
// nodes (a kubelet, containerd, a CNI bridge and kube-proxy each, the engine
// inside each as its kubelet's CSI node plugin) for all of its cases, run in
// order (each leaves every node healthy and untainted for the next). Every
// application pod is a container of the writer image appending fsync'd
// records to its Vigil volume; the real kubelets stage, publish, unpublish
// and unstage. Policies, last, is the policy matrix's representative case
// (TestReaper_PolicyMatrix runs every policy on kwok nodes).
func TestLoop(t *testing.T) {
	e := upLoopWith(t, loopSpec{name: loopName, subnet: loopSubnet, workDir: "vigil-e2e-loop", realNodes: true, podSubnet: loopPodSubnet})
	runLoopCases(t, []loopCase{
		{"PowerCut", e.testRealPowerCut},
		{"Zombie", e.testZombie},
		{"ControlPlaneOutage", e.testControlPlaneOutage},
		{"DatapathOnlyCut", e.testDatapathOnlyCut},
		{"FenceNeverStrands", e.testFenceNeverStrands},
		{"GracefulEngineRestart", e.testGracefulEngineRestart},
		{"AttachmentPolicies", e.testAttachmentPolicies},
		{"DeleteClaim", e.testDeleteClaim},
		{"AccessModes", e.testAccessModes},
		{"UIRecovery", e.testUIRecovery},
		{"Policies", e.testRealPolicies},
	})
}

// TestLoopKwok is the closed loop on kwok nodes with the kubelet stand-in,
// for what only the control loop decides: the power cut's figure without a
// kubelet's node-status sync (beside TestLoop/PowerCut's on real nodes), and
// the crash-loop deletion, whose CrashLoopBackOff status the test writes as a
// kubelet would (a real kubelet would overwrite it, and a real crash loop
// takes minutes of back-off).
func TestLoopKwok(t *testing.T) {
	e := upLoop(t)
	runLoopCases(t, []loopCase{
		{"PowerCut", e.testPowerCut},
		{"CrashLoop", e.testCrashLoop},
	})
}

// loopCase is one case of a closed-loop sandbox.
type loopCase struct {
	name string
	run  func(*testing.T)
}

// runLoopCases runs cases in order; a failed case skips the ones after it,
// which share its sandbox.
func runLoopCases(t *testing.T, cases []loopCase) {
	for _, c := range cases {
		if !t.Run(c.name, c.run) {
			t.Logf("%s failed; the cases after it share its sandbox and are skipped", c.name)
			return
		}
	}
}

// loopSpec names a closed-loop sandbox and adds flags to its manager.
type loopSpec struct {
	name, subnet, workDir string
	managerArgs           []string
	// outageGrace is the datapath's --token-review-outage-grace; 0: its default.
	outageGrace time.Duration
	// realNodes runs real nodes (sandbox.KubeletReal) on podSubnet, the
	// applications' pods containers of the writer image; else kwok nodes.
	realNodes bool
	podSubnet string
}

// upLoop brings up the kwok loop sandbox: 3 nodes, the stack, the CRDs, and
// the manager with delete-both, the fast trigger and immediate attachment
// recovery.
func upLoop(t *testing.T) *loopEnv {
	return upLoopWith(t, loopSpec{name: loopKwokName, subnet: loopKwokSubnet, workDir: "vigil-e2e-loop-kwok"})
}

// upLoopWith is upLoop for the sandbox spec names (a name, subnet and work
// directory of its own, so it never meets another's leftovers).
func upLoopWith(t *testing.T, spec loopSpec) *loopEnv {
	t.Helper()
	workDir := filepath.Join(os.TempDir(), spec.workDir)
	must(t, sandbox.DownWorkDir(workDir))
	t.Cleanup(func() {
		if os.Getenv("VIGIL_E2E_KEEP") != "" && t.Failed() {
			return
		}
		if mps := mountsUnder(t, workDir); len(mps) > 0 {
			t.Errorf("after sandbox down, still mounted under %s: %v", workDir, mps)
		}
		if loops := loopsUnder(t, workDir); len(loops) > 0 {
			t.Errorf("after sandbox down, loop devices backed under %s: %v", workDir, loops)
		}
		if spec.realNodes {
			if left, err := sandbox.Leftovers(spec.name, workDir); err != nil || len(left) > 0 {
				t.Errorf("after sandbox down (%v): %s", err, strings.Join(left, "\n"))
			}
		}
	})
	cfg := sandbox.Config{Name: spec.name, WorkDir: workDir, Nodes: loopNodes, NodeMonitorGracePeriod: nodeMonitorGrace,
		DefaultTolerationSeconds: tolerationSeconds, Subnet: spec.subnet, AuditLog: true}
	var writer sandbox.Workload
	if spec.realNodes {
		writer = realLoopNodes(t, &cfg, spec.podSubnet)
	}
	t0 := time.Now()
	cfg.Logf = t.Logf
	downAtEnd(t, workDir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := sandbox.Up(ctx, cfg)
	if err != nil {
		t.Fatalf("sandbox up: %v", err)
	}
	t.Cleanup(func() {
		if err := collectAudit(s, spec.name); err != nil {
			t.Error(err)
		}
	})
	e := startLoop(t, ctx, s, spec)
	e.writer = writer
	t.Logf("%d %s nodes, the stack and the manager up in %.1fs", loopNodes, map[bool]string{true: "real", false: "kwok"}[spec.realNodes], time.Since(t0).Seconds())
	return e
}

// realLoopNodes makes cfg a sandbox of real nodes on podSubnet that imports
// the pause and writer images, and returns the applications' writer (its
// image and a ledger directory the writer, as sandbox.WriterUID, may write).
func realLoopNodes(t *testing.T, cfg *sandbox.Config, podSubnet string) sandbox.Workload {
	t.Helper()
	requireRealNodes(t)
	files, pause := realNodeImages(t, images.Pause, images.Writer)
	writerImage, err := images.Ref(images.Writer, "dev", nil)
	must(t, err)
	cfg.Kubelet, cfg.NodeImages, cfg.PauseImage, cfg.PodSubnet = sandbox.KubeletReal, files, pause, podSubnet
	ledgers := t.TempDir()
	must(t, os.Chmod(ledgers, 0o777))
	return sandbox.Workload{Image: writerImage, WriterLedgerDir: ledgers}
}

// startLoop runs the closed loop on sandbox s: the stack, the CRDs, the
// settings, and the manager.
func startLoop(t *testing.T, ctx context.Context, s *sandbox.Sandbox, spec loopSpec) *loopEnv {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin"))
	must(t, err)
	// DatapathServers 0, the host server: the cases cut a writer's node and
	// check its volume on the next node; a volume's data has one copy, which
	// a server on the cut node would take down with it.
	stk, err := s.StartStack(ctx, sandbox.StackConfig{VigilBinDir: bin, DatapathServers: 0,
		TokenReviewOutageGrace: spec.outageGrace})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	return startLoopOn(t, ctx, s, stk, spec.managerArgs)
}

// startLoopOn runs the closed loop on a running stack: the CRDs, the
// settings, and the manager (a host process, so on no node), with
// managerArgs added to its flags.
func startLoopOn(t *testing.T, ctx context.Context, s *sandbox.Sandbox, stk *sandbox.Stack, managerArgs []string) *loopEnv {
	t.Helper()
	must(t, sandbox.InstallCRDs(ctx, s.RESTConfig()))
	for _, ns := range []string{vigil.Namespace, loopNS} {
		must(t, sandbox.EnsureNamespace(ctx, s.Client(), ns))
	}
	e := &loopEnv{s: s, stk: stk, store: "configmap:" + vigil.Namespace + "/" + loopSettings}
	e.set(t, settings.NameNodeDownPodDeletionPolicy, string(settings.PolicyDeleteBoth))
	e.set(t, settings.NameFastFencedTrigger, "true")
	e.set(t, settings.NameVolumeAttachmentRecoveryPolicy, string(settings.RecoveryImmediate))
	var err error
	e.rc, err = v1alpha1.NewForConfig(s.RESTConfig())
	must(t, err)
	e.dp = dialStack(t, ctx, stk, stk.TokenFile)
	t.Cleanup(func() { _ = e.dp.Close() })
	checkStackIdentities(t, ctx, s, stk, e.dp)
	kubeconfig, err := s.ComponentKubeconfig(ctx, vigil.ManagerServiceAccount, "")
	must(t, err)
	tokenFile := filepath.Join(t.TempDir(), "api-token")
	must(t, os.WriteFile(tokenFile, []byte(loopAPIToken+"\n"), 0o600))
	e.mgrOpts = managerOpts{storeSpec: e.store, leaseNamespace: vigil.Namespace, leaseName: vigil.ManagerLeaseName,
		kubeconfig: kubeconfig, extra: append([]string{"--datapath", stk.DatapathAddr, "--datapath-token-file", stk.TokenFile,
			"--datapath-ca-file", stk.CAFile, "--api-token-file", tokenFile}, managerArgs...)}
	e.mgr = startManager(t, "loop", e.mgrOpts)
	return e
}

// loopAPIToken is the manager's REST API token in TestLoop.
const loopAPIToken = "e2e-loop-token-0123456789abcdef"

// set changes a setting the way an operator would: before the manager runs,
// `vigil-manager settings set` on the ConfigMap with the admin's kubeconfig;
// once it runs, through its REST API, which writes the ConfigMap under the
// manager's identity.
func (e *loopEnv) set(t *testing.T, name, value string) {
	t.Helper()
	if e.mgr == nil {
		bin, err := filepath.Abs(managerBin)
		must(t, err)
		out, err := exec.Command(bin, "settings", "set", "--store", e.store, "--kubeconfig", e.s.Kubeconfig(), name, value).CombinedOutput()
		if err != nil {
			t.Fatalf("settings set %s %s: %v: %s", name, value, err, out)
		}
		return
	}
	body, _ := json.Marshal(map[string]string{"value": value})
	req, err := http.NewRequest(http.MethodPut, "http://"+e.mgr.addr+"/v1/settings/"+name, bytes.NewReader(body))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+loopAPIToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	must(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("PUT /v1/settings/%s %q: %s %s", name, value, resp.Status, b)
	}
}

// loopApp is one StatefulSet of one pod on one dynamically provisioned claim.
type loopApp struct {
	name, claim, pv, handle string
}

// newLoopApp provisions the claim and starts the StatefulSet, preferring node.
func (e *loopEnv) newLoopApp(t *testing.T, name, node string) loopApp {
	t.Helper()
	return e.newLoopAppWith(t, name, node, nil)
}

// newLoopAppWith is newLoopApp with a change to the StatefulSet (nil: none)
// before it is created.
func (e *loopEnv) newLoopAppWith(t *testing.T, name, node string, change func(*appsv1.StatefulSet)) loopApp {
	t.Helper()
	a := e.newAppClaim(t, name)
	e.startLoopApp(t, a, node, change)
	return a
}

// startLoopApp starts app a's StatefulSet on its claim, preferring node,
// with a change to it (nil: none) before it is created.
func (e *loopEnv) startLoopApp(t *testing.T, a loopApp, node string, change func(*appsv1.StatefulSet)) {
	t.Helper()
	ctx := context.Background()
	c := e.s.Client()
	grace := int64(30)
	w := sandbox.Workload{Namespace: loopNS, Name: a.name, Prefer: []string{node}, Claims: []string{a.claim},
		TerminationGracePeriodSeconds: &grace, Image: e.writer.Image, WriterLedgerDir: e.writer.WriterLedgerDir}
	sts := w.StatefulSet(1)
	if change != nil {
		change(sts)
	}
	_, err := c.AppsV1().StatefulSets(loopNS).Create(ctx, sts, metav1.CreateOptions{})
	must(t, err)
}

// newAppClaim creates app name's claim and waits until it is bound.
func (e *loopEnv) newAppClaim(t *testing.T, name string) loopApp {
	t.Helper()
	ctx := context.Background()
	c := e.s.Client()
	a := loopApp{name: name, claim: name + "-data"}
	must(t, sandbox.CreateClaim(ctx, c, loopNS, a.claim, e.stk.StorageClass, "256Mi"))
	must(t, sandbox.WaitPVCsBound(ctx, c, loopNS, []string{a.claim}, 60*time.Second))
	pvc, err := c.CoreV1().PersistentVolumeClaims(loopNS).Get(ctx, a.claim, metav1.GetOptions{})
	must(t, err)
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	must(t, err)
	a.pv, a.handle = pv.Name, pv.Spec.CSI.VolumeHandle
	return a
}

// waitAppPod waits for a pod of app other than notUID, scheduled on a node other
// than notNode, and returns it.
func (e *loopEnv) waitAppPod(t *testing.T, app loopApp, notUID, notNode string, timeout time.Duration) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	must(t, sandbox.Poll(context.Background(), timeout, fmt.Sprintf("pod of %s not on %q", app.name, notNode), func(ctx context.Context) (bool, string, error) {
		pods, err := e.s.Client().CoreV1().Pods(loopNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app.name})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, p := range pods.Items {
			if string(p.UID) != notUID && p.DeletionTimestamp == nil && p.Spec.NodeName != "" && p.Spec.NodeName != notNode {
				pod = p
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d pods", len(pods.Items)), nil
	}, e.describe))
	return pod
}

func (e *loopEnv) describe(ctx context.Context) string {
	c := e.s.Client()
	out := sandbox.DescribePods(ctx, c, loopNS, "") + describeAttachments(ctx, c) + sandbox.DescribeNodes(ctx, c)
	if recs, err := e.rc.List(ctx, metav1.ListOptions{}); err == nil {
		for _, r := range recs.Items {
			out += fmt.Sprintf("NodeRecovery %s: node %s phase %s reason %s message %q pods %d attachments %d replacements %+v\n",
				r.Name, r.Spec.NodeName, r.Status.Phase, r.Status.Reason, r.Status.Message, len(r.Status.Pods), len(r.Status.Attachments), r.Status.Replacements)
		}
	}
	return out + "\n--- manager\n" + e.mgr.tail()
}

// waitVolumesInUse waits until node's status.volumesInUse lists the volume: the
// kubelet stand-in reported it mounted, so the attach-detach controller will
// not detach it on its own before its 6-minute timeout.
func (e *loopEnv) waitVolumesInUse(t *testing.T, node, handle string) {
	t.Helper()
	want := corev1.UniqueVolumeName("kubernetes.io/csi/" + vigil.DriverName + "^" + handle)
	must(t, sandbox.Poll(context.Background(), 30*time.Second, fmt.Sprintf("%s in %s's volumesInUse", want, node), func(ctx context.Context) (bool, string, error) {
		n, err := e.s.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for _, v := range n.Status.VolumesInUse {
			if v == want {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%v", n.Status.VolumesInUse), nil
	}, e.describe))
}

// waitRecovery waits for the NodeRecovery of node created after since to reach
// at least phase, and returns it.
func (e *loopEnv) waitRecovery(t *testing.T, node string, since time.Time, phase v1alpha1.Phase, timeout time.Duration) *v1alpha1.NodeRecovery {
	t.Helper()
	rec, err := waitNodeRecovery(context.Background(), e.rc, node, since, phase, timeout, e.describe)
	must(t, err)
	return rec
}

// waitNodeRecovery polls for the NodeRecovery of node detected after since
// (less a second) until it reaches at least phase, within timeout, and
// returns it; describe (or nil) adds diagnostics to the timeout's error.
func waitNodeRecovery(ctx context.Context, rc *v1alpha1.Client, node string, since time.Time, phase v1alpha1.Phase, timeout time.Duration,
	describe func(context.Context) string) (*v1alpha1.NodeRecovery, error) {
	var rec *v1alpha1.NodeRecovery
	err := sandbox.Poll(ctx, timeout, fmt.Sprintf("NodeRecovery of %s in phase %s", node, phase), func(ctx context.Context) (bool, string, error) {
		recs, err := rc.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		for i := range recs.Items {
			r := &recs.Items[i]
			if r.Spec.NodeName != node || r.Status.DetectedAt == nil || r.Status.DetectedAt.Time.Before(since.Add(-time.Second)) {
				continue
			}
			rec = r
			return v1alpha1.PhaseOrder(r.Status.Phase) >= v1alpha1.PhaseOrder(phase), string(r.Status.Phase), nil
		}
		return false, fmt.Sprintf("%d records, none for %s", len(recs.Items), node), nil
	}, describe)
	return rec, err
}

// grants returns node's row on the volume at the datapath.
func (e *loopEnv) grants(t *testing.T, handle string) map[string]datapath.Attachment {
	t.Helper()
	atts, err := e.dp.Attachments(context.Background(), handle)
	must(t, err)
	out := map[string]datapath.Attachment{}
	for _, a := range atts {
		out[a.Node] = a
	}
	return out
}

// waitNodeClean waits for node to be Ready, untainted and with nothing mounted
// or attached to a loop device under its directory.
func (e *loopEnv) waitNodeClean(t *testing.T, node string, tl *timeline) {
	t.Helper()
	dir := nodeDir(e.s, node)
	must(t, sandbox.Poll(context.Background(), 90*time.Second, node+" Ready, clean and untainted", func(ctx context.Context) (bool, string, error) {
		n, err := e.s.Client().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, "", nil // keep the last state seen as the note
		}
		now := time.Now()
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		tainted := fencedTaintOn(n)
		// A real node mounts its /var/lib, the kubelet's root and libcni's
		// cache in it (containerd's) for itself: what is left of volumes is
		// anything else.
		varLib := filepath.Dir(e.s.KubeletRoot(node))
		mps := slices.DeleteFunc(mountsUnder(t, dir), func(m string) bool {
			return m == varLib || m == e.s.KubeletRoot(node) || m == filepath.Join(varLib, "cni")
		})
		loops := loopsUnder(t, dir)
		if ready && tl != nil {
			tl.mark(node+" Ready", now)
		}
		if !tainted && tl != nil {
			tl.mark(node+"'s engine cleaned up and removed "+vigil.FencedTaintKey, now)
		}
		return ready && !tainted && len(mps) == 0 && len(loops) == 0,
			fmt.Sprintf("ready %t tainted %t mounts %v loops %v", ready, tainted, mps, loops), nil
	}, e.describe))
}

func fencedTaintOn(n *corev1.Node) bool {
	for _, tn := range n.Spec.Taints {
		if tn.Key == vigil.FencedTaintKey {
			return true
		}
	}
	return false
}

// readyStatus returns the node's Ready condition status as Kubernetes sees it.
func (e *loopEnv) readyStatus(t *testing.T, node string) corev1.ConditionStatus {
	t.Helper()
	n, err := e.s.Client().CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	must(t, err)
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// markRecovery adds the manager's own record of the recovery to the timeline.
func markRecovery(tl *timeline, rec *v1alpha1.NodeRecovery) {
	s := rec.Status
	type ev struct {
		at   time.Time
		what string
	}
	var evs []ev
	add := func(t *metav1.MicroTime, what string) {
		if t != nil {
			evs = append(evs, ev{t.Time, "manager: " + what})
		}
	}
	add(s.DetectedAt, "detected ("+s.Reason+")")
	add(s.FencedAt, fmt.Sprintf("fenced %d volume(s) at the datapath", len(s.Volumes)))
	add(s.TaintedAt, "tainted "+vigil.FencedTaintKey)
	for i := range s.Pods {
		add(&s.Pods[i].ReapedAt, "force-deleted pod "+s.Pods[i].Name+" ("+s.Pods[i].Trigger+")")
	}
	for i := range s.Attachments {
		add(&s.Attachments[i].FreedAt, s.Attachments[i].Action+" "+s.Attachments[i].Name)
	}
	for _, r := range s.Replacements {
		add(r.RunningAt, "saw replacement "+r.Name+" Running on "+r.NodeName)
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	for _, e := range evs {
		tl.mark(e.what, e.at)
	}
}

// testPowerCut: a node holding a StatefulSet's pod loses power. The manager
// sees its engine go silent at the datapath, fences and taints it, reaps the
// pod and frees its attachment; the replacement runs elsewhere with the data,
// long before Kubernetes calls the node NotReady. The node is started again:
// its engine cleans up and removes the taint, and the NodeRecovery closes.
func (e *loopEnv) testPowerCut(t *testing.T) {
	ctx := context.Background()
	app := e.newLoopApp(t, "pc", "node-1")
	podA := e.waitAppPod(t, app, "", "", 60*time.Second)
	victim := podA.Spec.NodeName
	epochA := waitAttached(t, ctx, e.s, app.pv, victim)
	targetA := waitPublished(t, ctx, e.s, victim, podA, app.pv)
	payload := writePayload(t, targetA)
	waitVolumesAttached(t, ctx, e.s, victim, app.handle)
	e.waitVolumesInUse(t, victim, app.handle)
	t.Logf("pod %s on %s, attached with epoch %d, published at %s", podA.Name, victim, epochA, targetA)

	start := time.Now()
	must(t, e.s.Stop(victim))
	tl := newTimeline(start)
	tl.mark("power cut of "+victim+" (kwok, engine, kubelet stand-in SIGKILLed)", time.Now())
	podB := e.waitAppPod(t, app, string(podA.UID), victim, 60*time.Second)
	nodeB := podB.Spec.NodeName
	tl.mark("replacement scheduled on "+nodeB, time.Now())
	epochB := waitAttached(t, ctx, e.s, app.pv, nodeB)
	tl.mark("replacement's VolumeAttachment attached on "+nodeB, time.Now())
	targetB := waitPublished(t, ctx, e.s, nodeB, podB, app.pv)
	tl.mark("replacement's volume staged and published on "+nodeB, time.Now())
	got, err := os.ReadFile(filepath.Join(targetB, stackPayload))
	if err != nil || !bytes.Equal(got, payload) {
		t.Errorf("on %s, %s holds %q (err %v), want %q written on %s before the power cut", nodeB, stackPayload, got, err, payload, victim)
	}
	dataAt := time.Now()
	tl.mark("data written before the power cut read on "+nodeB, dataAt)
	kubeSaw := e.readyStatus(t, victim)

	g := e.grants(t, app.handle)
	if a := g[victim]; a.Live() || a.Epoch <= epochA {
		t.Errorf("datapath: %s's row %+v, want fenced or released at an epoch above %d", victim, a, epochA)
	}
	if b := g[nodeB]; !b.Live() || b.Epoch != epochB || epochB <= g[victim].Epoch {
		t.Errorf("datapath: %s's row %+v, want a live grant of epoch %d above the fence", nodeB, b, epochB)
	}

	rec := e.waitRecovery(t, victim, start, v1alpha1.PhaseRecovered, 30*time.Second)
	e.checkRecovery(t, rec, app, podA.UID, podB.UID)
	markRecovery(tl, rec)
	t.Log(tl.table(fmt.Sprintf("Power cut of %s → replacement on %s, with nothing but Vigil acting (Kubernetes still said Ready=%s when the data was read)",
		victim, nodeB, kubeSaw)))
	t.Logf("figures: power cut → data readable on %s %.2fs; NodeRecovery %s: time to recover %s; epochs %s %d → fence %d → %s %d",
		nodeB, dataAt.Sub(start).Seconds(), rec.Name, rec.Status.TimeToRecover, victim, epochA, g[victim].Epoch, nodeB, epochB)
	if v, ok := e.mgr.metric(t, `vigil_fences_total{outcome="done"}`); !ok || v < 1 {
		t.Errorf("vigil_fences_total{outcome=\"done\"} = %v (present %t), want ≥ 1", v, ok)
	}

	boot := time.Now()
	must(t, e.s.Start(victim))
	tb := newTimeline(boot)
	tb.mark(victim+" started (new boot id)", time.Now())
	e.waitNodeClean(t, victim, tb)
	rec = e.waitRecovery(t, victim, start, v1alpha1.PhaseNodeReturned, 30*time.Second)
	if r := rec.Status.Return; r == nil || r.ReadyAt == nil || r.UntaintedAt == nil {
		t.Errorf("NodeRecovery %s return %+v, want Ready and untainted times", rec.Name, r)
	}
	t.Log(tb.table("Start of " + victim + " → its engine cleans up what the reaped pod left and removes the taint"))
	if _, err := os.Stat(targetA); err == nil {
		t.Errorf("the old pod's target path %s still exists on %s", targetA, victim)
	}
}

// checkRecovery checks the NodeRecovery's timeline against what happened.
func (e *loopEnv) checkRecovery(t *testing.T, rec *v1alpha1.NodeRecovery, app loopApp, reaped, replacement any) {
	t.Helper()
	s := rec.Status
	var problems []string
	if s.DetectedAt == nil || s.FencedAt == nil || s.TaintedAt == nil || s.RecoveredAt == nil || s.RecoverySeconds == nil {
		problems = append(problems, "a time is missing")
	}
	fenced := false
	for _, v := range s.Volumes {
		fenced = fenced || v.Handle == app.handle
	}
	if !fenced {
		problems = append(problems, "volume "+app.handle+" not listed as fenced")
	}
	var pods, repls []string
	for _, p := range s.Pods {
		pods = append(pods, string(p.UID))
	}
	for _, r := range s.Replacements {
		if r.RunningAt != nil {
			repls = append(repls, string(r.UID))
		}
	}
	if !strings.Contains(strings.Join(pods, ","), fmt.Sprint(reaped)) {
		problems = append(problems, fmt.Sprintf("reaped pods %v lack %v", pods, reaped))
	}
	if !strings.Contains(strings.Join(repls, ","), fmt.Sprint(replacement)) {
		problems = append(problems, fmt.Sprintf("running replacements %v lack %v", repls, replacement))
	}
	if len(s.Attachments) == 0 {
		problems = append(problems, "no attachment freed")
	}
	if len(problems) > 0 {
		t.Errorf("NodeRecovery %s: %s\n%+v", rec.Name, strings.Join(problems, "; "), s)
	}
}

// testDeleteClaim: deleting a workload and its claim frees everything, as a
// user of the cluster sees it: the pod goes, the kubelet stand-in unpublishes
// and unstages, the attachment is detached (ControllerUnpublish), and the
// external-provisioner deletes the volume at the datapath (DeleteVolume) and
// its PersistentVolume.
func (e *loopEnv) testDeleteClaim(t *testing.T) {
	ctx := context.Background()
	c := e.s.Client()
	app := e.newLoopApp(t, "del", "node-2")
	pod := e.waitAppPod(t, app, "", "", 60*time.Second)
	waitAttached(t, ctx, e.s, app.pv, pod.Spec.NodeName)
	waitPublished(t, ctx, e.s, pod.Spec.NodeName, pod, app.pv)
	t0 := time.Now()
	must(t, c.AppsV1().StatefulSets(loopNS).Delete(ctx, app.name, metav1.DeleteOptions{}))
	must(t, c.CoreV1().PersistentVolumeClaims(loopNS).Delete(ctx, app.claim, metav1.DeleteOptions{}))
	must(t, sandbox.Poll(ctx, 90*time.Second, "PersistentVolume "+app.pv+" deleted", func(ctx context.Context) (bool, string, error) {
		_, err := c.CoreV1().PersistentVolumes().Get(ctx, app.pv, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	}, e.describe))
	if v, err := e.dp.GetVolume(ctx, app.handle); !errors.Is(err, datapath.ErrNotFound) {
		t.Errorf("datapath volume %s after its claim was deleted: %+v, %v; want ErrNotFound", app.handle, v, err)
	}
	t.Logf("claim %s deleted: PersistentVolume %s and datapath volume %s gone %.1fs later", app.claim, app.pv, app.handle, time.Since(t0).Seconds())
}
