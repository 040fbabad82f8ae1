package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/urfave/cli/v2"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/raftstate"
	"github.com/vigil-storage/vigil/internal/cliflags"
)

// Flags of `vigil-datapath serve` for the control group: the Raft group
// that holds the volumes, attachment tables, epochs and announced stops.
const (
	flagServeServerID   = "server-id"
	flagServeRaftListen = "raft-listen"
	flagServeRaftPeers  = "raft-peers"
	// flagServeRaftJoin starts a server that a running group's leader then
	// adds (add-server), instead of bootstrapping a group.
	flagServeRaftJoin = "raft-join"
	// flagServeRaftAdvertise is where the other servers reach this one when
	// not at --raft-listen (a StatefulSet pod's stable DNS name).
	flagServeRaftAdvertise = "raft-advertise"
	// flagServeAdvertise is where clients reach this server when not at
	// --listen: recorded in the group, named in the redirects of the
	// others (the leader's address, a volume's holder's).
	flagServeAdvertise = "advertise-address"
	// flagServeRaftCA makes the Raft transport mutual TLS.
	flagServeRaftCA  = "raft-ca-file"
	flagServeRaftDir = "raft-dir"
	flagServeMetrics = "metrics-address"
	// flagServeNodeName is the Kubernetes node the server runs on, recorded
	// in the group and shown by the manager's nodes page.
	flagServeNodeName = "node-name"
	// flagServeRaftInsecure lets the Raft transport off loopback while the
	// clients' port serves TLS (--insecure is for the clients' port, and
	// contradicts TLS there).
	flagServeRaftInsecure = "raft-insecure"
	// defaultServerID is a lone server's id; each server of a group needs
	// its own, stable across restarts.
	defaultServerID = "datapath-0"
	// raftStartTimeout bounds the wait for a leader at start.
	raftStartTimeout = 30 * time.Second
	// raftJoinTimeout bounds a joining server's wait to be added.
	raftJoinTimeout = 30 * time.Minute
)

// loneTiming is the timing of a lone server with Raft in process: it has
// no peer to hear from, so only its first election at start waits out the
// heartbeat timeout, and a short one starts it within about 0.1 s instead
// of 0.5-1 s (a datapath restart stalls every engine that long).
var loneTiming = raftstate.Timing{HeartbeatTimeout: 50 * time.Millisecond, ElectionTimeout: 50 * time.Millisecond, LeaderLeaseTimeout: 50 * time.Millisecond}

func datapathServeRaftFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: flagServeServerID, Value: defaultServerID, EnvVars: []string{"VIGIL_DATAPATH_SERVER_ID"},
			Usage: "this server's id in the control group (1 to 253 printable characters, no white space); stable across restarts, " +
				"since the group knows its members and the volumes whose data each holds by it"},
		&cli.StringFlag{Name: flagServeNodeName, EnvVars: []string{"VIGIL_DATAPATH_NODE_NAME"},
			Usage: "the Kubernetes node this server runs on (in a pod: spec.nodeName), recorded in the control group: the manager's nodes page " +
				"shows the server on that node, and an Event on a PersistentVolume whose server does not answer names it; empty: not recorded"},
		&cli.StringFlag{Name: flagServeRaftListen, EnvVars: []string{"VIGIL_DATAPATH_RAFT_LISTEN"},
			Usage: "host:port the control group's Raft transport listens on and the other servers reach this one at; empty (a lone server): " +
				"Raft runs in process with no port. Off loopback only with --" + flagServeRaftCA + " (mutual TLS), or in the clear with --" + flagServeInsecure +
				" or --" + flagServeRaftInsecure},
		&cli.BoolFlag{Name: flagServeRaftInsecure, EnvVars: []string{"VIGIL_DATAPATH_RAFT_INSECURE"},
			Usage: "let --" + flagServeRaftListen + " off loopback while the clients' port serves TLS: Raft's messages then cross that network " +
				"in the clear and unauthenticated, so only on a network no one else reaches (the sandbox's node links)"},
		&cli.StringFlag{Name: flagServeRaftCA, EnvVars: []string{"VIGIL_DATAPATH_RAFT_CA_FILE"}, TakesFile: true,
			Usage: "Raft over mutual TLS: the CA of the servers' certificates; each server presents its serving certificate (--" + flagServeTLSCert +
				") both ways, and takes a peer only when its certificate is of this CA and valid for this server's own Raft host " +
				"(--" + flagServeRaftAdvertise + " or --" + flagServeRaftListen + "), as a certificate the servers share is; lets --" + flagServeRaftListen + " off loopback"},
		&cli.StringFlag{Name: flagServeAdvertise, EnvVars: []string{"VIGIL_DATAPATH_ADVERTISE_ADDRESS"},
			Usage: "host:port clients reach this server at, when not --listen (which then may be 0.0.0.0:PORT): recorded in the control group, " +
				"and named to a client that asked another server for a change (the leader's address) or for a volume's I/O (its holder's); " +
				"must be a name its TLS certificate holds"},
		&cli.StringFlag{Name: flagServeRaftAdvertise, EnvVars: []string{"VIGIL_DATAPATH_RAFT_ADVERTISE"},
			Usage: "host:port the other servers reach this one at, when not --" + flagServeRaftListen + " (which then may be 0.0.0.0:PORT): " +
				"a stable name, such as a StatefulSet pod's DNS name, resolved afresh at each connection; this server's entry of --" + flagServeRaftPeers + " names it"},
		&cli.StringFlag{Name: flagServeRaftPeers, EnvVars: []string{"VIGIL_DATAPATH_RAFT_PEERS"},
			Usage: "the group's servers as ID=RAFT_HOST:PORT@DATAPATH_HOST:PORT,... (this server among them, at --" + flagServeRaftListen +
				" and at --" + flagServeAdvertise + " or --" + flagServeListen + "), to bootstrap a new group on first start (ignored once the raft directory " +
				"holds state): the first leader records every server with its datapath address at once, so a new volume may be placed on any of them; " +
				"the form of before, ID=RAFT_HOST:PORT without @, is still taken, each server then recorded with its datapath address once it has led; " +
				"empty: a one-member group of this server alone"},
		&cli.BoolFlag{Name: flagServeRaftJoin, EnvVars: []string{"VIGIL_DATAPATH_RAFT_JOIN"},
			Usage: "join a running group instead of bootstrapping one: with an empty raft directory, wait (up to " + raftJoinTimeout.String() + ") until " +
				"`vigil-datapath add-server` at the group's leader adds this server; with state, rejoin as always. Needs --" + flagServeRaftListen + "; contradicts --" + flagServeRaftPeers},
		&cli.StringFlag{Name: flagServeRaftDir, EnvVars: []string{"VIGIL_DATAPATH_RAFT_DIR"},
			Usage: "directory of the control group's log, term and snapshots; default: raft/ under --data-dir"},
		&cli.StringFlag{Name: flagServeMetrics, EnvVars: []string{"VIGIL_DATAPATH_METRICS_ADDRESS"},
			Usage: "host:port for /metrics (the control group's leader changes, servers by state, commit durations); empty disables"},
	}
}

// raftFlags are the checked values of the control group's flags.
type raftFlags struct {
	self   raftstate.Server
	listen string // --raft-listen when it differs from self.RaftAddress (--raft-advertise)
	// advertise is --advertise-address: this server's datapath address as
	// recorded in the group; "" for the listen address.
	advertise string
	// peerCA is --raft-ca-file (Raft over mutual TLS with the serving
	// certificate, cert and key); "" for plain TCP.
	peerCA, cert, key string
	peers             []raftstate.Server
	join              bool // --raft-join
	dir               string
	metrics           string // --metrics-address
}

// parseRaftFlags checks the control group's flags, before anything is
// opened or created.
func parseRaftFlags(c *cli.Context) (raftFlags, error) {
	f := raftFlags{self: raftstate.Server{ID: c.String(flagServeServerID)}, dir: c.String(flagServeRaftDir), metrics: c.String(flagServeMetrics), join: c.Bool(flagServeRaftJoin)}
	if f.metrics != "" {
		if _, _, err := net.SplitHostPort(f.metrics); err != nil {
			return f, cliflags.Usagef("--%s %q: %v; want HOST:PORT", flagServeMetrics, f.metrics, err)
		}
	}
	if f.advertise = c.String(flagServeAdvertise); f.advertise != "" {
		if err := checkAdvertise(flagServeAdvertise, f.advertise); err != nil {
			return f, err
		}
	}
	if err := raftstate.ValidServerID(f.self.ID); err != nil {
		return f, cliflags.Usagef("--%s %q: %v", flagServeServerID, f.self.ID, err)
	}
	if f.self.Node = c.String(flagServeNodeName); f.self.Node != "" {
		if err := datapath.ValidNode(f.self.Node); err != nil {
			return f, cliflags.Usagef("--%s: %v", flagServeNodeName, err)
		}
	}
	if f.dir == "" {
		f.dir = filepath.Join(c.String("data-dir"), "raft")
	}
	listen, peers, advertise := c.String(flagServeRaftListen), c.String(flagServeRaftPeers), c.String(flagServeRaftAdvertise)
	if f.join && (listen == "" || peers != "") {
		return f, cliflags.Usagef("--%s needs --%s (the group reaches this server there) and contradicts --%s (a joining server bootstraps no group)",
			flagServeRaftJoin, flagServeRaftListen, flagServeRaftPeers)
	}
	if listen == "" {
		for flag, v := range map[string]string{flagServeRaftPeers: peers, flagServeRaftAdvertise: advertise, flagServeRaftCA: c.String(flagServeRaftCA)} {
			if v != "" {
				return f, cliflags.Usagef("--%s needs --%s: the other servers must reach this one", flag, flagServeRaftListen)
			}
		}
		f.self.RaftAddress = raftstate.InProcessAddress
		return f, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "0" || host == "" {
		return f, cliflags.Usagef("--%s %q: want HOST:PORT with a fixed port (the other servers record it)", flagServeRaftListen, listen)
	}
	if err := f.parsePeerTLS(c); err != nil {
		return f, err
	}
	if !datapath.IsLoopback(host) && !c.Bool(flagServeInsecure) && !c.Bool(flagServeRaftInsecure) && f.peerCA == "" {
		return f, cliflags.Usagef("--%s %s is off loopback: give --%s (Raft over mutual TLS with the servers' certificate), keep it on loopback, "+
			"or pass --%s (or --%s, which leaves the clients' port on TLS) to send Raft's messages in the clear on a network you trust",
			flagServeRaftListen, listen, flagServeRaftCA, flagServeInsecure, flagServeRaftInsecure)
	}
	f.self.RaftAddress = listen
	if advertise != "" {
		if err := checkAdvertise(flagServeRaftAdvertise, advertise); err != nil {
			return f, err
		}
		f.self.RaftAddress, f.listen = advertise, listen
	}
	if peers == "" {
		return f, nil
	}
	if f.peers, err = raftstate.ParsePeers(peers); err != nil {
		return f, cliflags.Usagef("--%s: %v", flagServeRaftPeers, err)
	}
	for _, p := range f.peers {
		if p.ID == f.self.ID && p.RaftAddress != f.self.RaftAddress {
			flag := flagServeRaftListen
			if advertise != "" {
				flag = flagServeRaftAdvertise
			}
			return f, cliflags.Usagef("--%s lists this server (%s) at %s, but --%s is %s", flagServeRaftPeers, p.ID, p.RaftAddress, flag, f.self.RaftAddress)
		}
		if p.ID == f.self.ID && p.DatapathAddress != "" && f.advertise != "" && p.DatapathAddress != f.advertise {
			return f, cliflags.Usagef("--%s lists this server (%s) serving clients at %s, but --%s is %s", flagServeRaftPeers, p.ID, p.DatapathAddress, flagServeAdvertise, f.advertise)
		}
		if p.ID == f.self.ID {
			return f, nil
		}
	}
	return f, cliflags.Usagef("--%s does not list this server (--%s %s)", flagServeRaftPeers, flagServeServerID, f.self.ID)
}

// parsePeerTLS checks --raft-ca-file against the flags it needs and
// contradicts.
func (f *raftFlags) parsePeerTLS(c *cli.Context) error {
	f.peerCA, f.cert, f.key = c.String(flagServeRaftCA), c.String(flagServeTLSCert), c.String(flagServeTLSKey)
	switch {
	case f.peerCA == "":
		return nil
	case f.cert == "" || f.key == "":
		return cliflags.Usagef("--%s needs --%s and --%s: each server presents its serving certificate to the others", flagServeRaftCA, flagServeTLSCert, flagServeTLSKey)
	case c.Bool(flagServeRaftInsecure):
		return cliflags.Usagef("--%s contradicts --%s: Raft over TLS or in the clear, not both", flagServeRaftCA, flagServeRaftInsecure)
	}
	return nil
}

// checkAdvertise refuses an advertised address (--flag) no one can dial.
func checkAdvertise(flag, advertise string) error {
	h, p, err := net.SplitHostPort(advertise)
	if err != nil || h == "" || p == "0" || net.ParseIP(h) != nil && net.ParseIP(h).IsUnspecified() {
		return cliflags.Usagef("--%s %q: want HOST:PORT with a host the others reach (not 0.0.0.0) and a fixed port", flag, advertise)
	}
	return nil
}

// startControl starts this server's member of the control group and waits
// until its state is current (a lone server: it leads at once).
func startControl(ctx context.Context, f raftFlags, datapathAddr string, metrics *raftstate.Metrics) (*raftstate.Group, error) {
	wait := raftStartTimeout
	if f.join {
		wait = raftJoinTimeout
		slog.Info("datapath: joining a control group: waiting to be added (vigil-datapath add-server at the group's leader)", "server", f.self.ID, "raft", f.self.RaftAddress)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	cfg := raftstate.Config{ID: f.self.ID, Dir: f.dir, Address: f.self.RaftAddress, Metrics: metrics, Join: f.join}
	if f.listen != "" {
		cfg.Address, cfg.Advertise = f.listen, f.self.RaftAddress
	}
	if f.peerCA != "" {
		host, _, _ := net.SplitHostPort(f.self.RaftAddress)
		accept, dial, err := datapath.PeerTLS(f.cert, f.key, f.peerCA, host)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flagServeRaftCA, err)
		}
		cfg.PeerTLS = &raftstate.PeerTLS{Accept: accept, Dial: dial}
	}
	if f.self.RaftAddress == raftstate.InProcessAddress {
		cfg.Transport = raftstate.InProcessTransport()
		cfg.Timing = loneTiming
	}
	self := f.self
	self.DatapathAddress = datapathAddr
	if f.advertise != "" {
		self.DatapathAddress = f.advertise
	}
	g, err := raftstate.Start(ctx, cfg, self, f.peers)
	if err != nil {
		return nil, fmt.Errorf("control group (server %s, raft directory %s): %w", f.self.ID, f.dir, err)
	}
	return g, nil
}

// serveDatapathMetrics serves /metrics on lis until the returned function
// closes it; each scrape first brings the group's gauges up to date.
func serveDatapathMetrics(lis net.Listener, reg *prometheus.Registry, g *raftstate.Group) func() {
	mux := http.NewServeMux()
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		g.UpdateMetrics()
		h.ServeHTTP(w, r)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("datapath: metrics server stopped", "err", err)
		}
	}()
	return func() { _ = hs.Close() }
}
