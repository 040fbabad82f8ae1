package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/raftstate"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

// flagServeBootIDFile is `serve --boot-id-file`.
const flagServeBootIDFile = "boot-id-file"

// datapathCommands are the commands of vigil-datapath (datapath_app.go):
// serve, status and clear-failure.
func datapathCommands() []*cli.Command {
	return []*cli.Command{{
		Name:  "serve",
		Usage: "serve volumes over gRPC until SIGTERM or SIGINT, then flush and exit",
		Description: "Every caller proves who it is: the controller role (the manager, the CSI controller) creates, deletes,\n" +
			"grants, fences and releases; an engine does I/O, heartbeats and Leave as its own node only. Identities come\n" +
			"from a tokens file (--" + flagServeTokenFile + ") or from ServiceAccount tokens checked with TokenReview (--" + flagServeControllerSAs + ",\n" +
			"--" + flagServeEngineSA + "), or both. TLS with --" + flagServeTLSCert + " and --" + flagServeTLSKey + "; plaintext only on loopback or with --" + flagServeInsecure + ".\n" +
			"The control state (volumes, attachment tables, epochs, announced stops) lives in a Raft group; a lone server (no --" + flagServeRaftPeers + ")\n" +
			"is a one-member group, its Raft in process unless --" + flagServeRaftListen + " gives it an address. A grant or fence is done once committed\n" +
			"and applied by the server that holds the volume's data (the client confirms with that server when it is not the leader).",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: flagServeListen, Value: vigil.DefaultDatapathAddress, EnvVars: []string{"VIGIL_DATAPATH_LISTEN"},
				Usage: "address to listen on (host:port); loopback unless you choose otherwise, and off loopback only with TLS or --" + flagServeInsecure},
			&cli.StringFlag{Name: "data-dir", Required: true, EnvVars: []string{"VIGIL_DATAPATH_DATA_DIR"},
				Usage: "directory for volumes/<id>.img (the volumes' data files), datapath.db (failed volumes) and, unless --" + flagServeRaftDir + " says otherwise, " +
					"raft/ (the control group: volumes, attachment tables, epochs, announced stops); a directory of the release that kept these in datapath.db is imported at the first start"},
			&cli.Int64Flag{Name: "capacity", EnvVars: []string{"VIGIL_DATAPATH_CAPACITY"},
				Usage: "bytes that may be provisioned in total; 0 means the size of the data directory's file system"},
			&cli.IntFlag{Name: "over-provisioning-percentage", Value: 100, EnvVars: []string{"VIGIL_DATAPATH_OVER_PROVISIONING_PERCENTAGE"},
				Usage: "how much of --capacity the volumes' sizes may add up to: 100 reserves each volume's whole size on disk when it is created (fallocate), " +
					"so a write inside a volume never meets a full disk, and refuses a volume the disk has no room for; 101 to 1000 makes volumes thin, " +
					"and a full disk then fails writes"},
			&cli.DurationFlag{Name: "shutdown-grace", Value: 10 * time.Second,
				Usage: "how long calls in progress may take to finish at shutdown"},
			&cli.StringFlag{Name: flagServeBootIDFile, Value: datapath.DefaultBootIDFile, EnvVars: []string{"VIGIL_DATAPATH_BOOT_ID_FILE"}, TakesFile: true,
				Usage: "file holding this machine's boot id, reported to every caller: an engine that sees it change knows the machine lost\n" +
					"its page cache (a power cut) and writes again what it had not flushed (the sandbox points it elsewhere)"},
		}, append(datapathServeAuthFlags(), datapathServeRaftFlags()...)...),
		Action: datapathServe,
	}, {
		Name:   "status",
		Usage:  "list a running server's volumes with their attachment tables (node, epoch, state), its failed volumes, its nodes (last heartbeat and I/O, announced stops, live grants), the servers of its control group (role, last contact with the leader, applied index; each asked at its own address), and the group's volumes with their replicas (the server holding each, in-sync or unreachable); -o json gives .servers[] and .volumes[]",
		Flags:  append(datapathClientFlags(), outputFlag("table (every report) or json (.servers[] and .volumes[] with their replicas)")),
		Action: datapathStatus,
	}, datapathClearFailureCommand(), datapathAddServerCommand(), datapathForceReplicaCommand()}
}

// datapathClientFlags are the flags of the commands that call a running
// server as the controller.
func datapathClientFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "addr", Value: vigil.DefaultDatapathAddress, EnvVars: []string{"VIGIL_DATAPATH_ADDR"},
			Usage: datapath.ServerListUsage},
		&cli.StringFlag{Name: flagSuffixTokenFile, Required: true, EnvVars: []string{"VIGIL_DATAPATH_TOKEN_FILE"}, TakesFile: true,
			Usage: "file holding a controller token of the datapath (a tokens file's controller token, or a projected ServiceAccount token)"},
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "give up after this long"},
	}, datapathTLSFlags("")...)
}

func datapathStatus(c *cli.Context) error {
	format := c.String(flagOutput)
	if format != "table" && format != "json" {
		return cliflags.Usagef("invalid output format %q for -o; allowed: table, json", format)
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	d, err := parseDatapathDial(c, "", c.String("addr"))
	if err != nil {
		return err
	}
	dp, d, err := dialAnswering(ctx, d, c.Duration("timeout"))
	if err != nil {
		return err
	}
	defer dp.Close()
	if format == "json" {
		_, view, err := groupStatus(ctx, c, dp, d.addr)
		if err != nil {
			return err
		}
		return writeStatusJSON(c.App.Writer, view)
	}
	if err := printVolumes(ctx, c.App.Writer, dp, d.addr); err != nil {
		return err
	}
	nodes, err := dp.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("datapath at %s: nodes: %w", d.addr, err)
	}
	fmt.Fprintln(c.App.Writer)
	if err := printNodes(c.App.Writer, nodes); err != nil {
		return err
	}
	rows, view, err := groupStatus(ctx, c, dp, d.addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.App.Writer)
	if err := printServers(c.App.Writer, rows); err != nil {
		return err
	}
	fmt.Fprintln(c.App.Writer)
	return printReplicas(c.App.Writer, view)
}

// groupStatus asks the server at addr for the group's servers (each asked
// at its own address) and volumes.
func groupStatus(ctx context.Context, c *cli.Context, dp *client.Client, addr string) ([]datapath.ServerStatus, statusView, error) {
	rows, err := groupRows(ctx, c, dp, addr)
	if err != nil {
		return nil, statusView{}, fmt.Errorf("datapath at %s: servers: %w", addr, err)
	}
	vols, err := groupVolumes(ctx, c, dp, addr)
	if status.Code(err) == codes.Unimplemented {
		return nil, statusView{}, fmt.Errorf("datapath at %s does not report its group's volumes (a release before this one): upgrade vigil-datapath", addr)
	}
	if err != nil {
		return nil, statusView{}, fmt.Errorf("datapath at %s: volumes of the group: %w", addr, err)
	}
	return rows, statusOf(rows, vols), nil
}

// groupVolumes asks for the group's volumes, which only the leader answers
// (current, through a barrier): the server at addr, and when it is not the
// leader, the leader it names. During an election no server is the leader:
// it asks again until ctx ends, since a status is most wanted just then.
func groupVolumes(ctx context.Context, c *cli.Context, dp *client.Client, addr string) ([]datapath.GroupVolume, error) {
	for {
		vols, err := dp.GroupVolumes(ctx)
		var re *datapath.RemoteError
		if err == nil || !errors.Is(err, datapath.ErrNotLeader) {
			return vols, err
		}
		if errors.As(err, &re) && re.LeaderAddress != "" && re.LeaderAddress != addr {
			if vols, err = groupVolumesAt(ctx, c, re.LeaderAddress); err == nil || !errors.Is(err, datapath.ErrNotLeader) {
				return vols, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// groupVolumesAt asks the server at addr, the leader, for the group's volumes.
func groupVolumesAt(ctx context.Context, c *cli.Context, addr string) ([]datapath.GroupVolume, error) {
	leader, err := dialDatapath(ctx, c, "", addr, client.WithTimeout(2*time.Second), client.WithRetries(1))
	if err != nil {
		return nil, fmt.Errorf("the leader at %s: %w", addr, err)
	}
	defer leader.Close()
	return leader.GroupVolumes(ctx)
}

// printVolumes prints the volumes the server at addr holds, with their
// attachment tables, its capacity and its failed volumes.
func printVolumes(ctx context.Context, out io.Writer, dp *client.Client, addr string) error {
	vols, err := dp.ListVolumes(ctx)
	if err != nil {
		return fmt.Errorf("datapath at %s: %w", addr, err)
	}
	avail, err := dp.Capacity(ctx)
	if err != nil {
		return fmt.Errorf("datapath at %s: %w", addr, err)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "VOLUME\tNAME\tSIZE\tMODE\tNODE\tEPOCH\tSTATE\n")
	for _, v := range vols {
		as, err := dp.Attachments(ctx, v.ID)
		if err != nil {
			return fmt.Errorf("attachments of %s: %w", v.ID, err)
		}
		if len(as) == 0 {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t-\t-\t-\n", v.ID, v.Name, v.Size, v.Access)
		}
		for _, a := range as {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", v.ID, v.Name, v.Size, v.Access, a.Node, a.Epoch, a.State)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d volumes; %d bytes available\n", len(vols), avail)
	if err := printFailed(ctx, out, dp); err != nil {
		return fmt.Errorf("datapath at %s: %w", addr, err)
	}
	return nil
}

// printNodes prints the node table of `datapath status`; ages are measured on
// the server's clock, so the local clock does not matter.
func printNodes(out io.Writer, r datapath.NodesReport) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "NODE\tLAST HEARTBEAT\tLAST I/O\tLEAVING\tLIVE GRANTS\n")
	for _, n := range r.Nodes {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", n.Node, ago(r.Now, n.LastHeartbeat), ago(r.Now, n.LastIO), leaving(r.Now, n.LeavingUntil), n.LiveGrants)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d nodes; the datapath started %s ago (%s); it knows nothing of heartbeats or I/O before that\n",
		len(r.Nodes), age(r.Now.Sub(r.Started)), r.Started.Format(time.RFC3339))
	return err
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "none since start"
	}
	return age(now.Sub(t)) + " ago"
}

func leaving(now, until time.Time) string {
	switch {
	case until.IsZero():
		return "-"
	case until.After(now):
		return "for " + age(until.Sub(now))
	}
	return "ran out " + age(now.Sub(until)) + " ago"
}

// age renders d to a tenth of a second under a minute, to the second above.
func age(d time.Duration) string {
	d = max(d, 0)
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func datapathServe(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return cliflags.Usagef("serve takes no arguments, got %q", c.Args().Slice())
	}
	sec, err := parseServeSecurity(c)
	if err != nil {
		return err
	}
	grace := c.Duration("shutdown-grace")
	if grace < 0 {
		return cliflags.Usagef("--shutdown-grace %s: must not be negative", grace)
	}
	bootID, err := datapath.ReadBootID(c.String(flagServeBootIDFile))
	if err != nil {
		return cliflags.Usagef("--%s: %w", flagServeBootIDFile, err)
	}
	rf, err := parseRaftFlags(c)
	if err != nil {
		return err
	}
	storeOpts := datapath.Options{Capacity: c.Int64("capacity"), OverProvisioningPercentage: c.Int("over-provisioning-percentage")}
	if err := storeOpts.Validate(); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", c.String("listen"))
	if err != nil {
		return fmt.Errorf("--listen %s: %w", c.String("listen"), err)
	}
	var (
		metricsLis net.Listener
		reg        = prometheus.NewRegistry()
	)
	if rf.metrics != "" {
		if metricsLis, err = net.Listen("tcp", rf.metrics); err != nil {
			return errors.Join(fmt.Errorf("--%s %s: %w", flagServeMetrics, rf.metrics, err), lis.Close())
		}
		defer metricsLis.Close()
	}
	group, err := startControl(c.Context, rf, lis.Addr().String(), raftstate.NewMetrics(reg))
	if err != nil {
		return errors.Join(err, lis.Close())
	}
	if metricsLis != nil {
		defer serveDatapathMetrics(metricsLis, reg, group)()
	}
	stopGroup := func() error {
		if len(group.Status().Voters) > 1 && group.IsLeader() {
			if err := group.TransferLeadership(); err != nil {
				slog.Warn("datapath: leadership not handed over before the stop; the others elect a leader", "err", err)
			}
		}
		return group.Close()
	}
	storeOpts.Control = group
	store, err := datapath.Open(c.String("data-dir"), storeOpts)
	if err != nil {
		return errors.Join(err, lis.Close(), stopGroup())
	}
	opts := []datapath.ServerOption{datapath.WithBootID(bootID)}
	if sec.tls != nil {
		opts = append(opts, datapath.WithTLS(sec.tls))
	}
	srv, err := datapath.NewServer(store, sec.auth, opts...)
	if err != nil {
		return errors.Join(err, lis.Close(), store.Close(), stopGroup())
	}
	slog.Info("datapath: callers", "security", sec.describe)
	slog.Info("datapath: control group", "server", rf.self.ID, "raft", rf.self.RaftAddress, "dir", rf.dir)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	// The address line is the readiness signal for scripts and tests (with
	// --listen 127.0.0.1:0 it tells the port).
	fmt.Fprintf(c.App.Writer, "datapath: listening on %s, data in %s\n", lis.Addr(), c.String("data-dir"))
	if metricsLis != nil {
		fmt.Fprintf(c.App.Writer, "datapath: metrics on http://%s/metrics\n", metricsLis.Addr())
	}
	var serveErr error
	select {
	case sig := <-sigs:
		slog.Info("datapath: shutting down", "signal", sig.String())
		srv.Stop(grace)
		serveErr = <-served
	case serveErr = <-served:
	}
	if err := store.Close(); err != nil {
		return errors.Join(serveErr, fmt.Errorf("flush and close store: %w", err), stopGroup())
	}
	if err := stopGroup(); err != nil {
		return errors.Join(serveErr, fmt.Errorf("close the control group: %w", err))
	}
	if serveErr == nil {
		fmt.Fprintln(c.App.Writer, "datapath: stopped; every volume flushed")
	}
	return serveErr
}
