package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Config configures New.
type Config struct {
	Settings   SettingsService
	Nodes      NodesSource      // nil: /v1/nodes answers 503
	Recoveries RecoveriesSource // nil: /v1/recoveries answers 503
	// Token is the bearer token every write needs (required).
	Token string
	// TokenForReads makes reads need the token too: set it when the manager
	// listens beyond loopback.
	TokenForReads bool
	// MaxBodyBytes bounds request bodies; DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	Log          *slog.Logger
}

// API serves /v1/. Create it with New, Register it on a mux and Run it (Run
// feeds the event stream).
type API struct {
	cfg   Config
	svc   *Service
	hub   *Hub
	token tokenCheck
	log   *slog.Logger

	nodesDirty, recoveriesDirty             chan struct{}
	lastMu                                  sync.Mutex
	lastNodes, lastRecoveries, lastProblems string

	listMu   sync.Mutex // guards the encoded settings list
	listETag string
	listBody []byte
}

// Errors of New.
var (
	ErrNoToken    = errors.New("httpapi: an API token is required")
	ErrNoSettings = errors.New("httpapi: Config.Settings is required")
)

// New checks cfg and returns the API.
func New(cfg Config) (*API, error) {
	if cfg.Settings == nil {
		return nil, ErrNoSettings
	}
	if cfg.Token == "" {
		return nil, ErrNoToken
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &API{
		cfg: cfg, svc: NewService(cfg.Settings), hub: NewHub(), token: newTokenCheck(cfg.Token), log: cfg.Log,
		nodesDirty: make(chan struct{}, 1), recoveriesDirty: make(chan struct{}, 1),
	}, nil
}

// Service is the settings logic the UI shares.
func (a *API) Service() *Service { return a.svc }

// Hub is the event stream's hub.
func (a *API) Hub() *Hub { return a.hub }

// Nodes returns the nodes report (ErrUnavailable without a source).
func (a *API) Nodes(ctx context.Context) (NodesReport, error) {
	if a.cfg.Nodes == nil {
		return NodesReport{}, fmt.Errorf("no node source: %w", ErrUnavailable)
	}
	return a.cfg.Nodes.Nodes(ctx)
}

// Recoveries returns every recovery, newest first.
func (a *API) Recoveries(ctx context.Context) ([]RecoveryView, error) {
	if a.cfg.Recoveries == nil {
		return nil, fmt.Errorf("no recovery source: %w", ErrUnavailable)
	}
	rs, err := a.cfg.Recoveries.Recoveries(ctx)
	if err != nil {
		return nil, err
	}
	return RecoveriesOf(rs), nil
}

// Recovery returns one recovery with its record.
func (a *API) Recovery(ctx context.Context, name string) (RecoveryView, error) {
	if a.cfg.Recoveries == nil {
		return RecoveryView{}, fmt.Errorf("no recovery source: %w", ErrUnavailable)
	}
	r, err := a.cfg.Recoveries.Recovery(ctx, name)
	if err != nil {
		return RecoveryView{}, err
	}
	return RecoveryOf(r, true), nil
}

// Register adds the /v1/ routes to mux. Each path takes every method, so a
// wrong one gets a JSON 405 naming the allowed ones.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc(PathSettings, a.serveSettings)
	mux.HandleFunc(PathHistory, a.serveHistory)
	mux.HandleFunc(PathSettings+"/{name}", a.serveSetting)
	mux.HandleFunc(PathSettings+"/{name}/check", a.serveCheck)
	mux.HandleFunc(PathNodes, a.serveNodes)
	mux.HandleFunc(PathRecoveries, a.serveRecoveries)
	mux.HandleFunc(PathRecoveries+"/{name}", a.serveRecovery)
	mux.HandleFunc(PathEvents, a.serveEvents)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiError(http.StatusNotFound, CodeNotFound, "no such API path %s; see %s, %s, %s, %s",
			r.URL.Path, PathSettings, PathNodes, PathRecoveries, PathEvents))
	})
}

// NodesChanged tells the API that nodes may have changed; the event stream gets
// the new list (coalesced, and only when it differs). It never blocks.
func (a *API) NodesChanged() { signal(a.nodesDirty) }

// RecoveriesChanged is NodesChanged for NodeRecovery records.
func (a *API) RecoveriesChanged() { signal(a.recoveriesDirty) }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// coalesce is the shortest interval between two node (or recovery) events.
const coalesce = 200 * time.Millisecond

// Run feeds the event stream until ctx ends: every settings change, the
// problems when they change, and the node and recovery lists when they change.
// Then it closes every stream.
func (a *API) Run(ctx context.Context) {
	defer a.hub.Close()
	changes, cancel := a.cfg.Settings.Subscribe()
	defer cancel()
	problems := a.cfg.Settings.ProblemsChanged()
	a.publishIfChanged("", nil, a.svc.Problems(), &a.lastProblems) // the problems at start: an event says they changed since
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-changes:
			if !ok {
				<-ctx.Done()
				return
			}
			a.publishSetting(c.Name)
		case <-problems:
			problems = a.cfg.Settings.ProblemsChanged()
			a.publishProblems()
		case <-a.nodesDirty:
			a.publishNodes(ctx)
			sleep(ctx, coalesce)
		case <-a.recoveriesDirty:
			a.publishRecoveries(ctx)
			sleep(ctx, coalesce)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (a *API) publishSetting(name string) {
	v, err := a.svc.Setting(name)
	if err != nil {
		return
	}
	a.hub.Publish(EventSettings, struct {
		Setting SettingView `json:"setting"`
		ETag    string      `json:"etag"`
	}{v, a.svc.Settings().ETag})
}

// publishProblems sends the "problems" event when the refused values or the
// blocking changed.
func (a *API) publishProblems() {
	v := a.svc.Problems()
	a.publishIfChanged(EventProblems, v, v, &a.lastProblems)
}

// publishNodes sends the "nodes" event when the report changed, heartbeat ages
// aside: they move every moment, and the pages refresh them on their own.
func (a *API) publishNodes(ctx context.Context) {
	rep, err := a.Nodes(ctx)
	if err != nil {
		return
	}
	a.publishIfChanged(EventNodes, rep, stableNodes(rep), &a.lastNodes)
}

// stableNodes is rep without the heartbeat ages.
func stableNodes(rep NodesReport) NodesReport {
	out := rep
	out.Nodes = make([]NodeView, len(rep.Nodes))
	for i, n := range rep.Nodes {
		n.HeartbeatAgeSeconds = nil
		out.Nodes[i] = n
	}
	return out
}

func (a *API) publishRecoveries(ctx context.Context) {
	rs, err := a.Recoveries(ctx)
	if err != nil {
		return
	}
	a.publishIfChanged(EventRecoveries, rs, rs, &a.lastRecoveries)
}

// publishIfChanged publishes data as the event name unless key encodes as it
// did last time (name "" only remembers key).
func (a *API) publishIfChanged(name string, data, key any, last *string) {
	b, _ := json.Marshal(key)
	k := string(b)
	a.lastMu.Lock()
	same := *last == k
	*last = k
	a.lastMu.Unlock()
	if !same && name != "" {
		a.hub.Publish(name, data)
	}
}

// parseLimit reads ?limit= (DefaultHistoryLimit when absent).
func parseLimit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return DefaultHistoryLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxHistoryLimit {
		return 0, apiError(http.StatusBadRequest, CodeBadRequest, "limit %q: want an integer from 1 to %d", s, MaxHistoryLimit)
	}
	return n, nil
}
