package manager

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/csi"
)

// csiCommand is `vigil-manager csi serve`: Vigil's CSI identity and controller
// services on a unix socket, for the upstream external-provisioner and
// external-attacher. Every call becomes a datapath call (CreateVolume, Grant,
// Fence and Release), so the socket is useless without a reachable datapath.
func csiCommand() *cli.Command {
	return &cli.Command{
		Name:  "csi",
		Usage: "Vigil's CSI controller service (provisioning, publish = grant, unpublish = fence and release)",
		Subcommands: []*cli.Command{{
			Name:  "serve",
			Usage: "serve the CSI identity and controller services on a unix socket until SIGTERM or SIGINT",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "csi-endpoint", Required: true, EnvVars: []string{"CSI_ENDPOINT"},
					Usage: "unix socket to serve on: unix:///path/csi.sock or a plain path"},
				&cli.StringFlag{Name: "datapath", Value: vigil.DefaultDatapathAddress, EnvVars: []string{"VIGIL_DATAPATH_ADDR"},
					Usage: datapath.ServerListUsage},
				&cli.StringFlag{Name: "datapath-" + flagSuffixTokenFile, Required: true, EnvVars: []string{"VIGIL_DATAPATH_TOKEN_FILE"}, TakesFile: true,
					Usage: "file holding the CSI controller's datapath token (a tokens file's controller token, or a projected ServiceAccount token for the audience " +
						vigil.DatapathTokenAudience + "); read again when it changes"},
				&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KUBECONFIG"},
					Usage: "when set, ControllerPublishVolume refuses node ids that are not Kubernetes nodes (NotFound)"},
				&cli.Float64Flag{Name: flagAPIQPS, Value: 50,
					Usage: "with --kubeconfig, the client-side rate limit of the node checks (one GET per ControllerPublishVolume): at client-go's default of 5/s, 5,000 attachments took 17 minutes; the external-attacher's own default is 5/s too, so raise both together"},
				&cli.IntFlag{Name: flagAPIBurst, Value: 100, Usage: "with --kubeconfig, the requests made at once before the rate limit applies"},
				&cli.DurationFlag{Name: "datapath-timeout", Value: 10 * time.Second,
					Usage: "how long one datapath call may take"},
				&cli.StringFlag{Name: flagHealthAddress, EnvVars: []string{"VIGIL_CSI_HEALTH_ADDRESS"},
					Usage: "host:port to serve " + vigil.CSIProbePath + " on, in plain HTTP: the CSI Probe of this server through its socket, 200 when ready, " +
						"503 with the reason (the socket does not answer, or the datapath does not); for a liveness probe. Empty: not served"},
			}, append(csiSettingsFlags(), datapathTLSFlags("datapath-")...)...),
			Action: csiServe,
		}},
	}
}

func csiServe(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return fmt.Errorf("csi serve takes no arguments, got %q", c.Args().Slice())
	}
	endpoint := c.String("csi-endpoint")
	socket, err := csi.ParseEndpoint(endpoint)
	if err != nil {
		return fmt.Errorf("--csi-endpoint %q: %w", endpoint, err)
	}
	qps, burst := c.Float64(flagAPIQPS), c.Int(flagAPIBurst)
	if err := checkRate(flagAPIQPS, qps, flagAPIBurst, burst); err != nil {
		return err
	}
	var opts []csi.Option
	if kc := c.String("kubeconfig"); kc != "" {
		nodes, err := kubeNodes(kc, float32(qps), burst)
		if err != nil {
			return err
		}
		opts = append(opts, csi.WithNodes(nodes))
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	set, closeSettings, err := openCSISettings(c, log)
	if err != nil {
		return err
	}
	defer closeSettings()
	health, err := listenHealth(c.String(flagHealthAddress))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if health != nil {
		serveHealth(ctx, health, socket)
	}
	dp, err := dialDatapath(ctx, c, "datapath-", c.String("datapath"), client.WithTimeout(c.Duration("datapath-timeout")))
	if err != nil {
		return err
	}
	defer dp.Close()
	srv := csi.NewServer(dp, append(opts, csi.WithLogger(log), csi.WithReplicaDefault(set))...)
	serveCtx, serveDone := context.WithCancel(ctx)
	announced := make(chan struct{})
	go func() {
		defer close(announced)
		select {
		case <-srv.Ready():
			// The line is the readiness signal for scripts and tests.
			fmt.Fprintf(c.App.Writer, "csi: serving %s on %s (datapath %s)\n", vigil.DriverName, endpoint, c.String("datapath"))
		case <-serveCtx.Done():
		}
	}()
	err = srv.Serve(ctx, endpoint)
	// Nothing of this command writes after it returns.
	serveDone()
	<-announced
	return err
}

// flagHealthAddress is where `csi serve` answers its liveness probe.
const flagHealthAddress = "health-address"

// listenHealth listens on --health-address; nil for an empty address.
func listenHealth(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("--%s %q: %w: want host:port (0.0.0.0:9808 in a pod), or empty to serve no probe endpoint", flagHealthAddress, addr, err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s %q: %w", flagHealthAddress, addr, err)
	}
	return lis, nil
}

// serveHealth serves vigil.CSIProbePath (the CSI Probe of the server on
// socket) on lis until ctx ends. Plain HTTP: it takes no token and changes
// nothing.
func serveHealth(ctx context.Context, lis net.Listener, socket string) {
	mux := http.NewServeMux()
	mux.Handle(vigil.CSIProbePath, csi.ProbeHandler(socket, csi.DefaultProbeHandlerTimeout))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	context.AfterFunc(ctx, func() { _ = hs.Close() })
	go func() { _ = hs.Serve(lis) }()
}

// kubeNodes answers "is this a Kubernetes node?" with one GET per publish (a
// live answer: a Node deleted a moment ago is not granted a volume), at most
// qps a second after a burst.
func kubeNodes(kubeconfig string, qps float32, burst int) (csi.Nodes, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = "vigil-csi-controller/" + vigil.Version
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return csi.NodesFunc(func(ctx context.Context, id string) (bool, error) {
		_, err := cs.CoreV1().Nodes().Get(ctx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}), nil
}
