package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
)

// namespace holds the suite's workload. The managers' Lease is deploy/'s
// (vigil-system/vigil-manager): the managers run as deploy/'s vigil-manager,
// whose role allows that Lease only.
const namespace = "chaos"

// manager is one `vigil-manager run` child process. Each incarnation logs to a
// file of its own, so "acting as leader" in it means this process leads.
type manager struct {
	name string
	args []string
	log  string
	mu   sync.Mutex // guards what follows: the supervisor restarts a manager that exited
	cmd  *exec.Cmd
	done chan struct{}
	n    int // incarnation
}

// managerArgs is the command line of the suite's managers: short Lease timings,
// so that a SIGKILLed leader is replaced within seconds.
//
// When `vigil-manager run` has the datapath flags (--datapath,
// --datapath-token-file) they are passed with the stack's CA, and the manager
// fences, reaps and frees attachments by itself (the closed loop); a manager
// without them runs without a datapath, and the faults that need the loop are
// not drawn.
func managerArgs(bin, kubeconfig, store, stateDir string, stk *sandbox.Stack, loop bool) []string {
	args := []string{bin, "run", "--kubeconfig", kubeconfig, "--settings-store", "bolt:" + store, "--state-dir", stateDir,
		"--listen", "127.0.0.1:0", "--leader-elect-lease-namespace", vigil.Namespace, "--leader-elect-lease-name", vigil.ManagerLeaseName,
		"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "1s"}
	if loop {
		args = append(args, "--datapath", stk.DatapathAddr, "--datapath-token-file", stk.TokenFile, "--datapath-ca-file", stk.CAFile)
	}
	return args
}

// managerHasLoop reports whether bin's `run` takes the datapath flags, i.e.
// whether the manager can fence by itself.
func managerHasLoop(bin string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "run", "--help").CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("%s run --help: %v: %s", bin, err, out)
	}
	return strings.Contains(string(out), "--datapath-token-file"), nil
}

func newManager(name string, args []string, dir string) *manager {
	return &manager{name: name, args: args, log: filepath.Join(dir, name)}
}

// start runs a new incarnation and waits until it serves (its address line).
func (m *manager) start() error {
	m.mu.Lock()
	m.n++
	logPath := fmt.Sprintf("%s.%d.log", m.log, m.n)
	logf, err := os.Create(logPath)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	cmd := exec.Command(m.args[0], m.args[1:]...)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		logf.Close()
		m.mu.Unlock()
		return fmt.Errorf("start manager %s: %w", m.name, err)
	}
	done := make(chan struct{})
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	serving := make(chan struct{}, 1)
	go copyUntilServing(stdout, logf, serving)
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	select {
	case <-serving:
		return nil
	case <-done:
		return fmt.Errorf("manager %s exited before serving:\n%s", m.name, m.tail())
	case <-time.After(30 * time.Second):
		return fmt.Errorf("manager %s printed no address line in 30s:\n%s", m.name, m.tail())
	}
}

// restarts is how many times the manager was started again.
func (m *manager) restarts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(0, m.n-1)
}

// copyUntilServing copies the manager's stdout into its log and signals the
// line that says it serves.
func copyUntilServing(r io.Reader, log io.Writer, serving chan<- struct{}) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fmt.Fprintln(log, "stdout:", sc.Text())
		if strings.Contains(sc.Text(), "serving") {
			select {
			case serving <- struct{}{}:
			default:
			}
		}
	}
}

// current is the log of the running incarnation.
func (m *manager) current() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprintf("%s.%d.log", m.log, m.n)
}

// leads reports whether the running incarnation says it acts as the leader.
func (m *manager) leads() bool {
	if !m.running() {
		return false
	}
	b, _ := os.ReadFile(m.current())
	return strings.Contains(string(b), "acting as leader")
}

// proc is the running incarnation and its exit channel.
func (m *manager) proc() (*exec.Cmd, chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd, m.done
}

func (m *manager) running() bool {
	_, done := m.proc()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// exitStatus says how the last incarnation ended (its last log line with it).
func (m *manager) exitStatus() string {
	cmd, _ := m.proc()
	if cmd == nil || cmd.ProcessState == nil {
		return "not started"
	}
	last := strings.TrimSpace(m.tail())
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	return fmt.Sprintf("%s; its last log line: %q", cmd.ProcessState, last)
}

// pid is the running incarnation's PID, 0 if none.
func (m *manager) pid() int {
	cmd, _ := m.proc()
	if !m.running() {
		return 0
	}
	return cmd.Process.Pid
}

// kill is a crash: SIGKILL, the Lease is not released.
func (m *manager) kill() {
	cmd, done := m.proc()
	if m.running() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// stop ends the manager with SIGTERM, SIGKILL after 10 s.
func (m *manager) stop() {
	cmd, done := m.proc()
	if !m.running() {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		m.kill()
	}
}

// tail is the end of the running incarnation's log.
func (m *manager) tail() string {
	b, err := os.ReadFile(m.current())
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// servingRE finds the manager's API address in its serving line.
var servingRE = regexp.MustCompile(`serving the UI.* on (https?://[0-9.:]+)`)

// setSetting sets a setting through the running incarnation's REST API (value
// "" resets it to its default), with the API token the manager generated in
// stateDir.
func (m *manager) setSetting(ctx context.Context, stateDir, name, value string) error {
	b, err := os.ReadFile(m.current())
	if err != nil {
		return err
	}
	addr := servingRE.FindStringSubmatch(string(b))
	if addr == nil {
		return fmt.Errorf("manager %s: no serving line in %s", m.name, m.current())
	}
	token, err := os.ReadFile(filepath.Join(stateDir, "api-token"))
	if err != nil {
		return err
	}
	method, body := http.MethodDelete, io.Reader(nil)
	if value != "" {
		method, body = http.MethodPut, strings.NewReader(fmt.Sprintf(`{"value": %q}`, value))
	}
	req, err := http.NewRequestWithContext(ctx, method, addr[1]+"/v1/settings/"+name, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		return fmt.Errorf("manager %s: %s /v1/settings/%s: %s: %s", m.name, method, name, resp.Status, msg)
	}
	return nil
}

// setSettingAll sets a setting on every running manager (the leader may
// change under the cycle); value "" resets it.
func (h *Harness) setSettingAll(ctx context.Context, name, value string) error {
	var errs []error
	for _, m := range h.mgrs {
		if m.running() {
			errs = append(errs, m.setSetting(ctx, filepath.Join(h.dir, m.name), name, value))
		}
	}
	return errors.Join(errs...)
}
