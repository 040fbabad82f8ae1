package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/sandbox"
	"github.com/vigil-storage/vigil/sandbox/images"
	"github.com/vigil-storage/vigil/settings"
	"github.com/vigil-storage/vigil/ui"
)

// The demo's names.
const (
	// Namespace holds the demo workload.
	Namespace = "demo"
	// App is the demo StatefulSet; its pod is App-0, its claim data-App-0.
	App = "demo-db"
	// VolumeSize is the size of the demo pod's volume.
	VolumeSize = "256Mi"
	// ManagerProcess is the name of `vigil-manager run` among the sandbox's
	// host processes (its log: Sandbox.HostLog).
	ManagerProcess = "vigil-manager"
	// Nodes is the number of sandbox nodes.
	Nodes = 3
	// DefaultTimeout bounds the auto mode, from the power cut to the
	// replacement running with its data.
	DefaultTimeout = 3 * time.Minute
)

// The settings the demo's manager runs with.
var demoSettings = [][2]string{
	{settings.NameNodeDownPodDeletionPolicy, string(settings.PolicyDeleteBoth)},
	{settings.NameFastFencedTrigger, "true"},
}

// ErrBadConfig: a Config field is missing or out of range.
var ErrBadConfig = errors.New("bad demo config")

// Config is what Run needs; VigilBinDir is required.
type Config struct {
	// Name and WorkDir are the sandbox's (sandbox.Config); default "vigil"
	// and sandbox.DefaultWorkDir(Name), those bin/vigil-sandbox uses
	// without flags, so that its commands reach the demo as they are.
	Name, WorkDir string
	// Subnet of the node links (sandbox.Config.Subnet); default the sandbox's.
	Subnet string
	// Kubelet is what runs each node (sandbox.Config.Kubelet): default
	// sandbox.KubeletReal, a real kubelet, containerd, CNI and kube-proxy
	// per node, the demo pod's writer a container of the writer image;
	// sandbox.KubeletKwok, a kwok per node, for a machine without
	// containerd, the writer a process of the node.
	Kubelet string
	// PodSubnet of real nodes (sandbox.Config.PodSubnet); default the sandbox's.
	PodSubnet string
	// SourceDir is Vigil's source tree, where real nodes' pause and writer
	// images get their programs compiled; default VigilBinDir's parent (the
	// checkout whose bin/ `make build` wrote).
	SourceDir string
	// BinDir holds the control plane of `make testbin`; default sandbox.BinDir().
	BinDir string
	// VigilBinDir holds the binaries of `make build`.
	VigilBinDir string
	// Listen is the manager's address for the UI, the REST API and
	// /metrics; default vigil.DefaultAPIAddress. Port 0 picks a free one.
	Listen string
	// Auto cuts the power of the demo pod's node once everything runs and
	// returns once the replacement runs elsewhere with its data.
	Auto bool
	// Timeout bounds the auto mode; default DefaultTimeout.
	Timeout time.Duration
	// CLI is how the printed commands call bin/vigil-sandbox (with the flags
	// that name this sandbox); default "bin/vigil-sandbox".
	CLI string
	// Out receives the progress and the timeline; default os.Stdout.
	Out io.Writer
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = "vigil"
	}
	if c.WorkDir == "" {
		c.WorkDir = sandbox.DefaultWorkDir(c.Name)
	}
	if c.BinDir == "" {
		c.BinDir = sandbox.BinDir()
	}
	if c.Listen == "" {
		c.Listen = vigil.DefaultAPIAddress
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.CLI == "" {
		c.CLI = "bin/vigil-sandbox"
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	if c.Kubelet == "" {
		c.Kubelet = sandbox.KubeletReal
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return c, fmt.Errorf("%w: Listen %q: want HOST:PORT, e.g. %s", ErrBadConfig, c.Listen, vigil.DefaultAPIAddress)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return c, fmt.Errorf("%w: Listen %q: want a loopback address (the demo's UI is for this machine), e.g. %s",
			ErrBadConfig, c.Listen, vigil.DefaultAPIAddress)
	}
	if c.Timeout < 0 {
		return c, fmt.Errorf("%w: Timeout %s: want 0 (default %s) or more", ErrBadConfig, c.Timeout, DefaultTimeout)
	}
	if c.VigilBinDir == "" {
		return c, fmt.Errorf("%w: VigilBinDir is empty: give the directory of `make build`'s binaries (bin/)", ErrBadConfig)
	}
	for _, b := range []string{sandbox.BinVigilManager, sandbox.BinVigilDatapath, sandbox.BinVigilEngineNode, sandbox.BinVigilSandbox} {
		if fi, err := os.Stat(filepath.Join(c.VigilBinDir, b)); err != nil || fi.Mode()&0o111 == 0 {
			return c, fmt.Errorf("%w: %s: run `make build`", sandbox.ErrBinariesMissing, filepath.Join(c.VigilBinDir, b))
		}
	}
	if err := sandbox.CheckBinaries(c.BinDir); err != nil {
		return c, err
	}
	return c.checkNodes()
}

// demo is one run.
type demo struct {
	cfg     Config
	words   nodeWords
	s       *sandbox.Sandbox
	stk     *sandbox.Stack
	start   time.Time
	manager string // the manager's address, host:port
	// writerImage is the demo pod's image on real nodes ("" on kwok nodes,
	// where the writer is a process of the node).
	writerImage string
}

// Run runs the demo (see the package documentation) and removes the sandbox
// before it returns. A bad Config, a port or sandbox already in use, are
// errors before anything is created.
func Run(ctx context.Context, cfg Config) (err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return err
	}
	if err := portFree(cfg.Listen); err != nil {
		return err
	}
	d := &demo{cfg: cfg, words: cfg.words(), start: time.Now()}
	if _, err := sandbox.Open(cfg.WorkDir); err == nil {
		return fmt.Errorf("%w: sandbox %q (work dir %s): `%s down` removes it (the demo never removes a sandbox it did not start)",
			sandbox.ErrAlreadyUp, cfg.Name, cfg.WorkDir, cfg.CLI)
	}
	d.step(1, "a %d-node sandbox: %s", Nodes, d.words.sandbox)
	d.s, err = d.up(ctx)
	if errors.Is(err, sandbox.ErrAlreadyUp) {
		return fmt.Errorf("%w: `%s down` removes it (the demo never removes a sandbox it did not start)", err, cfg.CLI)
	}
	if err != nil && ctx.Err() != nil && !cfg.Auto {
		return nil // Ctrl-C during the start: Up removed what it had created
	}
	if err != nil {
		return err
	}
	err = d.run(ctx)
	if ctx.Err() != nil {
		// Ctrl-C: the way to end the interactive demo; the auto mode did not finish.
		fmt.Fprintln(cfg.Out, "\nvigil demo: stopping")
		err = nil
		if cfg.Auto {
			err = ErrInterrupted
		}
	}
	return errors.Join(err, d.teardown())
}

// ErrInterrupted: the auto mode was stopped (Ctrl-C) before it showed a recovery.
var ErrInterrupted = errors.New("demo interrupted before the recovery was shown")

// up builds the node images (real nodes) and brings the sandbox up.
func (d *demo) up(ctx context.Context) (*sandbox.Sandbox, error) {
	cfg := sandbox.Config{Name: d.cfg.Name, WorkDir: d.cfg.WorkDir, BinDir: d.cfg.BinDir, Nodes: Nodes,
		Subnet: d.cfg.Subnet, Kubelet: d.cfg.Kubelet, Logf: d.logf}
	if d.cfg.real() {
		imgs, err := d.buildImages(ctx)
		if imgs.dir != "" {
			defer os.RemoveAll(imgs.dir) // imported by every node at its first boot, in Up
		}
		if err != nil {
			return nil, err
		}
		cfg.NodeImages, cfg.PauseImage, cfg.PodSubnet, d.writerImage = imgs.files, imgs.pause, d.cfg.PodSubnet, imgs.writer
	}
	return sandbox.Up(ctx, cfg)
}

// run is the demo once the sandbox is up.
func (d *demo) run(ctx context.Context) error {
	if err := d.setUp(ctx); err != nil {
		return err
	}
	f := newFollower(d)
	if err := f.waitWriting(ctx, 2*time.Minute); err != nil {
		return err
	}
	d.step(6, "ready in %.1fs", time.Since(d.start).Seconds())
	if d.cfg.Auto {
		return d.auto(ctx, f)
	}
	d.printTry(f.podNode())
	return f.follow(ctx, nil)
}

// setUp runs steps 2 to 5: the stack, the manager, the workload.
func (d *demo) setUp(ctx context.Context) error {
	bin, err := filepath.Abs(d.cfg.VigilBinDir)
	if err != nil {
		return err
	}
	d.step(2, "Vigil's volume stack, each part under its identity of deploy/: datapath (one server, on the host), CSI controller "+
		"with the external-provisioner and -attacher, and %s", d.words.engines)
	// DatapathServers 0, the host server, unlike `up --stack`'s default: the
	// demo cuts the writer's node's power and shows its volume on another
	// node, and a volume's data has one copy, which a server on the cut node
	// would take down with it.
	if d.stk, err = d.s.StartStack(ctx, sandbox.StackConfig{VigilBinDir: bin, DatapathServers: 0}); err != nil {
		return err
	}
	if err := sandbox.InstallCRDs(ctx, d.s.RESTConfig()); err != nil {
		return err
	}
	d.step(3, "vigil-manager run as vigil-system/vigil-manager: %s=%s, %s=%s", demoSettings[0][0], demoSettings[0][1],
		demoSettings[1][0], demoSettings[1][1])
	if err := d.startManager(ctx, bin); err != nil {
		return err
	}
	w := sandbox.Workload{Namespace: Namespace, Name: App, StorageClass: d.stk.StorageClass, Size: VolumeSize}
	image := ""
	if d.writerImage != "" {
		w.Image, w.WriterLedgerDir = d.writerImage, d.ledgerDir()
		if err := os.MkdirAll(w.WriterLedgerDir, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(w.WriterLedgerDir, 0o777); err != nil { // the container writes as sandbox.WriterUID
			return err
		}
		image = ", a container of the image " + w.Image + ","
	}
	d.step(4, "StatefulSet %s/%s: one pod%s with a %s volume of the StorageClass %s", Namespace, App, image, VolumeSize, d.stk.StorageClass)
	if err := sandbox.EnsureNamespace(ctx, d.s.Client(), Namespace); err != nil {
		return err
	}
	_, err = d.s.Client().AppsV1().StatefulSets(Namespace).Create(ctx, w.StatefulSet(1), metav1CreateOptions)
	if err != nil {
		return fmt.Errorf("create StatefulSet %s/%s: %w", Namespace, App, err)
	}
	d.step(5, "%s", d.words.writer)
	return nil
}

// ledgerDir is where the writers acknowledge their records, on the host.
func (d *demo) ledgerDir() string { return filepath.Join(d.cfg.WorkDir, "demo") }

// startManager writes the settings, starts `vigil-manager run` as a host
// process of the sandbox and waits for /readyz.
func (d *demo) startManager(ctx context.Context, bin string) error {
	kubeconfig, err := d.s.ComponentKubeconfig(ctx, vigil.ManagerServiceAccount, "")
	if err != nil {
		return err
	}
	dir := filepath.Join(d.cfg.WorkDir, "manager")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	store := "bolt:" + filepath.Join(dir, "settings.db")
	if err := writeSettings(ctx, store); err != nil {
		return err
	}
	// --state-dir: the manager generates its API token there (TokenFile).
	err = d.s.RunOnHost(sandbox.ProcessSpec{Name: ManagerProcess, Args: []string{filepath.Join(bin, sandbox.BinVigilManager), "run",
		"--kubeconfig", kubeconfig, "--settings-store", store, "--listen", d.cfg.Listen, "--state-dir", dir,
		"--datapath", d.stk.DatapathAddr, "--datapath-token-file", d.stk.TokenFile, "--datapath-ca-file", d.stk.CAFile}})
	if err != nil {
		return err
	}
	d.manager, err = waitManager(ctx, d.s.HostLog(ManagerProcess), 30*time.Second)
	return err
}

// tokenFile is where the manager generated its API token (--state-dir).
func (d *demo) tokenFile() string { return filepath.Join(d.cfg.WorkDir, "manager", "api-token") }

// writeSettings sets the demo's policies in the store, validated.
func writeSettings(ctx context.Context, spec string) error {
	store, err := settings.OpenStore(ctx, spec, "")
	if err != nil {
		return err
	}
	set, err := settings.New(store, "")
	if err != nil {
		return errors.Join(err, store.Close())
	}
	for _, kv := range demoSettings {
		if err := set.Set(ctx, kv[0], kv[1]); err != nil {
			return errors.Join(err, set.Close(), store.Close())
		}
	}
	return errors.Join(set.Close(), store.Close())
}

// waitManager reads the manager's address from its log ("... on
// http://HOST:PORT") and waits until its /readyz answers 200.
func waitManager(ctx context.Context, logPath string, timeout time.Duration) (string, error) {
	const marker = "on http://"
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := ""
	for {
		b, _ := os.ReadFile(logPath)
		if i := strings.Index(string(b), marker); i >= 0 && addr == "" {
			addr = strings.Fields(string(b)[i+len(marker):])[0]
		}
		if addr != "" {
			c := http.Client{Timeout: time.Second}
			if resp, err := c.Get("http://" + addr + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return addr, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("vigil-manager not ready after %s (address %q); its log %s ends:\n%s", timeout, addr, logPath, tail(b, 15))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// portFree refuses a Listen address another program holds.
func portFree(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%w: %s: %v (another demo or vigil-manager? choose another with --listen)", ErrBadConfig, addr, err)
	}
	return l.Close()
}

func (d *demo) step(n int, format string, args ...any) {
	fmt.Fprintf(d.cfg.Out, "vigil demo [%d/6] %s\n", n, fmt.Sprintf(format, args...))
}

func (d *demo) logf(format string, args ...any) {
	fmt.Fprintf(d.cfg.Out, "  "+format+"\n", args...)
}

// printTry prints what to try in the interactive mode.
func (d *demo) printTry(node string) {
	cli, kc := d.cfg.CLI, d.s.Kubeconfig()
	shell := ""
	if d.cfg.real() {
		shell = fmt.Sprintf("  kubectl run -it --rm sh --image %s --image-pull-policy Never -- sh   # a shell in a real container (busybox)\n",
			images.ToolsRef)
	}
	fmt.Fprintf(d.cfg.Out, `
Vigil runs. %s-0 runs on %s, and its writer appends to its volume. Try, in another terminal:

  export KUBECONFIG=%s
  kubectl get pods -n %s -o wide               # where the pod runs
  %s node stop %s            # cut the power of its node, and watch this terminal
  kubectl get noderecoveries                        # Vigil's record of the recovery
  %s node start %s           # the node returns: its engine cleans up and removes vigil.io/fenced
  %s node partition %s       # or cut its network instead (--from apiserver: a zombie)
%s
Vigil's UI: http://%[12]s%[13]s (settings), http://%[12]s%[14]s, http://%[12]s%[15]s; the REST API under
http://%[12]s/v1/ and the metrics at http://%[12]s/metrics. Changing a setting asks for the API token,
in %[16]s. The manager's log: %[17]s
Press Ctrl-C to stop: the sandbox is removed and nothing is left behind.

`, App, node, kc, Namespace, cli, node, cli, node, cli, node, shell, d.manager, ui.PathSettings, ui.PathNodes, ui.PathRecoveries,
		d.tokenFile(), d.s.HostLog(ManagerProcess))
}
