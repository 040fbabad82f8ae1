package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-storage/vigil/sandbox/images"
)

// ContainerdNamespace is the containerd namespace the CRI plugin (so the
// kubelet) uses: images are imported there.
const ContainerdNamespace = "k8s.io"

// ContainerdConfig is one private containerd: its own root, state, sockets,
// CNI configuration directory and log, all under Dir, so that several run on
// one machine beside each other (one per sandbox node).
type ContainerdConfig struct {
	// Dir holds everything of this containerd; an absolute path short enough
	// for a socket path (Socket) of at most 107 bytes.
	Dir string
	// SandboxImage is the CRI plugin's pod sandbox image, an imported image
	// whose entrypoint holds the pod's namespaces; default the pause image
	// tagged "dev" (sandbox/images).
	SandboxImage string
	// CNIBinDir is where the CRI plugin finds CNI plugins; default
	// /usr/lib/cni (Debian's containernetworking-plugins).
	CNIBinDir string
	// RuncRoot, when set, is where runc keeps the state of this
	// containerd's containers, instead of runc's machine-wide default
	// (/run/containerd/runc/NAMESPACE), which every containerd of the
	// machine shares (a real node's: its state goes at a power cut).
	RuncRoot string
}

// StateDir is the containerd's state: its tasks' bundles and the pods'
// network namespaces (netns_mounts_under_state_dir), what a machine loses
// at a power cut.
func (c ContainerdConfig) StateDir() string { return filepath.Join(c.Dir, "state") }

func (c ContainerdConfig) withDefaults() ContainerdConfig {
	if c.SandboxImage == "" {
		c.SandboxImage, _ = images.Ref(images.Pause, "dev", nil)
	}
	if c.CNIBinDir == "" {
		c.CNIBinDir = "/usr/lib/cni"
	}
	return c
}

// Socket is the containerd's gRPC socket (the kubelet's
// containerRuntimeEndpoint is unix://Socket).
func (c ContainerdConfig) Socket() string { return filepath.Join(c.Dir, "containerd.sock") }

// CNIConfDir is where the CRI plugin reads the CNI network configuration.
func (c ContainerdConfig) CNIConfDir() string { return filepath.Join(c.Dir, "cni", "net.d") }

// ConfigFile is where WriteConfig writes the configuration.
func (c ContainerdConfig) ConfigFile() string { return filepath.Join(c.Dir, "config.toml") }

// LogFile is where StartContainerd sends the containerd's output.
func (c ContainerdConfig) LogFile() string { return filepath.Join(c.Dir, "containerd.log") }

// Validate reports a bad Dir, changing nothing.
func (c ContainerdConfig) Validate() error {
	switch {
	case !filepath.IsAbs(c.Dir):
		return fmt.Errorf("%w: containerd directory %q: want an absolute path", ErrInvalidConfig, c.Dir)
	case len(c.Socket()) > 107:
		return fmt.Errorf("%w: containerd directory %q: its socket path %s is %d bytes, a unix socket allows 107",
			ErrInvalidConfig, c.Dir, c.Socket(), len(c.Socket()))
	case strings.ContainsAny(c.Dir+c.SandboxImage+c.CNIBinDir+c.RuncRoot, "\"\\\n"):
		return fmt.Errorf("%w: containerd paths and image may not hold quotes, backslashes or newlines", ErrInvalidConfig)
	}
	return nil
}

// TOML is the configuration (version 2). restrict_oom_score_adj is needed on
// these machines: without it runc fails every pod sandbox ("can't get final
// child's PID from pipe: EOF"), because the containerd may not lower oom
// scores here. The pods' network namespaces are mounted under the state
// directory, not in the machine's /run/netns.
func (c ContainerdConfig) TOML() string {
	c = c.withDefaults()
	q := strconv.Quote
	lines := []string{
		"version = 2",
		"root = " + q(filepath.Join(c.Dir, "root")),
		"state = " + q(c.StateDir()),
		"[grpc]",
		"  address = " + q(c.Socket()),
		"[ttrpc]",
		"  address = " + q(c.Socket()+".ttrpc"),
		"[debug]",
		`  address = ""`,
		"[metrics]",
		`  address = ""`,
		`[plugins."io.containerd.internal.v1.opt"]`,
		"  path = " + q(filepath.Join(c.Dir, "opt")),
		`[plugins."io.containerd.grpc.v1.cri"]`,
		"  sandbox_image = " + q(c.SandboxImage),
		"  restrict_oom_score_adj = true",
		"  netns_mounts_under_state_dir = true",
		`[plugins."io.containerd.grpc.v1.cri".cni]`,
		"  bin_dir = " + q(c.CNIBinDir),
		"  conf_dir = " + q(c.CNIConfDir()),
	}
	if c.RuncRoot != "" {
		lines = append(lines, `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`,
			`  runtime_type = "io.containerd.runc.v2"`,
			`  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`,
			"    Root = "+q(c.RuncRoot))
	}
	return strings.Join(append(lines, ""), "\n")
}

// WriteConfig creates Dir and the CNI configuration directory and writes the
// configuration at ConfigFile.
func (c ContainerdConfig) WriteConfig() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(c.CNIConfDir(), 0o755); err != nil {
		return err
	}
	return os.WriteFile(c.ConfigFile(), []byte(c.TOML()), 0o644)
}

// Args is the command line that runs the containerd (after WriteConfig).
func (c ContainerdConfig) Args() []string { return []string{"containerd", "--config", c.ConfigFile()} }

// Containerd is a containerd StartContainerd started.
type Containerd struct {
	Config ContainerdConfig
	PID    int
	cmd    *exec.Cmd
	done   chan struct{}
}

// StartContainerd writes c's configuration, starts the containerd in a
// session of its own and returns once its socket answers (at most 30 s).
// Stop ends it. It needs root and Debian's containerd and runc.
func StartContainerd(ctx context.Context, c ContainerdConfig) (*Containerd, error) {
	c = c.withDefaults()
	if err := c.WriteConfig(); err != nil {
		return nil, err
	}
	for _, tool := range []string{"containerd", "ctr", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %s (install Debian's containerd and runc)", ErrToolMissing, tool)
		}
	}
	logf, err := os.OpenFile(c.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := c.Args()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	d := &Containerd{Config: c, PID: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := d.Ctr(ctx, "version")
		if err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("containerd exited at start (see %s): %w", c.LogFile(), err)
		case <-ctx.Done():
			_ = d.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = d.Stop()
			return nil, fmt.Errorf("containerd's socket %s does not answer after 30s (see %s): %w", c.Socket(), c.LogFile(), err)
		}
	}
}

// Ctr runs `ctr --address SOCKET --namespace k8s.io ARGS...` and returns its
// output; an error carries what it printed.
func (d *Containerd) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	full := append([]string{"--address", d.Config.Socket(), "--namespace", ContainerdNamespace}, args...)
	out, err := exec.CommandContext(ctx, "ctr", full...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Import imports the docker-archive or OCI tarball file (sandbox/images).
func (d *Containerd) Import(ctx context.Context, file string) error {
	_, err := d.Ctr(ctx, "images", "import", "--no-unpack=false", file)
	return err
}

// Stop ends the containerd: SIGTERM, and SIGKILL after 10 s. Shims and
// containers it started keep running (as they do when containerd restarts):
// stop those first. Stopping twice is not an error.
func (d *Containerd) Stop() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = d.cmd.Process.Kill()
	<-d.done
	return nil
}
