package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
)

// TestRealNodes_Smoke brings up a sandbox of 2 real nodes (kubelet,
// containerd, CNI, kube-proxy each) of its own: both become Ready; a pod of
// the tools image (not hostNetwork) on node-2 reaches the API server through
// the `kubernetes` Service's ClusterIP with its ServiceAccount token; a power
// cut of node-2 kills its container with the rest of the node; booted again,
// node-2 runs it again; the teardown leaves no process, mount, network
// namespace or cgroup behind.
func TestRealNodes_Smoke(t *testing.T) {
	requireRealNodes(t)
	nodeImages, pause := realNodeImages(t, images.Pause, images.Tools)
	ctx := context.Background()
	t0 := time.Now()
	s := upRealNodes(t, sandbox.Config{Name: "e2e-real", WorkDir: filepath.Join(os.TempDir(), "vigil-e2e-real"), Nodes: 2,
		NodeImages: nodeImages, PauseImage: pause, Subnet: "10.213.129.0/24", PodSubnet: "10.215.0.0/16"}, 3*time.Minute)
	t.Logf("2 real nodes Ready %.1fs after Up was called", time.Since(t0).Seconds())
	c := s.Client()
	for _, n := range []string{"node-1", "node-2"} {
		node, err := c.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		must(t, err)
		if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://") {
			t.Errorf("%s: container runtime %q, want containerd (a real kubelet reports it; kwok does not)", n, v)
		}
	}

	pod := apiProbePod("probe", "node-2")
	_, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	must(t, err)
	var podIP string
	must(t, sandbox.Poll(ctx, 90*time.Second, "pod probe Running and its answer from the API server in its log",
		func(ctx context.Context) (bool, string, error) {
			p, err := c.CoreV1().Pods("default").Get(ctx, "probe", metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, fmt.Sprintf("phase %v (%v)", phaseOf(p), err), nil
			}
			podIP = p.Status.PodIP
			log, err := c.CoreV1().Pods("default").GetLogs("probe", &corev1.PodLogOptions{}).DoRaw(ctx)
			return strings.Contains(string(log), "via "+sandbox.ServiceIP+":443") &&
					strings.Contains(string(log), "Client sent an HTTP request to an HTTPS server"),
				fmt.Sprintf("log %q (%v)", lastLine(string(log)), err), nil
		}, func(ctx context.Context) string {
			log, err := c.CoreV1().Pods("default").GetLogs("probe", &corev1.PodLogOptions{}).DoRaw(ctx)
			return fmt.Sprintf("%s\nlog of probe (%v):\n%s", sandbox.DescribePods(ctx, c, "default", ""), err, log)
		}))
	if !netip.MustParsePrefix("10.215.1.0/24").Contains(netip.MustParseAddr(podIP)) {
		t.Errorf("pod IP %s: want an address of node-2's pod network 10.215.1.0/24", podIP)
	}
	reportMemory(t, s)
	partitionCutsPods(t, ctx, s, "node-1")

	before, err := s.NodePIDs("node-2")
	must(t, err)
	container := containerPIDs(t, before, "sleep 2147483647")
	if len(container) == 0 {
		t.Fatalf("no process of the probe's container among node-2's %v", before)
	}
	must(t, s.Stop("node-2"))
	for _, pid := range before {
		if err := syscall.Kill(pid, 0); err == nil {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
				t.Errorf("process %d of node-2 (%s) survived the power cut", pid, cmdline(pid))
			}
		}
	}
	if left, err := s.NodePIDs("node-2"); err != nil || len(left) > 0 {
		t.Errorf("node-2's cgroup after the power cut: %v (%v)", left, err)
	}
	t.Logf("power cut of node-2 killed its %d processes, the probe's container %v among them", len(before), container)

	// Booted again, the node is Ready and its kubelet starts the pod's
	// container again: nothing of the previous boot (mounts, cgroups,
	// containerd's state) is in the way.
	t0 = time.Now()
	must(t, s.Start("node-2"))
	must(t, s.WaitNodeReady(ctx, 90*time.Second, corev1.ConditionTrue, "node-2"))
	must(t, sandbox.Poll(ctx, 90*time.Second, "pod probe running again on node-2", func(ctx context.Context) (bool, string, error) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "probe", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, fmt.Sprintf("%v", err), nil
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount > 0 && cs.State.Running != nil, fmt.Sprintf("restarts %d, state %+v", cs.RestartCount, cs.State), nil
	}, func(ctx context.Context) string { return sandbox.DescribePods(ctx, c, "default", "") }))
	after, err := s.NodePIDs("node-2")
	must(t, err)
	if len(containerPIDs(t, after, "sleep 2147483647")) == 0 {
		t.Errorf("the probe's container runs again, but not in node-2's cgroup: %v", after)
	}
	t.Logf("node-2 booted again: Ready and the probe's container running again %.1fs after the start", time.Since(t0).Seconds())
}

// apiProbePod is a pod of the tools image on node that sends an HTTP request
// to the `kubernetes` Service's ClusterIP and port until the API server
// answers it (with the Go HTTPS server's answer to plain HTTP: busybox's own
// TLS, the only one in the tools image, is refused by the API server with a
// handshake failure), then prints the answer and sleeps.
func apiProbePod(name, node string) *corev1.Pod {
	script := `until a=$(printf 'GET /version HTTP/1.0\r\n\r\n' | nc -w 3 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT") &&
	case "$a" in *"HTTPS server"*) true;; *) false;; esac; do sleep 1; done
echo "via $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT: $a"
exec sleep 2147483647`
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "probe", Image: images.ToolsRef,
				ImagePullPolicy: corev1.PullNever, Command: []string{"/bin/sh", "-c", script}}}},
	}
}

// partitionCutsPods cuts node off from the API server: the node goes
// NotReady, and a pod of it no longer reaches the API server through the
// `kubernetes` Service (the cut holds the pods' forwarded packets too);
// healed, the node is Ready and the pod reaches it again.
func partitionCutsPods(t *testing.T, ctx context.Context, s *sandbox.Sandbox, node string) {
	t.Helper()
	c := s.Client()
	script := `while true; do
	if a=$(printf 'GET /version HTTP/1.0\r\n\r\n' | nc -w 2 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT") &&
		case "$a" in *"HTTPS server"*) true;; *) false;; esac; then echo "reached $(date +%s)"; else echo "cut $(date +%s)"; fi
	sleep 1
done`
	pod := apiProbePod("loop", node)
	pod.Spec.Containers[0].Command = []string{"/bin/sh", "-c", script}
	_, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	must(t, err)
	// seen waits until the pod logged word at or after since (seconds).
	seen := func(word string, since int64, timeout time.Duration) error {
		return sandbox.Poll(ctx, timeout, fmt.Sprintf("pod loop on %s logging %q after %d", node, word, since), func(ctx context.Context) (bool, string, error) {
			log, err := c.CoreV1().Pods("default").GetLogs("loop", &corev1.PodLogOptions{}).DoRaw(ctx)
			for _, line := range strings.Split(string(log), "\n") {
				f := strings.Fields(line)
				if len(f) == 2 && f[0] == word {
					if ts, err := strconv.ParseInt(f[1], 10, 64); err == nil && ts >= since {
						return true, "", nil
					}
				}
			}
			return false, fmt.Sprintf("log %q (%v)", lastLine(string(log)), err), nil
		}, nil)
	}
	must(t, seen("reached", 0, 60*time.Second))
	cut := time.Now().Unix() + 1
	must(t, s.Partition(node, sandbox.PartitionAPIServer))
	must(t, s.WaitNodeReady(ctx, nodeMonitorGrace+20*time.Second, corev1.ConditionUnknown, node))
	must(t, seen("cut", cut, 30*time.Second))
	must(t, s.Heal(node))
	healed := time.Now().Unix() + 1
	must(t, s.WaitNodeReady(ctx, 60*time.Second, corev1.ConditionTrue, node))
	must(t, seen("reached", healed, 30*time.Second))
	t.Logf("partition of %s from the API server: NotReady, its pod cut off from the API server; healed: Ready, the pod reaches it", node)
}

// containerPIDs are the processes of pids whose command line holds marker.
func containerPIDs(t *testing.T, pids []int, marker string) []int {
	t.Helper()
	var out []int
	for _, pid := range pids {
		if strings.Contains(cmdline(pid), marker) {
			out = append(out, pid)
		}
	}
	return out
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// reportMemory logs the resident memory of every process of the sandbox.
func reportMemory(t *testing.T, s *sandbox.Sandbox) {
	t.Helper()
	pids, err := s.ProcessIDs()
	must(t, err)
	var total int64
	by := map[string]int64{}
	for _, pid := range pids {
		kb := rssKiB(pid)
		total += kb
		by[filepath.Base(strings.Fields(cmdline(pid) + " ?")[0])] += kb
	}
	var parts []string
	for k, v := range by {
		parts = append(parts, fmt.Sprintf("%s %d MiB", k, v/1024))
	}
	t.Logf("memory of the sandbox: %d processes, RSS %d MiB (%s)", len(pids), total/1024, strings.Join(parts, ", "))
}

func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

func phaseOf(p *corev1.Pod) corev1.PodPhase {
	if p == nil {
		return ""
	}
	return p.Status.Phase
}

// requireRealNodes stops the test when a prerequisite of real nodes is
// missing (a failure under CI=true).
func requireRealNodes(t *testing.T) {
	t.Helper()
	sandbox.RequireRoot(t)
	for _, p := range sandbox.RealNodePrerequisites {
		_, err := exec.LookPath(p.Path)
		sandbox.RequirePrerequisite(t, err == nil, p.Path+" (Debian: "+p.Install+")")
	}
}

// upRealNodes brings up cfg's sandbox of real nodes (the kubelet mode, the
// control plane's grace periods and t.Logf filled in) within timeout, after
// removing a crashed run's leftover in cfg.WorkDir. At the end of the test it
// takes it down and checks that nothing is left behind, or leaves it up for
// its logs when the test failed and VIGIL_E2E_KEEP is set.
func upRealNodes(t *testing.T, cfg sandbox.Config, timeout time.Duration) *sandbox.Sandbox {
	t.Helper()
	cfg.Kubelet = sandbox.KubeletReal
	cfg.NodeMonitorGracePeriod = nodeMonitorGrace
	cfg.DefaultTolerationSeconds = tolerationSeconds
	cfg.Logf = t.Logf
	must(t, sandbox.DownWorkDir(cfg.WorkDir)) // a crashed run's leftover
	t.Cleanup(func() {
		if os.Getenv("VIGIL_E2E_KEEP") != "" && t.Failed() {
			t.Logf("VIGIL_E2E_KEEP: sandbox left in %s", cfg.WorkDir)
			return
		}
		if err := sandbox.DownWorkDir(cfg.WorkDir); err != nil {
			t.Errorf("sandbox down: %v", err)
		}
		left, err := sandbox.Leftovers(cfg.Name, cfg.WorkDir)
		if err != nil || len(left) > 0 {
			t.Errorf("after down (%v): %s", err, strings.Join(left, "\n"))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := sandbox.Up(ctx, cfg)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	return s
}

// realNodeImages builds the images named by only (sandbox/images; the pause
// image among them) for real nodes to import, and returns their tarballs and
// the pause image's reference.
func realNodeImages(t *testing.T, only ...string) ([]string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	res, err := images.Build(ctx, images.Options{Out: t.TempDir(), Only: only, SourceDir: filepath.Join("..", "..")})
	if err != nil {
		t.Fatalf("build the node images: %v", err)
	}
	var files []string
	for _, r := range res {
		files = append(files, r.File)
	}
	pause, err := images.Ref(images.Pause, "dev", nil)
	must(t, err)
	t.Logf("node images %v built in %.1fs", files, time.Since(t0).Seconds())
	return files, pause
}
