package settings

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Source says where the value in force comes from.
type Source string

// The sources of a value, in increasing precedence.
const (
	SourceDefault Source = "default" // nothing stored: the definition's default
	SourceStore   Source = "store"   // the store (bolt file or ConfigMap)
	SourceManaged Source = "managed" // the managed overlay directory
)

// Change tells a subscriber that the value in force of a setting, or its source,
// changed. Value is in canonical form.
type Change struct {
	Name   string
	Value  string
	Source Source
}

// Entry is a setting as the CLI, API and UI show it.
type Entry struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Default string `json:"default"`
	Source  Source `json:"source"`
	// ManagedPath is the overlay file that locks this setting; "" when it is not
	// managed. A managed setting refuses Set and Reset.
	ManagedPath string `json:"managedPath,omitempty"`
	// Problem describes the last value refused for this setting (from the overlay
	// or the store); the value in force is the last good one.
	Problem string `json:"problem,omitempty"`
	// Blocking: the refused value came with no good value from its source since
	// this process started, so the value in force is not the one given; acting
	// is blocked (ActBlocked) until it is fixed.
	Blocking   bool        `json:"blocking,omitempty"`
	Definition *Definition `json:"-"`
}

// Settings is the live, validated view: store values overridden by the managed
// overlay, defaults for the rest. Safe for concurrent use; accessors never parse
// strings (values are parsed once when they change) and never return an invalid
// value.
type Settings struct {
	store   Store
	log     *slog.Logger
	metrics *metrics
	snap    atomic.Pointer[snapshot]
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	overlay *overlayWatcher

	mu            sync.Mutex // guards what follows; held while applying a change
	closed        bool
	defaults      map[string]value
	stored        map[string]value
	storeProblem  map[string]*refusal // the store's value refused, by setting
	watchedGen    map[string]uint64   // per name: store values taken from the store's read and watch
	managed       map[string]*managedKey
	unknownFiles  map[string]*refusal // overlay files that name no setting
	unknownLogged map[string]bool     // unknown names in the store, logged once
	subs          map[*subscriber]struct{}
	problemsCh    chan struct{}       // closed and replaced when the problems may have changed
	observed      *queue[observation] // changes to record (WithObservedHistory); nil otherwise
	overlaySeen   bool                // the overlay was read once
}

// value is a parsed value with its canonical text.
type value struct {
	text   string
	parsed any
}

// managedKey is a setting whose file is present in the overlay directory.
type managedKey struct {
	path    string
	good    *value   // last good value from the file; nil if it never had one
	refused *refusal // the content last read, when it was refused
}

// snapshot is the immutable set of values in force, swapped atomically.
type snapshot struct {
	values map[string]value
	source map[string]Source
}

// Option configures New.
type Option func(*options)

type options struct {
	registerer prometheus.Registerer
	logger     *slog.Logger
	observe    bool
}

// WithRegisterer registers the settings metrics (vigil_settings_overlay_rejected_total
// and vigil_settings_store_rejected_total) on r instead of
// prometheus.DefaultRegisterer. Several Settings may share one registerer.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) { o.registerer = r }
}

// WithLogger sets the logger that reports refused values; slog.Default otherwise.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// New loads every value from store and, unless overlayDir is "", from the managed
// overlay directory, then keeps them current by watching both until Close. A bad
// value in either is refused and reported (log and counter), never fatal. Close
// does not close the store: whoever opened it closes it.
func New(store Store, overlayDir string, opts ...Option) (*Settings, error) {
	o := options{registerer: prometheus.DefaultRegisterer, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	m, err := newMetrics(o.registerer)
	if err != nil {
		return nil, err
	}
	s := &Settings{
		store: store, log: o.logger, metrics: m,
		defaults: make(map[string]value), stored: make(map[string]value),
		storeProblem: make(map[string]*refusal), managed: make(map[string]*managedKey),
		unknownFiles: make(map[string]*refusal), unknownLogged: make(map[string]bool),
		subs: make(map[*subscriber]struct{}), watchedGen: make(map[string]uint64),
		problemsCh: make(chan struct{}),
	}
	for i := range definitions {
		d := &definitions[i]
		v, err := d.Parse(d.Default)
		if err != nil {
			return nil, fmt.Errorf("definition of %s: default: %w", d.Name, err)
		}
		s.defaults[d.Name] = value{text: d.Default, parsed: v}
	}
	s.rebuild()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if o.observe {
		s.observed = newQueue[observation](ctx.Done())
	}
	if err := s.start(ctx, overlayDir); err != nil {
		cancel()
		s.wg.Wait()
		return nil, err
	}
	if s.observed != nil {
		s.wg.Go(func() { s.recordObserved(ctx) })
	}
	return s, nil
}

// start reads the store and the overlay and follows both. The watch starts
// before the store is read, so no change falls between the two, and its events
// are taken only after what was read is applied: an event is never older than
// the read it follows, so the read can never overwrite a newer value.
func (s *Settings) start(ctx context.Context, overlayDir string) error {
	events, err := s.store.Watch(ctx)
	if err != nil {
		return fmt.Errorf("watch the settings store: %w", err)
	}
	all, err := s.store.List(ctx)
	if err != nil {
		return fmt.Errorf("read the settings store: %w", err)
	}
	for name, v := range all {
		s.applyWatched(StoreEvent{Name: name, Value: v})
	}
	s.wg.Go(func() {
		for ev := range events {
			s.applyWatched(ev)
			s.observeStore(ev.Name)
		}
	})
	if overlayDir != "" {
		ow, err := startOverlay(ctx, overlayDir, s.log, s.applyOverlay)
		if err != nil {
			return err
		}
		s.overlay = ow
	}
	return nil
}

// Close stops watching and ends every subscription. It does not close the store.
func (s *Settings) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	s.cancel()
	if s.overlay != nil {
		s.overlay.wait()
	}
	s.wg.Wait()
	for sub := range subs {
		sub.q.close()
	}
	return nil
}

// Subscribe returns a channel that receives a Change whenever the value in force
// of a setting, or its source, changes, whether through Set, another writer of the
// store or the overlay directory. Changes are never dropped and a slow reader
// never blocks anyone. cancel ends the subscription and closes the channel; so
// does Close.
func (s *Settings) Subscribe() (changes <-chan Change, cancel func()) {
	done := make(chan struct{})
	sub := &subscriber{q: newQueue[Change](done)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		close(done)
		return sub.q.out, func() {}
	}
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	return sub.q.out, func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.subs, sub)
			s.mu.Unlock()
			close(done)
		})
	}
}

type subscriber struct{ q *queue[Change] }

// Set validates value and writes it to the store, recorded in the history as
// made by ActorUnknown (SetAs says who). It refuses an unknown name
// (*UnknownSettingError), a bad value (*ValueError) and a managed setting
// (*ManagedError) without writing anything. The new value is in force when Set
// returns, unless another writer changed the setting meanwhile: then the value
// in force is the store's latest, never the older of the two.
func (s *Settings) Set(ctx context.Context, name, value string) error {
	return s.SetAs(ctx, name, value, Actor{Source: ActorUnknown})
}

// Reset removes the stored value of name, so its default is in force (unless the
// overlay manages it, in which case Reset is refused with a *ManagedError). It
// is recorded as made by ActorUnknown; ResetAs says who.
func (s *Settings) Reset(ctx context.Context, name string) error {
	return s.ResetAs(ctx, name, Actor{Source: ActorUnknown})
}

// watchedGeneration counts the store values of name taken in from the store
// (its first read and its watch). A writer reads it before writing.
func (s *Settings) watchedGeneration(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watchedGen[name]
}

// applyOwn puts this process's own write in force at once, without waiting for
// the watch to report it, unless the watch reported anything about the setting
// since gen was read: that may be a newer write of another process, which the
// own value must not overwrite. Skipping is always safe, because the watch
// reports the write too.
func (s *Settings) applyOwn(ev StoreEvent, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watchedGen[ev.Name] != gen {
		return
	}
	s.applyStoreLocked(ev)
}

// applyWatched takes a value read from the store (its first read or its watch)
// into the live view.
func (s *Settings) applyWatched(ev StoreEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchedGen[ev.Name]++
	s.applyStoreLocked(ev)
}

func (s *Settings) writable(name string) (*Definition, error) {
	d, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if mk, ok := s.managed[name]; ok {
		return nil, &ManagedError{Setting: name, Path: mk.path}
	}
	return d, nil
}

// List returns every setting, in display order.
func (s *Settings) List() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Entry, 0, len(definitions))
	for i := range definitions {
		out = append(out, s.entryLocked(&definitions[i]))
	}
	return out
}

// Get returns one setting, or an *UnknownSettingError.
func (s *Settings) Get(name string) (Entry, error) {
	d, err := Lookup(name)
	if err != nil {
		return Entry{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entryLocked(d), nil
}

func (s *Settings) entryLocked(d *Definition) Entry {
	snap := s.snap.Load()
	e := Entry{
		Name: d.Name, Value: snap.values[d.Name].text, Default: d.Default,
		Source: snap.source[d.Name], Definition: d,
	}
	if r := s.storeProblem[d.Name]; r != nil {
		e.Problem, e.Blocking = r.message, s.storeBlockingLocked(d.Name)
	}
	if mk, ok := s.managed[d.Name]; ok {
		e.ManagedPath = mk.path
		if mk.refused != nil {
			e.Problem, e.Blocking = mk.refused.message, mk.good == nil
		}
	}
	return e
}

// applyStoreLocked takes a store value into the live view.
func (s *Settings) applyStoreLocked(ev StoreEvent) {
	d, err := Lookup(ev.Name)
	if s.closed {
		return
	}
	if err != nil {
		if !s.unknownLogged[ev.Name] {
			s.unknownLogged[ev.Name] = true
			s.log.Warn("settings store holds an unknown setting; ignored", "error", err)
		}
		return
	}
	defer s.problemsMayHaveChangedLocked()
	if ev.Deleted {
		delete(s.stored, ev.Name)
		delete(s.storeProblem, ev.Name)
		s.publishLocked(ev.Name)
		return
	}
	parsed, err := d.Parse(ev.Value)
	if err != nil {
		if old := s.storeProblem[ev.Name]; old == nil || old.raw != ev.Value {
			s.storeProblem[ev.Name] = &refusal{raw: ev.Value, value: ev.Value, err: err,
				message: "settings store value refused: " + err.Error()}
			s.metrics.storeRejected.WithLabelValues(ev.Name).Inc()
			if good, ok := s.stored[ev.Name]; ok {
				s.log.Error("settings store value refused; the last good value stays in force",
					"setting", ev.Name, "in_force", good.text, "error", err)
			} else {
				s.log.Error("settings store value refused, and this process never saw a good one: "+
					"ActBlocked reports it until it is fixed or reset", "setting", ev.Name, "error", err)
			}
		}
		return
	}
	delete(s.storeProblem, ev.Name)
	s.stored[ev.Name] = value{text: Format(parsed), parsed: parsed}
	s.publishLocked(ev.Name)
}

// publishLocked recomputes the value in force of name and, if it or its source
// changed, swaps the snapshot and tells the subscribers.
func (s *Settings) publishLocked(name string) {
	v, src := s.effectiveLocked(name)
	old := s.snap.Load()
	if old.values[name].text == v.text && old.source[name] == src {
		return
	}
	s.rebuild()
	for sub := range s.subs {
		sub.q.push(Change{Name: name, Value: v.text, Source: src})
	}
}

func (s *Settings) effectiveLocked(name string) (value, Source) {
	if mk, ok := s.managed[name]; ok && mk.good != nil {
		return *mk.good, SourceManaged
	}
	return s.belowOverlayLocked(name)
}

// rebuild swaps in a fresh snapshot of every value in force. Called with mu held
// (or before s is shared).
func (s *Settings) rebuild() {
	next := &snapshot{values: make(map[string]value, len(definitions)), source: make(map[string]Source, len(definitions))}
	for name := range s.defaults {
		next.values[name], next.source[name] = s.effectiveLocked(name)
	}
	s.snap.Store(next)
}

// load returns the value in force of name as T; T is fixed by the definition's
// type, so the assertion cannot fail for a defined name.
func load[T any](s *Settings, name string) T {
	return s.snap.Load().values[name].parsed.(T)
}

// Values returns the canonical text of every value in force.
func (s *Settings) Values() map[string]string {
	snap := s.snap.Load()
	out := make(map[string]string, len(snap.values))
	for name, v := range snap.values {
		out[name] = v.text
	}
	return out
}
