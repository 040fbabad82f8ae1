package raftstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/vigil-storage/vigil/datapath"
)

// Files in a group's data directory.
const (
	raftDBFile = "raft.db" // the log and the stable store (raft-boltdb)
	snapDir    = "snapshots"
)

// Timing is the group's failure detection and log compaction.
type Timing struct {
	// HeartbeatTimeout: a follower that hears nothing from the leader this
	// long (randomised up to twice) starts an election.
	HeartbeatTimeout time.Duration
	// ElectionTimeout: a candidate's wait for votes (randomised likewise).
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout: a leader that has not heard from a majority this
	// long steps down, so a cut-off leader stops answering.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout bounds how long the leader waits before it sends an
	// empty append (it batches otherwise).
	CommitTimeout time.Duration
	// SnapshotInterval and SnapshotThreshold: how often the log is checked,
	// and how many new entries make a snapshot; TrailingLogs are kept after
	// one, so a briefly absent follower catches up from the log.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
}

// DefaultTiming suits a LAN: a leader's loss is noticed within 0.5-1 s and
// a new one elected within about 1-2 s.
var DefaultTiming = Timing{
	HeartbeatTimeout:   500 * time.Millisecond,
	ElectionTimeout:    500 * time.Millisecond,
	LeaderLeaseTimeout: 500 * time.Millisecond,
	CommitTimeout:      20 * time.Millisecond,
	SnapshotInterval:   2 * time.Minute,
	SnapshotThreshold:  8192,
	TrailingLogs:       10240,
}

// Config opens a Group.
type Config struct {
	// ID is this server's id in the group (unique, stable across restarts).
	ID string
	// Dir is the data directory: raft.db and snapshots/.
	Dir string
	// Address is host:port the Raft transport listens on (TCP) and the other
	// members reach it at; port 0 picks a free one (see Group.Address).
	// Ignored when Transport is set.
	Address string
	// Advertise, when set, is host:port the other members reach this one
	// at instead of Address (which it still listens on): a stable name
	// (a StatefulSet pod's DNS name) while Address is 0.0.0.0:PORT, or an
	// address behind a NAT. It is resolved afresh at every dial, never
	// turned into an IP.
	Advertise string
	// PeerTLS, when set, makes every Raft connection mutual TLS.
	PeerTLS *PeerTLS
	// Transport, when set, carries Raft's messages instead of TCP on
	// Address (tests: raft.InmemTransport). Close closes it.
	Transport raft.Transport
	// Timing defaults to DefaultTiming (each zero field to its default).
	Timing Timing
	// ApplyTimeout bounds a command or a current read whose context has no
	// deadline (default 5 s).
	ApplyTimeout time.Duration
	// LogOutput receives Raft's warnings and errors (default os.Stderr).
	LogOutput io.Writer
	// Now is the clock recorded in commands (default time.Now).
	Now func() time.Time
	// Metrics, when set, receives the group's metrics (NewMetrics).
	Metrics *Metrics
	// Join: Start bootstraps nothing; the server waits until the leader of
	// a running group adds it (AddMember), or rejoins with its state.
	Join bool

	// inMemory keeps the log, the stable store and the snapshots in memory
	// (benchmarks of the transport alone); Dir is still required.
	inMemory bool
}

// Group is one server's member of the replicated control state: a Raft node
// over hashicorp/raft with the FSM, its log and stable store in bbolt
// (raft-boltdb) and its snapshots in files. Every change goes through the
// leader and returns once a majority committed it; every current read goes
// through the leader too.
type Group struct {
	id           string
	raft         *raft.Raft
	fsm          *FSM
	store        *raftboltdb.BoltStore // nil when in memory
	logs         raft.LogStore
	stable       raft.StableStore
	snaps        raft.SnapshotStore
	trans        raft.Transport
	ownTrans     *raft.NetworkTransport
	now          func() time.Time
	logger       hclog.Logger
	applyTimeout time.Duration
	heartbeat    time.Duration // Raft's heartbeat timeout (Settled)
	closed       atomic.Bool
	stopped      atomic.Bool // shut down because its state diverged
	observer     *raft.Observer
	observed     chan raft.Observation
	metrics      *Metrics
	stopWatch    func()     // ends watch (metrics.go)
	unreachable  func() int // followers missing the leader's heartbeats
	// unreachablePeers: their ids.
	unreachablePeers func() map[string]bool
	// self is this server's record as Start was given it (its node and
	// datapath address), which it records in the group whenever it
	// becomes the leader and finds it missing or different (recordSelf);
	// nil when opened without Start.
	self atomic.Pointer[Server]
	// bootPeers are the peers this server bootstrapped the group with in
	// this process (nil when it found Raft state), which a leader records
	// when the group has no record of them (recordMembers).
	bootPeers atomic.Pointer[[]Server]
}

// Open opens (or creates) a server's member in cfg.Dir. A new directory
// belongs to no group until Bootstrap or until a leader adds the server; an
// existing one rejoins its group with its log, snapshots and term.
func Open(cfg Config) (*Group, error) {
	if err := validServerID(cfg.ID); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: data directory: empty path", datapath.ErrInvalidArgument)
	}
	if cfg.Transport == nil {
		if err := validListenAddress(cfg.Address); err != nil {
			return nil, err
		}
	}
	conf, err := raftConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, snapDir), 0o700); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", cfg.Dir, err)
	}
	g := &Group{id: cfg.ID, fsm: NewFSM(), now: cfg.Now, applyTimeout: cfg.ApplyTimeout, trans: cfg.Transport}
	if g.now == nil {
		g.now = time.Now
	}
	if g.applyTimeout <= 0 {
		g.applyTimeout = 5 * time.Second
	}
	if err := g.openStores(cfg, conf.Logger); err != nil {
		return nil, err
	}
	g.fsm.logs = g.logs
	g.logger, g.heartbeat = conf.Logger, conf.HeartbeatTimeout
	g.raft, err = raft.NewRaft(conf, g.fsm, g.logs, g.stable, g.snaps, g.trans)
	if err != nil {
		g.closeStores()
		return nil, fmt.Errorf("start raft in %s: %w", cfg.Dir, err)
	}
	g.checkOnLeadership()
	g.metrics = cfg.Metrics
	g.stopWatch = g.watch(cfg.Metrics)
	return g, nil
}

// checkOnLeadership checks the state each time this server becomes the
// leader, before any client asks, so a server whose state diverged stops
// before it leads (and sends its snapshots) for long.
func (g *Group) checkOnLeadership() {
	ch := make(chan raft.Observation, 4)
	g.observer = raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		lo, ok := o.Data.(raft.LeaderObservation)
		return ok && string(lo.LeaderID) == g.id
	})
	g.observed = ch
	g.raft.RegisterObserver(g.observer)
	go func() {
		for range ch {
			if g.failStop(g.fsm.Verify()) == nil {
				g.recordMembers()
			}
		}
	}()
}

func raftConfig(cfg Config) (*raft.Config, error) {
	t := cfg.Timing
	d := DefaultTiming
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(cfg.ID)
	conf.HeartbeatTimeout = or(t.HeartbeatTimeout, d.HeartbeatTimeout)
	conf.ElectionTimeout = or(t.ElectionTimeout, d.ElectionTimeout)
	conf.LeaderLeaseTimeout = or(t.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	conf.CommitTimeout = or(t.CommitTimeout, d.CommitTimeout)
	conf.SnapshotInterval = or(t.SnapshotInterval, d.SnapshotInterval)
	conf.SnapshotThreshold = or(t.SnapshotThreshold, d.SnapshotThreshold)
	conf.TrailingLogs = or(t.TrailingLogs, d.TrailingLogs)
	out := cfg.LogOutput
	if out == nil {
		out = os.Stderr
	}
	conf.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft " + cfg.ID, Level: hclog.Warn, Output: out})
	if err := raft.ValidateConfig(conf); err != nil {
		return nil, fmt.Errorf("%w: raft timing: %v", datapath.ErrInvalidArgument, err)
	}
	return conf, nil
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// openStores opens the log and stable store, the snapshot store and, unless
// the config brings one, the TCP transport.
func (g *Group) openStores(cfg Config, logger hclog.Logger) error {
	if cfg.inMemory {
		mem := raft.NewInmemStore()
		g.logs, g.stable, g.snaps = mem, mem, raft.NewInmemSnapshotStore()
		return g.openTransport(cfg, logger)
	}
	path := filepath.Join(cfg.Dir, raftDBFile)
	store, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bolt.Options{Timeout: 2 * time.Second}})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return fmt.Errorf("data directory %s is in use by another server (lock on %s)", cfg.Dir, raftDBFile)
		}
		return fmt.Errorf("open %s: %w", path, err)
	}
	g.store, g.logs, g.stable = store, store, store
	g.snaps, err = raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.Dir, snapDir), 2, logger)
	if err != nil {
		g.closeStores()
		return fmt.Errorf("snapshots in %s: %w", cfg.Dir, err)
	}
	return g.openTransport(cfg, logger)
}

// openTransport listens on cfg.Address unless the config brings a
// transport.
func (g *Group) openTransport(cfg Config, logger hclog.Logger) error {
	if g.trans != nil {
		return nil
	}
	var err error
	if cfg.Advertise != "" || cfg.PeerTLS != nil {
		stream, err := listenAdvertised(cfg.Address, cfg.Advertise, cfg.PeerTLS)
		if err != nil {
			g.closeStores()
			return err
		}
		g.ownTrans = raft.NewNetworkTransportWithLogger(stream, 3, 10*time.Second, logger)
		g.trans = g.ownTrans
		return nil
	}
	g.ownTrans, err = raft.NewTCPTransportWithLogger(cfg.Address, nil, 3, 10*time.Second, logger)
	if err != nil {
		g.closeStores()
		return fmt.Errorf("raft transport on %s: %w", cfg.Address, err)
	}
	g.trans = g.ownTrans
	return nil
}

// Address is the address this server's transport listens on (with the
// port chosen when Config.Address asked for port 0).
func (g *Group) Address() string { return string(g.trans.LocalAddr()) }

func (g *Group) closeStores() {
	if g.ownTrans != nil {
		_ = g.ownTrans.Close()
	}
	if g.store != nil {
		_ = g.store.Close()
	}
}

// Close stops this member (the others go on without it) and closes its
// files. It does not hand leadership over first: TransferLeadership does.
func (g *Group) Close() error {
	if g.closed.Swap(true) {
		return nil
	}
	err := g.raft.Shutdown().Error()
	if g.stopWatch != nil {
		g.stopWatch()
	}
	g.raft.DeregisterObserver(g.observer)
	close(g.observed)
	g.closeStores()
	return err
}

// Bootstrap makes a new group of peers (this server among them; one peer
// for a one-member group). Only a server with no Raft state may bootstrap,
// and every peer of the list must bootstrap with the same list, or only one
// of them with a one-member list and the others added with AddServer. A
// server that already has Raft state gets ErrHasState and changes nothing.
// Start then has the first leader record each peer with the node and
// datapath address the list gives (Raft itself knows only id and raft
// address).
func (g *Group) Bootstrap(peers []Server) error {
	if err := g.checkPeers(peers); err != nil {
		return err
	}
	conf := raft.Configuration{}
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddress)})
	}
	if err := g.raft.BootstrapCluster(conf).Error(); err != nil {
		if errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("%w: server %s; it rejoins its group without Bootstrap", ErrHasState, g.id)
		}
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// checkPeers refuses a peer list that cannot make a group: empty, a
// malformed or repeated id or address, or without this server at its own
// address.
func (g *Group) checkPeers(peers []Server) error {
	if len(peers) == 0 {
		return fmt.Errorf("%w: bootstrap with no peers; list every member, this server (%s) among them", datapath.ErrInvalidArgument, g.id)
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	self := false
	for i, p := range peers {
		if err := p.validate(); err != nil {
			return fmt.Errorf("peer %d: %w", i+1, err)
		}
		if ids[p.ID] {
			return fmt.Errorf("%w: peer %d: server id %s is listed twice", datapath.ErrInvalidArgument, i+1, p.ID)
		}
		if addrs[p.RaftAddress] {
			return fmt.Errorf("%w: peer %d: raft address %s is listed twice", datapath.ErrInvalidArgument, i+1, p.RaftAddress)
		}
		ids[p.ID], addrs[p.RaftAddress] = true, true
		if p.ID == g.id {
			if local := string(g.trans.LocalAddr()); p.RaftAddress != local {
				return fmt.Errorf("%w: peer %d: this server (%s) is listed at %s but listens at %s", datapath.ErrInvalidArgument, i+1, g.id, p.RaftAddress, local)
			}
			if self := g.self.Load(); self != nil && p.DatapathAddress != "" && p.DatapathAddress != self.DatapathAddress {
				return fmt.Errorf("%w: peer %d: this server (%s) is listed serving clients at %s but serves them at %s", datapath.ErrInvalidArgument, i+1, g.id, p.DatapathAddress, self.DatapathAddress)
			}
			self = true
		}
	}
	if !self {
		return fmt.Errorf("%w: the peers do not include this server (%s)", datapath.ErrInvalidArgument, g.id)
	}
	return nil
}

// AddServer records a member (its node and datapath address) and makes it
// a voter; the leader only. Adding a voter again with the same address
// changes nothing, so it is safe to repeat after an error.
func (g *Group) AddServer(ctx context.Context, m Server) error {
	if _, err := g.apply(ctx, Command{Op: OpAddServer, Member: &m}); err != nil {
		return err
	}
	ctx, cancel := g.deadline(ctx)
	defer cancel()
	return g.wait(ctx, "add voter "+m.ID, g.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddress), 0, g.applyTimeout))
}

// RemoveServer removes a member from the group; the leader only. A member
// that holds volumes' data is refused (ErrInUse).
func (g *Group) RemoveServer(ctx context.Context, id string) error {
	if _, err := g.apply(ctx, Command{Op: OpRemoveServer, Member: &Server{ID: id}}); err != nil {
		return err
	}
	ctx, cancel := g.deadline(ctx)
	defer cancel()
	return g.wait(ctx, "remove server "+id, g.raft.RemoveServer(raft.ServerID(id), 0, g.applyTimeout))
}

// TransferLeadership hands the leadership to another voter (before a
// planned stop), so the group does not wait out an election timeout.
func (g *Group) TransferLeadership() error {
	if err := g.raft.LeadershipTransfer().Error(); err != nil {
		return fmt.Errorf("transfer leadership from %s: %w", g.id, err)
	}
	return nil
}

// TransferLeadershipTo hands the leadership to the voter id (tests, and an
// operator who wants the leader on a given node).
func (g *Group) TransferLeadershipTo(id string) error {
	f := g.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("transfer leadership to %s: %w", id, err)
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == id && srv.Suffrage == raft.Voter {
			if err := g.raft.LeadershipTransferToServer(srv.ID, srv.Address).Error(); err != nil {
				return fmt.Errorf("transfer leadership from %s to %s: %w", g.id, id, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: transfer leadership to %s: not a voter of the group", datapath.ErrInvalidArgument, id)
}

// apply proposes a command at this server, which must be the leader, and
// returns its result once a majority committed it and this server applied
// it. Bad input is refused before anything is proposed.
func (g *Group) apply(ctx context.Context, c Command) (result, error) {
	if g.closed.Load() {
		return result{}, ErrClosed
	}
	if c.At.IsZero() {
		c.At = g.now().UTC()
	}
	if err := c.validate(); err != nil {
		return result{}, err
	}
	data, err := c.encode()
	if err != nil {
		return result{}, err
	}
	if g.raft.State() != raft.Leader {
		return result{}, g.notLeader()
	}
	if err := g.fsm.Verify(); err != nil {
		return result{}, g.failStop(err)
	}
	ctx, cancel := g.deadline(ctx)
	defer cancel()
	defer g.observeCommit(time.Now())
	f := g.raft.Apply(data, g.applyTimeout)
	if err := g.wait(ctx, string(c.Op), f); err != nil {
		return result{}, err
	}
	res, _ := f.Response().(result)
	return res, g.failStop(res.err)
}

// failStop takes a server whose state diverged out of the group (its Raft
// node shuts down, so the others elect a leader whose state is right) and
// returns err.
func (g *Group) failStop(err error) error {
	if errors.Is(err, ErrDiverged) && !g.stopped.Swap(true) {
		g.logger.Error("stopping this server: its state diverged from the group's", "error", err)
		go g.raft.Shutdown()
	}
	return err
}

// current returns once this server's state holds every change committed
// before the call: a barrier entry committed by a majority through this
// server as leader and applied here. A follower, or a leader cut off from
// the majority, gets an error and must not answer.
func (g *Group) current(ctx context.Context) error {
	if g.closed.Load() {
		return ErrClosed
	}
	if g.raft.State() != raft.Leader {
		return g.notLeader()
	}
	ctx, cancel := g.deadline(ctx)
	defer cancel()
	if err := g.wait(ctx, "read", g.raft.Barrier(g.applyTimeout)); err != nil {
		return err
	}
	return g.failStop(g.fsm.Verify())
}

func (g *Group) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, g.applyTimeout)
}

// wait waits for a future until ctx ends, and says what its error means.
func (g *Group) wait(ctx context.Context, what string, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return fmt.Errorf("%w: %s at server %s: %v; it may still be committed", ErrNotCommitted, what, g.id, ctx.Err())
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader):
		return g.notLeader()
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w (%w): %s at server %s; it may still be committed", ErrClosed, ErrNotCommitted, what, g.id)
	}
	return fmt.Errorf("%w: %s at server %s: %v; it may still be committed", ErrNotCommitted, what, g.id, err)
}

func (g *Group) notLeader() error {
	addr, id := g.raft.LeaderWithID()
	if id == "" || string(id) == g.id {
		return &datapath.NotLeaderError{Msg: fmt.Sprintf("%v: server %s is %s and knows no leader (an election is under way, or it is cut off from the majority)",
			ErrNotLeader, g.id, g.raft.State())}
	}
	e := &datapath.NotLeaderError{LeaderID: string(id), Msg: fmt.Sprintf("%v: server %s is %s; the leader is %s at raft address %s", ErrNotLeader, g.id, g.raft.State(), id, addr)}
	for _, m := range g.fsm.Servers() {
		if m.ID == string(id) && m.DatapathAddress != "" {
			e.LeaderAddress = m.DatapathAddress
			e.Msg += ", serving clients at " + m.DatapathAddress
		}
	}
	return e
}

// Leader returns the id and raft address of the leader this server knows,
// empty when it knows none.
func (g *Group) Leader() (id, address string) {
	addr, lid := g.raft.LeaderWithID()
	return string(lid), string(addr)
}

// IsLeader says whether this server is the leader now (it may learn
// otherwise at its next commit).
func (g *Group) IsLeader() bool { return g.raft.State() == raft.Leader }

// Status is one server's view of the group, for status pages; it needs no
// leader.
type Status struct {
	ID string
	// Role is leader, follower, candidate or shutdown.
	Role         string
	Leader       string
	LastContact  time.Time // with the leader; zero on the leader
	AppliedIndex uint64
	CommitIndex  uint64
	Voters       []string
	LocalVolumes int // volumes in this server's state, which may be stale
	LocalServers []Server
}

// Status reports this server's view.
func (g *Group) Status() Status {
	leader, _ := g.Leader()
	s := Status{ID: g.id, Role: strings.ToLower(g.raft.State().String()), Leader: leader, AppliedIndex: g.raft.AppliedIndex(), CommitIndex: g.raft.CommitIndex(),
		LocalVolumes: len(g.fsm.Volumes()), LocalServers: g.fsm.Servers()}
	if g.raft.State() != raft.Leader {
		s.LastContact = g.raft.LastContact()
	}
	if f := g.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			if srv.Suffrage == raft.Voter {
				s.Voters = append(s.Voters, string(srv.ID))
			}
		}
	}
	return s
}
