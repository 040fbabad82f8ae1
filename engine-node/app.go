package enginenode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	vcsi "github.com/vigil-storage/vigil/datapath/csi"
	"github.com/vigil-storage/vigil/engine-node/fdkeeper"
)

// Defaults of `vigil-engine-node run`.
const (
	DefaultStateDir       = "/var/lib/vigil/engine-node"
	DefaultCSIEndpoint    = "unix:///var/lib/kubelet/plugins/" + vigil.DriverName + "/csi.sock"
	DefaultBootIDFile     = "/proc/sys/kernel/random/boot_id"
	DefaultMetricsAddress = "127.0.0.1:9501"
	// DefaultGracefulLeave is how long a stopping engine asks the datapath to
	// take its silence as planned (--graceful-leave).
	DefaultGracefulLeave = time.Minute
)

// DatapathClient is everything the engine uses of a datapath connection.
type DatapathClient interface {
	Datapath
	Heartbeater
	Leaver
	Grants
	io.Closer
}

// Leaver is the datapath call a stopping engine makes: it announces that the
// node's engine stops on purpose and may be silent for up to d.
type Leaver interface {
	Leave(ctx context.Context, node string, d time.Duration) (until time.Time, err error)
}

// DialConfig is how the engine reaches the datapath, from its flags.
type DialConfig struct {
	// Addr is the host:port of the datapath server to dial, the first of
	// --datapath.
	Addr string
	// Servers are the datapath's other servers (the rest of --datapath),
	// for the client's WithServers.
	Servers []string
	// TokenFile holds this node's datapath token: its line of a tokens file,
	// or a projected ServiceAccount token (audience vigil-datapath), which
	// the client reads again when the kubelet replaces it.
	TokenFile string
	// CAFile holds the CA that signed the datapath's certificate; empty:
	// plaintext, allowed only on loopback or with Insecure.
	CAFile string
	// Insecure allows plaintext to an address off loopback.
	Insecure bool
}

// DialFunc connects to the datapath as cfg says; the main package passes one
// that returns *datapath/client.Client.
type DialFunc func(ctx context.Context, cfg DialConfig) (DatapathClient, error)

// App is the vigil-engine-node command line application.
//
// It runs the engine in the calling process, which it leaves alone: the
// binary's main uses ProcessApp instead.
func App(dial DialFunc) *cli.App { return newApp(dial, nil) }

// ProcessApp is App for the engine's own process, the binary's main: `run`
// first guards writeback (GuardWriteback: it may execute the program again,
// and locks its memory), as --writeback-guard says.
func ProcessApp(dial DialFunc) *cli.App { return newApp(dial, GuardWriteback) }

func newApp(dial DialFunc, guard func() WritebackGuard) *cli.App {
	return &cli.App{
		Name:            "vigil-engine-node",
		Usage:           "Vigil's per-node agent: the CSI node service, heartbeats to the datapath and the node journal",
		Version:         vigil.Version,
		ExitErrHandler:  func(*cli.Context, error) {}, // main prints the error once
		HideHelpCommand: true,
		Commands:        []*cli.Command{runCommand(dial, guard), keeperCommand()},
	}
}

func runCommand(dial DialFunc, guard func() WritebackGuard) *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "serve the CSI node service for this node until SIGTERM or SIGINT",
		Description: "Serves NodeStage/Publish/Unpublish/Unstage/GetVolumeStats on --csi-endpoint for the kubelet.\n" +
			"A staged volume is a FUSE file over the datapath, attached to a loop device, formatted ext4 on\n" +
			"first use and mounted at the staging path. Every step is journaled in --state-dir; on start,\n" +
			"what a crashed run left is rolled back or served again, and after a reboot (a new boot id) it is\n" +
			"cleaned up. Needs root (mount, /dev/fuse, /dev/loop-control), mkfs.ext4 and blkid.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "node-name", Required: true, EnvVars: []string{"VIGIL_NODE_NAME", "NODE_NAME"},
				Usage: "this node's Kubernetes name: the CSI node id and the datapath's name for the node"},
			&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"},
				Usage: "kubeconfig for the API server, for the fenced-taint cleanup and the gate; empty: in-cluster config, or no cleanup outside a cluster"},
			&cli.DurationFlag{Name: "cleanup-interval", Value: time.Second,
				Usage: "how often to re-check for cleanup after a reap besides the watch of this node's fenced taint, which starts a pass at once (backs off to 30s on failures)"},
			&cli.StringFlag{Name: "datapath", Value: vigil.DefaultDatapathAddress, EnvVars: []string{"VIGIL_DATAPATH"},
				Usage: datapath.ServerListUsage},
			&cli.StringFlag{Name: "datapath-token-file", Required: true, EnvVars: []string{"VIGIL_DATAPATH_TOKEN_FILE"}, TakesFile: true,
				Usage: "file holding this node's datapath token: a projected ServiceAccount token for the audience " + vigil.DatapathTokenAudience +
					" (read again when the kubelet replaces it), or this node's token of the datapath's tokens file; the datapath lets it act only as this node"},
			&cli.StringFlag{Name: "datapath-ca-file", EnvVars: []string{"VIGIL_DATAPATH_CA_FILE"}, TakesFile: true,
				Usage: "CA certificate(s) (PEM) that signed the datapath's TLS certificate: the engine then speaks TLS and verifies the server"},
			&cli.BoolFlag{Name: "datapath-insecure",
				Usage: "reach the datapath in plaintext although its address is not loopback; without --datapath-ca-file only loopback addresses are allowed"},
			&cli.StringFlag{Name: "state-dir", Value: DefaultStateDir, EnvVars: []string{"VIGIL_STATE_DIR"},
				Usage: "directory for journal.db and the FUSE disk mount points; must survive restarts"},
			&cli.StringFlag{Name: "csi-endpoint", Value: DefaultCSIEndpoint, EnvVars: []string{"CSI_ENDPOINT"},
				Usage: "unix socket to serve CSI on (unix:///path or a path)"},
			&cli.StringFlag{Name: "kubelet-registration-dir", Value: DefaultKubeletRegistrationDir, EnvVars: []string{"VIGIL_KUBELET_REGISTRATION_DIR"}, TakesFile: true,
				Usage: "the kubelet's plugin registration directory (plugins_registry under its root directory): the engine registers " + vigil.DriverName + " there itself, on the socket " + RegistrationSocketName + ", with the --csi-endpoint path, which must be the same path on the kubelet's side (mount the kubelet's directory at its own path); empty: do not register (something else, such as a node-driver-registrar, does)"},
			&cli.StringFlag{Name: "boot-id-file", Value: DefaultBootIDFile, EnvVars: []string{"VIGIL_BOOT_ID_FILE"},
				Usage: "file holding the boot id that tells a reboot from a restart (the sandbox points it elsewhere)"},
			&cli.DurationFlag{Name: "heartbeat-interval", Value: DefaultHeartbeatInterval, EnvVars: []string{"VIGIL_HEARTBEAT_INTERVAL"},
				Usage: "how often to heartbeat to the datapath"},
			&cli.DurationFlag{Name: "graceful-leave", Value: DefaultGracefulLeave, EnvVars: []string{"VIGIL_GRACEFUL_LEAVE"},
				Usage: "on SIGTERM or SIGINT, tell the datapath this engine stops on purpose and may be silent this long\n" +
					"(a rolling update), so the manager does not fail the node over; the next heartbeat ends it. 0 announces\n" +
					"nothing; at most " + datapath.MaxLeave.String() + ". A crash (SIGKILL) announces nothing: an engine not back within the\n" +
					"manager's connectivity threshold gets its node failed over (with --fd-keeper-socket the pods' I/O only\n" +
					"stalls until the next engine serves it; without, it is broken)"},
			&cli.StringFlag{Name: "fd-keeper-socket", Value: DefaultKeeperSocket, EnvVars: []string{"VIGIL_FD_KEEPER_SOCKET"}, TakesFile: true,
				Usage: "socket of the node's fd keeper (vigil-engine-node fd-keeper), which holds each staged volume's FUSE\n" +
					"connection so that an engine restart (SIGTERM or SIGKILL) only stalls the pods' I/O: the next engine\n" +
					"serves the same connections on. Empty: no keeper; a restart then breaks open files on the volumes.\n" +
					"A keeper that cannot be reached costs the volumes that survival, not their stage (a Warning is logged)"},
			&cli.DurationFlag{Name: "io-timeout", Value: 30 * time.Second,
				Usage: "bound on one datapath request made for the kernel: a request the datapath does not answer (restarting,\n" +
					"unreachable) is sent again until then, so a datapath restart shorter than this stalls I/O but fails none;\n" +
					"past it the I/O fails with EIO. The datapath's own answers (fenced, not found) end a request at once"},
			&cli.Int64Flag{Name: "unflushed-write-budget", Value: DefaultUnflushedBudget, EnvVars: []string{"VIGIL_UNFLUSHED_WRITE_BUDGET"},
				Usage: "bytes of acknowledged, unflushed writes each volume keeps in the engine's (locked) memory, to send them again when\n" +
					"the datapath's machine lost them in a power cut (its boot id changed); past it the engine flushes the volume.\n" +
					"From 1 MiB to 1 GiB"},
			&cli.Int64Flag{Name: "unflushed-write-node-budget", Value: DefaultUnflushedNodeBudget, EnvVars: []string{"VIGIL_UNFLUSHED_WRITE_NODE_BUDGET"},
				Usage: "bytes of acknowledged, unflushed writes all the node's volumes keep together (see --unflushed-write-budget); past it,\n" +
					"the next write to a volume flushes that volume first. From --unflushed-write-budget to 16 GiB"},
			&cli.StringFlag{Name: "metrics-address", Value: DefaultMetricsAddress, EnvVars: []string{"VIGIL_METRICS_ADDRESS"},
				Usage: "host:port for /metrics, /healthz (the process answers) and " + vigil.CSIProbePath + " (the CSI Probe of --csi-endpoint, through the socket: for a liveness probe); empty disables"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
			&cli.StringFlag{Name: "writeback-guard", Value: WritebackGuardWarn, EnvVars: []string{"VIGIL_WRITEBACK_GUARD"},
				Usage: "keep writeback under memory pressure from deadlocking the engine that serves it: become an I/O flusher\n" +
					"(PR_SET_IO_FLUSHER, needs CAP_SYS_RESOURCE) and lock memory (mlockall, needs CAP_IPC_LOCK).\n" +
					"warn: on failure log one Warning naming what is missing and serve; require: refuse to start; off"},
		},
		Action: func(c *cli.Context) error { return run(c, dial, guard) },
	}
}

// runOptions are the checked flags.
type runOptions struct {
	node, kubeconfig, stateDir, endpoint, bootID, metricsAddr string
	writebackGuard, keeperSocket, registrationDir             string
	datapath                                                  DialConfig
	heartbeat, ioTimeout, cleanup, leave                      time.Duration
	unflushedBudget, unflushedNodeBudget                      int64
	log                                                       *slog.Logger
}

func checkRunFlags(c *cli.Context) (runOptions, error) {
	if c.Args().Len() > 0 {
		return runOptions{}, fmt.Errorf("run takes no arguments, got %q", c.Args().Slice())
	}
	o := runOptions{node: c.String("node-name"), kubeconfig: c.String("kubeconfig"),
		datapath: DialConfig{TokenFile: c.String("datapath-token-file"),
			CAFile: c.String("datapath-ca-file"), Insecure: c.Bool("datapath-insecure")},
		stateDir: c.String("state-dir"), metricsAddr: c.String("metrics-address"),
		heartbeat: c.Duration("heartbeat-interval"), ioTimeout: c.Duration("io-timeout"), cleanup: c.Duration("cleanup-interval"),
		leave: c.Duration("graceful-leave"), writebackGuard: c.String("writeback-guard"),
		keeperSocket: c.String("fd-keeper-socket"), registrationDir: c.String("kubelet-registration-dir"), unflushedBudget: c.Int64("unflushed-write-budget"),
		unflushedNodeBudget: c.Int64("unflushed-write-node-budget")}
	if len(o.node) > datapath.MaxNodeLen || strings.ContainsAny(o.node, " /\t\n") || o.node == "" {
		return o, fmt.Errorf("--node-name %q: want a Kubernetes node name (1-%d characters, no spaces or slashes)", o.node, datapath.MaxNodeLen)
	}
	var err error
	if o.datapath, err = parseDatapathFlags(c.String("datapath"), o.datapath); err != nil {
		return o, err
	}
	if o.heartbeat <= 0 || o.ioTimeout <= 0 || o.cleanup <= 0 {
		return o, fmt.Errorf("--heartbeat-interval %s, --io-timeout %s and --cleanup-interval %s must be positive", o.heartbeat, o.ioTimeout, o.cleanup)
	}
	if o.leave < 0 || o.leave > datapath.MaxLeave {
		return o, fmt.Errorf("--graceful-leave %s: want 0 (announce nothing) up to %s", o.leave, datapath.MaxLeave)
	}
	if o.unflushedBudget < minUnflushedBudget || o.unflushedBudget > maxUnflushedBudget {
		return o, fmt.Errorf("--unflushed-write-budget %d: want %d (1 MiB) to %d (1 GiB) bytes", o.unflushedBudget, minUnflushedBudget, maxUnflushedBudget)
	}
	if o.unflushedNodeBudget < o.unflushedBudget || o.unflushedNodeBudget > maxUnflushedNodeBudget {
		return o, fmt.Errorf("--unflushed-write-node-budget %d: want --unflushed-write-budget (%d) to %d (16 GiB) bytes",
			o.unflushedNodeBudget, o.unflushedBudget, int64(maxUnflushedNodeBudget))
	}
	if err := checkWritebackGuard(o.writebackGuard); err != nil {
		return o, err
	}
	if o.stateDir == "" {
		return o, errors.New("--state-dir is empty: want a directory that survives restarts")
	}
	if o.kubeconfig != "" {
		if _, err := os.Stat(o.kubeconfig); err != nil {
			return o, fmt.Errorf("--kubeconfig: %w", err)
		}
	}
	if o.endpoint, err = vcsi.ParseEndpoint(c.String("csi-endpoint")); err != nil {
		return o, fmt.Errorf("--csi-endpoint: %w", err)
	}
	if err := CheckRegistrationDir(o.registrationDir); err != nil {
		return o, err
	}
	if _, err = datapath.ReadTokenFile(o.datapath.TokenFile); err != nil {
		return o, fmt.Errorf("--datapath-token-file: %w", err)
	}
	if o.bootID, err = ReadBootID(c.String("boot-id-file")); err != nil {
		return o, fmt.Errorf("--boot-id-file: %w", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return o, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	o.log = slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
	return o, nil
}

func run(c *cli.Context, dial DialFunc, guard func() WritebackGuard) error {
	o, err := checkRunFlags(c)
	if err != nil {
		return err
	}
	// First, before any descriptor is opened: the guard may execute the
	// program again, which closes every close-on-exec descriptor (all those
	// Go opens) and forgets every goroutine.
	if err := guardWriteback(o.writebackGuard, guard, o.log); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	dp, err := dial(ctx, o.datapath)
	if err != nil {
		return fmt.Errorf("--datapath %s: %w", o.datapath.Addr, err)
	}
	defer dp.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := NewMetrics(reg)
	cleaner, err := newFenceCleaner(o, dp, metrics)
	if err != nil {
		return err
	}
	cfg := Config{NodeName: o.node, StateDir: o.stateDir, BootID: o.bootID,
		Datapath: dp, IOTimeout: o.ioTimeout, UnflushedBudget: o.unflushedBudget,
		UnflushedNodeBudget: o.unflushedNodeBudget, Metrics: metrics, Log: o.log}
	if cleaner != nil {
		cfg.Gate = cleaner
	}
	if o.keeperSocket != "" {
		cfg.Keeper = fdkeeper.Client{Path: o.keeperSocket}
	}
	node, err := NewNodeServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer node.Close()
	// Runs first: every disk answers what it read and leaves its
	// connection to the keeper for the next engine.
	defer node.StopServing()
	if cleaner != nil {
		cleaner.Server = node
		go cleaner.Run(ctx, o.cleanup)
	} else {
		o.log.Warn("no --kubeconfig and not in a cluster: the fenced-taint cleanup and the stage gate are off")
	}
	if o.metricsAddr != "" {
		if err := serveMetrics(ctx, o.metricsAddr, reg, o.endpoint, o.log); err != nil {
			return err
		}
	}
	srv := vcsi.NewServer(nil, vcsi.WithNodeService(node), vcsi.WithLogger(o.log))
	o.log.Info("engine-node starting", "node", o.node, "datapath", o.datapath.Addr, "datapath-tls", o.datapath.CAFile != "", "state", o.stateDir,
		"csi", o.endpoint, "boot", o.bootID, "version", vigil.Version)
	return serveWithHeartbeats(ctx, o, dp, metrics, func() error { return serveCSIAndRegistration(ctx, o, srv, metrics) })
}

// serveCSIAndRegistration serves the CSI socket and, once it listens, the kubelet's plugin
// registration (unless --kubelet-registration-dir is empty); either failing
// stops both.
func serveCSIAndRegistration(ctx context.Context, o runOptions, srv *vcsi.Server, m *Metrics) error {
	if o.registrationDir == "" {
		return srv.Serve(ctx, o.endpoint)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	regDone := make(chan error, 1)
	go func() {
		select {
		case <-srv.Ready():
		case <-ctx.Done():
			regDone <- nil
			return
		}
		err := ServeRegistration(ctx, o.registrationDir, &Registration{Endpoint: o.endpoint, Metrics: m, Log: o.log})
		if err != nil {
			srv.Stop()
		}
		regDone <- err
	}()
	err := srv.Serve(ctx, o.endpoint)
	cancel()
	return errors.Join(err, <-regDone)
}

// serveWithHeartbeats heartbeats while serve runs. When serve returns because
// the engine was told to stop (SIGTERM, SIGINT: ctx ended), the heartbeats
// stop first, then the engine announces its stop to the datapath (Leave), so
// no heartbeat sent after the announcement clears it.
func serveWithHeartbeats(ctx context.Context, o runOptions, dp DatapathClient, m *Metrics, serve func() error) error {
	beatCtx, stopBeats := context.WithCancel(ctx)
	beatsDone := make(chan struct{})
	go func() { defer close(beatsDone); RunHeartbeats(beatCtx, dp, o.node, o.heartbeat, m, o.log) }()
	err := serve()
	stopBeats()
	<-beatsDone
	if ctx.Err() != nil && o.leave > 0 {
		announceLeave(dp, o)
	}
	return err
}

// announceLeave tells the datapath this engine stops on purpose; a failure is
// logged (the node may then be failed over, which is safe) and not returned.
func announceLeave(dp Leaver, o runOptions) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	until, err := dp.Leave(ctx, o.node, o.leave)
	if err != nil {
		o.log.Warn("could not announce the graceful stop to the datapath; the manager may fail this node over", "node", o.node, "err", err)
		return
	}
	o.log.Info("announced a graceful stop to the datapath", "node", o.node, "until", until)
}

// serveMetrics serves /metrics, /healthz (the process answers) and
// vigil.CSIProbePath (the CSI Probe of csiSocket, for the kubelet's liveness
// probe) on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, csiSocket string, log *slog.Logger) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.Handle(vigil.CSIProbePath, vcsi.ProbeHandler(csiSocket, vcsi.DefaultProbeHandlerTimeout))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics", "address", lis.Addr().String())
	return nil
}

// newFenceCleaner builds the cleanup for this node from --kubeconfig (or the
// in-cluster config); nil without either.
func newFenceCleaner(o runOptions, grants Grants, m *Metrics) (*FenceCleaner, error) {
	if o.kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", o.kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", o.kubeconfig, err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "vigil-engine-node", Host: o.node})
	return &FenceCleaner{Node: o.node, Client: client, Grants: grants, Recorder: recorder, Metrics: m, Log: o.log}, nil
}
