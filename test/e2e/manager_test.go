package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// managerBin is the binary `make build` puts in bin/ (the e2e target builds it first).
var managerBin = filepath.Join("..", "..", "bin", "vigil-manager")

// manager is one `vigil-manager run` child process against the sandbox.
type manager struct {
	name string
	cmd  *exec.Cmd
	addr string // host:port of /metrics
	log  string // its stderr (and stdout after the address line)
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// managerOpts are the flags that differ between the suite's managers.
type managerOpts struct {
	store          string // bolt settings file
	storeSpec      string // the settings store, when not the bolt file store (configmap:NS/NAME)
	leaseNamespace string
	leaseName      string
	extra          []string // more flags of `run`
	kubeconfig     string   // the cluster and identity; default the shared sandbox's vigil-manager
}

// startManager runs bin/vigil-manager run on a free port and waits for its
// address line and /readyz. The process is stopped at the end of the test.
func startManager(t *testing.T, name string, o managerOpts) *manager {
	t.Helper()
	bin, err := filepath.Abs(managerBin)
	must(t, err)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing: run `make build` first (the e2e target does): %v", bin, err)
	}
	m := &manager{name: name, log: filepath.Join(t.TempDir(), name+".log"), done: make(chan struct{})}
	logf, err := os.Create(m.log)
	must(t, err)
	kubeconfig := o.kubeconfig
	if kubeconfig == "" {
		kubeconfig = managerKubeconfig
	}
	store := "bolt:" + o.store
	if o.storeSpec != "" {
		store = o.storeSpec
	}
	m.cmd = exec.Command(bin, "run", "--kubeconfig", kubeconfig, "--settings-store", store,
		"--listen", "127.0.0.1:0", "--leader-elect-lease-namespace", o.leaseNamespace,
		"--leader-elect-lease-name", o.leaseName, "--resync", "10m", "--state-dir", filepath.Join(t.TempDir(), "state"))
	m.cmd.Args = append(m.cmd.Args, o.extra...)
	m.cmd.Stderr = logf
	stdout, err := m.cmd.StdoutPipe()
	must(t, err)
	must(t, m.cmd.Start())
	go func() {
		m.err = m.cmd.Wait()
		logf.Close()
		close(m.done)
	}()
	t.Cleanup(func() { m.stop(t) })
	addr := make(chan string, 1)
	go scanAddress(stdout, logf, addr)
	select {
	case a := <-addr:
		m.addr = a
	case <-m.done:
		t.Fatalf("manager %s exited before serving: %v\n%s", name, m.err, m.tail())
	case <-time.After(20 * time.Second):
		t.Fatalf("manager %s printed no address line in 20s\n%s", name, m.tail())
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _ := m.get("/readyz"); code == http.StatusOK {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("manager %s: /readyz not OK in 20s\n%s", name, m.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// scanAddress reads the manager's stdout: the first line naming the address goes
// to addr, everything is copied to the log.
func scanAddress(r io.Reader, log io.Writer, addr chan<- string) {
	const marker = "on http://"
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, "stdout:", line)
		if i := strings.Index(line, marker); i >= 0 && !sent {
			addr <- strings.TrimSpace(line[i+len(marker):])
			sent = true
		}
	}
}

func (m *manager) get(path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + m.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of one sample of /metrics, named exactly as printed
// (labels sorted by name), and whether it is present.
func (m *manager) metric(t *testing.T, sample string) (float64, bool) {
	t.Helper()
	code, body := m.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("manager %s /metrics: %d %s", m.name, code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		key, val, ok := strings.Cut(line, " ")
		if !ok || key != sample {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			t.Fatalf("manager %s metric %s: bad value %q", m.name, sample, val)
		}
		return v, true
	}
	return 0, false
}

// hasSeries reports whether a sample of /metrics begins with prefix.
func (m *manager) hasSeries(t *testing.T, prefix string) bool {
	t.Helper()
	code, body := m.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("manager %s /metrics: %d %s", m.name, code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// metricValue is metric with an absent sample read as 0.
func (m *manager) metricValue(t *testing.T, sample string) float64 {
	v, _ := m.metric(t, sample)
	return v
}

// waitMetric polls /metrics until sample has value want.
func (m *manager) waitMetric(t *testing.T, sample string, want float64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := m.metricValue(t, sample)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("manager %s: %s = %v after %s, want %v", m.name, sample, got, timeout, want)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isLeader reports whether the manager's log says it acts as the leader.
func (m *manager) isLeader() bool {
	b, _ := os.ReadFile(m.log)
	return strings.Contains(string(b), "acting as leader")
}

// exited reports whether the process has ended.
func (m *manager) exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL (a crash: the Lease is not released) and waits for the exit.
func (m *manager) kill(t *testing.T) {
	t.Helper()
	must(t, m.cmd.Process.Signal(syscall.SIGKILL))
	<-m.done
}

var stopOnce sync.Map

// stop ends the manager with SIGTERM (it releases its Lease), SIGKILL after 10 s.
func (m *manager) stop(t *testing.T) {
	if _, dup := stopOnce.LoadOrStore(m, true); dup {
		return
	}
	select {
	case <-m.done:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		t.Errorf("manager %s ignored SIGTERM for 10s\n%s", m.name, m.tail())
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	if t.Failed() {
		t.Logf("manager %s log:\n%s", m.name, m.tail())
	}
}

// tail is the end of the manager's log, for failure messages.
func (m *manager) tail() string {
	b, err := os.ReadFile(m.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// setSetting runs `vigil-manager settings set NAME VALUE --store bolt:FILE`.
func setSetting(t *testing.T, store, name, value string) {
	t.Helper()
	bin, err := filepath.Abs(managerBin)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "settings", "set", "--store", "bolt:"+store, name, value).CombinedOutput()
	if err != nil {
		t.Fatalf("vigil-manager settings set %s %s: %v\n%s", name, value, err, out)
	}
}
