package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
)

// Report is the benchmark's outcome (scale-report.json).
type Report struct {
	Config  Config     `json:"config"`
	Setup   []step     `json:"setup"`
	Failure Failure    `json:"failure"`
	Manager ManagerUse `json:"manager"`
	// APIRequests: the requests the manager made from the cut to the end of
	// the measurement, by verb and resource, from the API server's audit log
	// (the manager runs as its own ServiceAccount).
	APIRequests map[string]float64 `json:"apiRequests"`
	Processes   []Process          `json:"processes"`
}

// ManagerUse is the manager's footprint: Start is how long it took to be
// ready, StartRSS and StartPeak its memory then; the rest is over the
// measurement (Peak is the peak of its whole life).
type ManagerUse struct {
	Start     time.Duration `json:"start"`
	StartRSS  int64         `json:"startRSSBytes"`
	StartPeak int64         `json:"startPeakBytes"`
	RSS       int64         `json:"rssBytes"`
	Peak      int64         `json:"peakBytes"`
	CPU       time.Duration `json:"cpu"`
	Interval  time.Duration `json:"interval"`
}

// TestScale_RackFailure is `make bench-scale` (see the package documentation);
// without SCALE_* it runs the smoke size.
func TestScale_RackFailure(t *testing.T) {
	sandbox.RequireRoot(t)
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sandbox.CheckBinaries(sandbox.BinDir()); err != nil {
		t.Fatal(err)
	}
	workDir := filepath.Join(os.TempDir(), "vigil-scale")
	if err := sandbox.DownWorkDir(workDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("SCALE_KEEP") != "" {
			t.Logf("SCALE_KEEP: sandbox left in %s (KUBECONFIG=%s/kubeconfig); bin/vigil-sandbox --name %s --workdir %s down removes it",
				workDir, workDir, sandboxName, workDir)
			return
		}
		if err := sandbox.DownWorkDir(workDir); err != nil {
			t.Errorf("sandbox down: %v", err)
		}
	})
	ctx := context.Background()
	t.Logf("scale: %d racks of %d nodes, %d pods, %d protected", cfg.Racks, cfg.RackSize, cfg.Pods, cfg.Protected)
	w, err := setup(ctx, cfg, workDir, bin, t.Logf)
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	rep := &Report{Config: cfg, Setup: w.steps, Processes: w.controlPlane(ctx)}
	defer writeReport(t, rep)
	store := settingsStore(workDir)
	for _, kv := range [][2]string{{"node-down-pod-deletion-policy", "delete-both-statefulset-and-deployment-pod"},
		{"fast-fenced-trigger", "true"}, {"volume-attachment-recovery-policy", "immediate"}} {
		if out, err := exec.Command(filepath.Join(bin, sandbox.BinVigilManager), "settings", "set", "--store", "bolt:"+store,
			kv[0], kv[1]).CombinedOutput(); err != nil {
			t.Fatalf("settings set %s: %v: %s", kv[0], err, out)
		}
	}
	kubeconfig, err := w.sb.ComponentKubeconfig(ctx, vigil.ManagerServiceAccount, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.ReportDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	mgr, addr := startManager(t, filepath.Join(bin, sandbox.BinVigilManager), filepath.Join(cfg.ReportDir, "manager.log"),
		"--kubeconfig", kubeconfig, "--settings-store", "bolt:"+store,
		"--state-dir", filepath.Join(workDir, "manager-state"), "--listen", "127.0.0.1:0", "--leader-elect=false",
		"--datapath", w.stk.DatapathAddr, "--datapath-token-file", w.stk.TokenFile,
		"--datapath-ca-file", w.stk.CAFile)
	// The measurement starts once the manager is ready (its informers have
	// listed every pod): a power cut before that would time its start.
	if err := sandbox.Poll(ctx, 5*time.Minute, "manager /readyz", func(ctx context.Context) (bool, string, error) {
		code, body := getStatus(ctx, "http://"+addr+"/readyz")
		return code == 200, fmt.Sprintf("%d %s", code, body), nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	rep.Manager.Start = time.Since(t0)
	rep.Manager.StartRSS, rep.Manager.StartPeak = memOf(mgr.Process.Pid)
	t.Logf("scale: manager ready %.1fs after its start (RSS %.1f MiB, peak %.1f)", rep.Manager.Start.Seconds(),
		mib(rep.Manager.StartRSS), mib(rep.Manager.StartPeak))
	time.Sleep(5 * time.Second) // a settled start: the figures below are the failure's
	beforeCPU, _ := cpuTicks(mgr.Process.Pid)
	f, cut, err := w.cutAndMeasure(ctx, 10*time.Minute)
	rep.Failure = f
	afterCPU, _ := cpuTicks(mgr.Process.Pid)
	rss, peak := memOf(mgr.Process.Pid)
	end := time.Now()
	rep.Manager.RSS, rep.Manager.Peak = rss, peak
	rep.Manager.CPU, rep.Manager.Interval = time.Duration(afterCPU-beforeCPU)*10*time.Millisecond, end.Sub(cut)
	var rerr error
	if rep.APIRequests, rerr = w.managerRequests(cut, end); rerr != nil {
		t.Errorf("count the manager's requests: %v", rerr)
	}
	rep.Processes = w.controlPlane(ctx)
	if err != nil {
		t.Fatalf("rack failure: %v (measured so far: %+v)", err, f)
	}
}

// startManager runs `vigil-manager run` with args until the end of the test,
// its output in logPath, and returns it with the address it serves on.
func startManager(t *testing.T, bin, logPath string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"run"}, args...)...)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
		t.Logf("manager log: %s", logPath)
	})
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(logf, "stdout:", sc.Text())
			if _, addr, ok := strings.Cut(sc.Text(), " on http://"); ok {
				serving <- strings.TrimSpace(addr)
			}
		}
	}()
	select {
	case addr := <-serving:
		return cmd, addr
	case <-time.After(60 * time.Second):
		t.Fatalf("manager printed no address in 60s (log %s)", logPath)
		return nil, ""
	}
}

// getStatus GETs url and returns the status code and the first line of the
// body (0 and the error when there is no answer).
func getStatus(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	line, _, _ := strings.Cut(string(b), "\n")
	return resp.StatusCode, line
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// writeReport logs the report as tables and writes scale-report.json.
func writeReport(t *testing.T, rep *Report) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n| setup step (%d nodes, %d pods, %d protected) | s |\n| --- | ---: |\n", rep.Config.Nodes(), rep.Config.Pods, rep.Config.Protected)
	for _, s := range rep.Setup {
		fmt.Fprintf(&b, "| %s | %.1f |\n", s.Name, s.Duration.Seconds())
	}
	f := rep.Failure
	fmt.Fprintf(&b, "\nPower cut of %s (%d nodes, %d pods, %d covered): complete %v\n\n| event | s after the cut |\n| --- | ---: |\n",
		f.Rack, f.Nodes, f.PodsOnRack, f.CoveredPods, f.Complete)
	fmt.Fprintf(&b, "| the manager detected every node of the rack (%d NodeRecovery records, %v) | %.1f |\n| ... and fenced them | %.1f |\n",
		f.Recoveries, f.Reasons, f.ManagerDetection.Seconds(), f.ManagerFenced.Seconds())
	fmt.Fprintf(&b, "| Kubernetes: every node of the rack Ready=Unknown | %.1f |\n| every covered pod reaped (%d) | %.1f |\n| every replacement scheduled (%d) | %.1f |\n",
		f.Detection.Seconds(), f.Reaped, f.ReapedAt.Seconds(), f.Replacements, f.ScheduledAt.Seconds())
	fmt.Fprintf(&b, "\nEvery covered pod reaped %.1f s after the detection.\n", f.ReapedAfterDetection.Seconds())
	fmt.Fprintf(&b, "\nManager ready %.1f s after its start (RSS %.1f MiB, peak %.1f).\n", rep.Manager.Start.Seconds(), mib(rep.Manager.StartRSS), mib(rep.Manager.StartPeak))
	fmt.Fprintf(&b, "\nManager over %.1f s: RSS %.1f MiB (peak %.1f), CPU %.2f s.\n\n| manager's API requests (audit log) | count |\n| --- | ---: |\n",
		rep.Manager.Interval.Seconds(), mib(rep.Manager.RSS), mib(rep.Manager.Peak), rep.Manager.CPU.Seconds())
	var requests float64
	for _, k := range sortedKeys(rep.APIRequests) {
		requests += rep.APIRequests[k]
		fmt.Fprintf(&b, "| %s | %.0f |\n", k, rep.APIRequests[k])
	}
	fmt.Fprintf(&b, "| total | %.0f |\n", requests)
	b.WriteString("\n| process | RSS MiB | peak MiB |\n| --- | ---: | ---: |\n")
	var total int64
	for _, p := range rep.Processes {
		total += p.RSS
		fmt.Fprintf(&b, "| %s | %.1f | %.1f |\n", p.Name, mib(p.RSS), mib(p.Peak))
	}
	fmt.Fprintf(&b, "| total | %.1f | |\n", mib(total))
	t.Log(b.String())
	if err := os.MkdirAll(rep.Config.ReportDir, 0o755); err != nil {
		t.Error(err)
		return
	}
	js, _ := json.MarshalIndent(rep, "", "  ")
	p := filepath.Join(rep.Config.ReportDir, "scale-report.json")
	if err := os.WriteFile(p, js, 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("scale report: %s", p)
}
