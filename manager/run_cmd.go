package manager

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/settings"
)

// Flags of `vigil-manager run` (--kubeconfig and --settings-dir share their
// names with the settings command's).
const (
	flagSettingsStore  = "settings-store"
	flagListen         = "listen"
	flagLeaderElect    = "leader-elect"
	flagLeaseNamespace = "leader-elect-lease-namespace"
	flagLeaseName      = "leader-elect-lease-name"
	flagLeaseDuration  = "leader-elect-lease-duration"
	flagRenewDeadline  = "leader-elect-renew-deadline"
	flagRetryPeriod    = "leader-elect-retry-period"
	flagWorkers        = "workers"
	flagResync         = "resync"
	flagAPIQPS         = "kube-api-qps"
	flagAPIBurst       = "kube-api-burst"
	flagEventsQPS      = "events-qps"
	flagEventsBurst    = "events-burst"
)

// httpShutdownGrace bounds how long in-flight HTTP requests may take on shutdown.
const httpShutdownGrace = 5 * time.Second

func runCommand() *cli.Command {
	return &cli.Command{
		Name:  "run",
		Usage: "run the controllers (node health, pod reaper) with leader election, and serve the REST API (/v1/), the UI (/), /metrics, /healthz and /readyz",
		Description: "The manager keeps every pod, node, claim, volume and attachment of the cluster in memory, slimmed to what it decides on.\n" +
			"It runs with GOGC=50 unless GOGC is set, so its heap stays within 1.5 times those caches instead of twice; GOMEMLIMIT is honoured.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: flagKubeconfig, TakesFile: true,
				Usage: "kubeconfig of the cluster to manage (default: the in-cluster service account)"},
			&cli.StringFlag{Name: flagSettingsStore, EnvVars: []string{settings.StoreEnv}, Value: settings.DefaultStoreSpec(),
				Usage: "where settings are kept: bolt:PATH or configmap:NAMESPACE/NAME"},
			&cli.StringFlag{Name: flagSettingsDir, TakesFile: true,
				Usage: "managed overlay directory (a mounted ConfigMap): a file named after a setting overrides the store and locks it"},
			&cli.StringFlag{Name: flagListen, Value: vigil.DefaultAPIAddress, Usage: "address for the REST API, the UI, /metrics, /healthz and /readyz (beyond loopback: needs TLS or --" + flagInsecureListen + ", and reads need the token)"},
			&cli.BoolFlag{Name: flagLeaderElect, Value: true,
				Usage: "act only while holding the Lease, so one of several replicas acts; =false is for a single manager only, and is refused while another manager holds the Lease"},
			&cli.StringFlag{Name: flagLeaseNamespace, EnvVars: []string{"POD_NAMESPACE"}, Value: vigil.Namespace,
				Usage: "namespace of the leader-election Lease"},
			&cli.StringFlag{Name: flagLeaseName, Value: vigil.ManagerLeaseName, Usage: "name of the leader-election Lease"},
			&cli.DurationFlag{Name: flagLeaseDuration, Value: 15 * time.Second,
				Usage: "how long a standby waits after the leader's last renewal before taking over (the failover time)"},
			&cli.DurationFlag{Name: flagRenewDeadline, Value: 10 * time.Second,
				Usage: "how long the leader keeps trying to renew before it stops acting; must be less than the lease duration"},
			&cli.DurationFlag{Name: flagRetryPeriod, Value: 2 * time.Second,
				Usage: "how often candidates try to acquire or renew the Lease; must be well under the renew deadline"},
			&cli.IntFlag{Name: flagWorkers, Value: 32, Usage: "workers of the controllers' queue (pods, nodes and attachments handled at once); each mostly waits on the API server, so many are cheap: 110 pods of a dead node are reaped in parallel"},
			&cli.DurationFlag{Name: flagResync, Value: 10 * time.Minute, Usage: "informer resync period (0: none)"},
			&cli.Float64Flag{Name: flagAPIQPS, Value: 200,
				Usage: "client-side API rate limit (the API server's priority and fairness protects it as well); each reaped pod takes about two requests: a rack of 50 nodes with 500 covered pods needs ~1,100, which at 200/s after the burst is reaped in ~3 s"},
			&cli.IntFlag{Name: flagAPIBurst, Value: 500, Usage: "client-side API burst: the requests made at once before the rate limit applies"},
			&cli.Float64Flag{Name: flagEventsQPS, Value: 20,
				Usage: "Kubernetes Events written a second, on a client of their own: a rack failure's 2,000 Events then wait in a queue (of 10,000) instead of competing with the deletes they describe"},
			&cli.IntFlag{Name: flagEventsBurst, Value: 50, Usage: "Events written at once before --events-qps applies: a single node's failure is recorded without waiting"},
		}, append(loopFlags(), apiFlags()...)...),
		Action: runManager,
	}
}

// runOptions are the validated flags.
type runOptions struct {
	kubeconfig, storeSpec, settingsDir, listen string
	leaderElect                                bool
	leaseNamespace, leaseName                  string
	lease                                      leaseTimings
	workers                                    int
	resync                                     time.Duration
	qps                                        float32
	burst                                      int
	eventsQPS                                  float32
	eventsBurst                                int
	loop                                       loopOptions
	api                                        apiOptions
}

func parseRunOptions(c *cli.Context) (runOptions, error) {
	o := runOptions{
		kubeconfig: c.String(flagKubeconfig), storeSpec: c.String(flagSettingsStore), settingsDir: c.String(flagSettingsDir),
		listen: c.String(flagListen), leaderElect: c.Bool(flagLeaderElect),
		leaseNamespace: c.String(flagLeaseNamespace), leaseName: c.String(flagLeaseName),
		lease:   leaseTimings{duration: c.Duration(flagLeaseDuration), renew: c.Duration(flagRenewDeadline), retry: c.Duration(flagRetryPeriod)},
		workers: c.Int(flagWorkers), resync: c.Duration(flagResync),
		qps: float32(c.Float64(flagAPIQPS)), burst: c.Int(flagAPIBurst),
		eventsQPS: float32(c.Float64(flagEventsQPS)), eventsBurst: c.Int(flagEventsBurst),
	}
	switch {
	case c.Args().Len() > 0:
		return o, fmt.Errorf("run takes no arguments, got %q", c.Args().Slice())
	case o.workers < 1 || o.workers > 1000:
		return o, fmt.Errorf("--%s %d: must be between 1 and 1000", flagWorkers, o.workers)
	case o.resync < 0:
		return o, fmt.Errorf("--%s %s: must not be negative", flagResync, o.resync)
	case o.leaderElect && (o.leaseNamespace == "" || o.leaseName == ""):
		return o, fmt.Errorf("--%s needs --%s and --%s (got %q and %q)", flagLeaderElect, flagLeaseNamespace, flagLeaseName, o.leaseNamespace, o.leaseName)
	}
	if err := checkRate(flagAPIQPS, c.Float64(flagAPIQPS), flagAPIBurst, o.burst); err != nil {
		return o, err
	}
	if err := checkRate(flagEventsQPS, c.Float64(flagEventsQPS), flagEventsBurst, o.eventsBurst); err != nil {
		return o, err
	}
	if err := o.lease.validate(); err != nil {
		return o, err
	}
	var err error
	if o.loop, err = parseLoopOptions(c); err != nil {
		return o, err
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		return o, fmt.Errorf("--%s %q: want HOST:PORT, e.g. %s: %w", flagListen, o.listen, vigil.DefaultAPIAddress, err)
	}
	o.api, err = parseAPIOptions(c, o.listen)
	return o, err
}

// leaseTimings are the leader-election durations, checked as client-go checks
// them but with errors that name the flags.
type leaseTimings struct{ duration, renew, retry time.Duration }

func (l leaseTimings) validate() error {
	switch {
	case l.duration <= 0 || l.renew <= 0 || l.retry <= 0:
		return fmt.Errorf("--%s %s, --%s %s, --%s %s: all must be positive",
			flagLeaseDuration, l.duration, flagRenewDeadline, l.renew, flagRetryPeriod, l.retry)
	case l.renew >= l.duration:
		return fmt.Errorf("--%s %s must be less than --%s %s", flagRenewDeadline, l.renew, flagLeaseDuration, l.duration)
	case float64(l.renew) <= leaderelection.JitterFactor*float64(l.retry):
		return fmt.Errorf("--%s %s must be more than %.1f × --%s %s",
			flagRenewDeadline, l.renew, leaderelection.JitterFactor, flagRetryPeriod, l.retry)
	}
	return nil
}

// checkLeaseNamespace fails fast when the Lease's namespace does not exist:
// otherwise the elector would retry forever and the manager would never act.
func checkLeaseNamespace(ctx context.Context, client kubernetes.Interface, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("--%s %s: namespace does not exist; create it (kubectl create namespace %s) or choose another, or run with --%s=false",
			flagLeaseNamespace, ns, ns, flagLeaderElect)
	case apierrors.IsForbidden(err):
		return nil // may not read namespaces; the elector reports its own errors
	case err != nil:
		return fmt.Errorf("check the Lease namespace %s: %w", ns, err)
	}
	return nil
}

// managerGCPercent is the garbage collector's target for the manager: Go's
// default (GOGC=100) lets the heap grow to twice the live data before it
// collects, and the manager's live data is mostly its caches, which stay for
// the life of the process. At 50 the heap stays within 1.5 times the caches: at
// 500 nodes and 20,000 pods the manager's RSS over a rack failure went from
// 161 MiB to 132–144 MiB, its peak at start from 177 to 155–159 MiB, for about
// the same CPU (see the README's measurements). GOGC in the environment wins.
func managerGCPercent(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	return 50, true
}

// restConfig loads --kubeconfig, or the in-cluster configuration without it.
func restConfig(o runOptions) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--%s %s: %w", flagKubeconfig, o.kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("no --%s given and not running in a cluster: %w", flagKubeconfig, err)
	}
	cfg.QPS, cfg.Burst = o.qps, o.burst
	cfg.UserAgent = "vigil-manager/" + vigil.Version
	return cfg, nil
}

// checkRate refuses a client-side rate limit (qps a second after a burst)
// that is not positive; the flags' names go in the message.
func checkRate(qpsFlag string, qps float64, burstFlag string, burst int) error {
	if qps <= 0 || burst < 1 {
		return fmt.Errorf("--%s %v and --%s %d: both must be positive", qpsFlag, qps, burstFlag, burst)
	}
	return nil
}

// protobufConfig is cfg speaking protobuf, as Kubernetes' own components do,
// for the clients of built-in kinds: the informers' lists and watches of every
// pod and node are decoded several times faster and with less garbage than
// JSON (the scale benchmark's manager lists 20,000 pods at its start). The
// NodeRecovery client keeps JSON: a custom resource has no protobuf form.
func protobufConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

func runManager(c *cli.Context) error {
	o, err := parseRunOptions(c)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if pct, set := managerGCPercent(os.Getenv); set {
		debug.SetGCPercent(pct)
	}
	cfg, err := restConfig(o)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(protobufConfig(cfg))
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	// Events get a client (and so a rate limit) of their own: the Events of
	// each reaped pod must never delay the deletes of the next one.
	eventsCfg := protobufConfig(cfg)
	eventsCfg.QPS, eventsCfg.Burst = o.eventsQPS, o.eventsBurst
	eventsClient, err := kubernetes.NewForConfig(eventsCfg)
	if err != nil {
		return fmt.Errorf("kubernetes events client: %w", err)
	}
	if o.leaderElect {
		if err := checkLeaseNamespace(ctx, client, o.leaseNamespace); err != nil {
			return err
		}
	} else if err := checkNoOtherLeader(ctx, client, o.leaseNamespace, o.leaseName, time.Now()); err != nil {
		return err
	}
	var recoveries *v1alpha1.Client // nil with --recoveries=false: the UI shows none
	if o.loop.recoveries {
		if recoveries, err = v1alpha1.NewForConfig(cfg); err != nil {
			return err
		}
	}
	token, err := o.api.loadToken(slog.Default())
	if err != nil {
		return err
	}
	loop, err := wireLoop(ctx, o.loop, cfg)
	if err != nil {
		return err
	}
	defer loop.close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	set, closeSettings, err := openRunSettings(ctx, o, reg)
	if err != nil {
		return err
	}
	defer closeSettings()
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--%s %s: %w", flagListen, o.listen, err)
	}
	return runWith(ctx, c, o, clients{api: client, events: eventsClient, loop: loop, recoveries: recoveries, token: token}, set, reg, lis)
}

// openRunSettings opens the settings store and overlay; the metrics of settings
// go to reg, refused values to the log, overlay changes and store edits made
// outside Vigil to the change history.
func openRunSettings(ctx context.Context, o runOptions, reg prometheus.Registerer) (*settings.Settings, func(), error) {
	octx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	store, err := settings.OpenStore(octx, o.storeSpec, o.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	s, err := settings.New(store, o.settingsDir, settings.WithRegisterer(reg), settings.WithObservedHistory())
	if err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	return s, func() { _ = s.Close(); _ = store.Close() }, nil
}

// clients are the API clients of the manager: one for the controllers' reads and
// writes, one for Events.
type clients struct {
	api, events kubernetes.Interface
	loop        loopWiring
	recoveries  *v1alpha1.Client // the UI's and the REST API's reads
	token       string           // the REST API's bearer token
}

// runWith wires the controllers and the HTTP server and runs them until ctx ends.
func runWith(ctx context.Context, c *cli.Context, o runOptions, cs clients,
	set *settings.Settings, reg *prometheus.Registry, lis net.Listener) error {
	// Everything below runs on ctx until the manager stops: on a signal, or
	// when this replica loses its Lease. The informers must stop then too, or
	// the factory's Shutdown below waits for them forever and the process,
	// no longer leading, never exits for its Deployment to start it again.
	ctx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	client := cs.api
	metrics, err := controller.NewMetrics(reg)
	if err != nil {
		return errors.Join(err, lis.Close())
	}
	events := controller.NewEventWriter(cs.events.CoreV1(), scheme.Scheme, vigil.ManagerComponent, controller.EventQueueSize, metrics)
	go events.Run(ctx)
	go reportActBlocked(ctx, set, events, leaseRef(o))
	factory := informers.NewSharedInformerFactoryWithOptions(client, o.resync, informers.WithTransform(controller.TransformForCache))
	ctrl, err := controller.New(controller.Config{
		Client: client, Informers: factory, Settings: set, Metrics: metrics,
		FenceBackend: cs.loop.fencer, Recoveries: cs.loop.recoveries, ActBlocked: set.ActBlocked,
		Recorder: events,
	})
	if err != nil {
		return errors.Join(err, lis.Close())
	}
	var warnings []string
	if cs.loop.fencer == nil {
		warnings = append(warnings, noFencerWarning)
	}
	mux := newMux(reg, ctrl.HasSynced, set.ActBlocked, warnings...)
	var leading atomic.Bool // the nodes view shows the controllers' verdicts only while this replica leads
	src := nodeSources{verdicts: ctrl, leading: leading.Load}
	if cs.loop.fencer != nil {
		src.storage = cs.loop.fencer
	}
	api, recoveries, err := mountAPI(mux, o.api, cs.token, set, src, factory, cs.recoveries, slog.Default())
	if err != nil {
		return errors.Join(err, lis.Close())
	}
	srv := &http.Server{Handler: o.api.handler(mux), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- o.api.serve(srv, lis, slog.Default()) }()
	// The address line tells scripts and tests where to look (with port 0 too).
	fmt.Fprintf(c.App.Writer, "vigil-manager: serving the UI, /v1/, /metrics, /healthz, /readyz on %s://%s\n", o.api.scheme(), lis.Addr())
	go api.run(ctx)
	go recoveries.run(ctx)
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	lead := func(ctx context.Context) {
		slog.Info("vigil-manager: acting as leader")
		leading.Store(true)
		defer leading.Store(false)
		if err := ctrl.Run(ctx, o.workers); err != nil && ctx.Err() == nil {
			slog.Error("vigil-manager: reaper stopped", "err", err)
		}
	}
	runErr := make(chan error, 1)
	go func() {
		if !o.leaderElect {
			lead(ctx)
			runErr <- nil
			return
		}
		runErr <- controller.RunAsLeader(ctx, controller.LeaderConfig{
			Client: client, Namespace: o.leaseNamespace, Name: o.leaseName, Identity: identity(),
			LeaseDuration: o.lease.duration, RenewDeadline: o.lease.renew, RetryPeriod: o.lease.retry,
		}, lead)
	}()
	var result error
	select {
	case result = <-runErr:
	case err := <-served:
		result = fmt.Errorf("http server on %s: %w", lis.Addr(), err)
	}
	stopAll()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && result == nil {
		result = fmt.Errorf("http server shutdown: %w", err)
	}
	if result == nil {
		fmt.Fprintln(c.App.Writer, "vigil-manager: stopped")
	}
	return result
}

// newMux serves the manager's HTTP endpoints. The settings API and the UI join
// this mux in their own files. /readyz fails while the informers have not synced
// and while settings block acting (actBlocked, with its message); when ready it
// says ok, then one "warning:" line for each of warnings (what the manager runs
// without).
func newMux(reg *prometheus.Registry, synced func() bool, actBlocked func() error, warnings ...string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := actBlocked(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !synced() {
			http.Error(w, "informer caches not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
		for _, warn := range warnings {
			_, _ = fmt.Fprintln(w, "warning:", warn)
		}
	})
	return mux
}

// identity names this replica in the Lease: the host (the pod name in a cluster)
// and a random suffix, so two processes on one host never share it.
func identity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = vigil.ManagerComponent
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}
