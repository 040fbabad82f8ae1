package fenceapitest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/fenceapi"
)

// The FenceBackend methods of Fake, as Calls and FailWith name them.
const (
	MethodFenceNode    = "FenceNode"
	MethodFenceVolumes = "FenceVolumes"
	MethodGrants       = "Grants"
	MethodConnectivity = "Connectivity"
)

// FakeMaxLeave and FakeLeaveSettle mirror the datapath's limits on a graceful
// stop: a longer Leave is cut to FakeMaxLeave, and a heartbeat within
// FakeLeaveSettle of the Leave does not clear it.
const (
	FakeMaxLeave    = 2 * time.Minute
	FakeLeaveSettle = time.Second
)

// ErrFakeAttachedElsewhere is the fake's refusal to grant a volume another node
// holds live.
var ErrFakeAttachedElsewhere = errors.New("fenceapitest: volume attached to another node")

// Fake is an in-memory fencing back end with its own clock. It behaves like
// the datapath (it passes RunConformance), arranges its state through the
// Control methods, and helps tests of the code that calls a FenceBackend: it counts
// calls, returns injected errors, runs a hook before each call, and can be cut
// off (SetUnavailable). It is safe for concurrent use. The zero value is not
// usable; call NewFake.
type Fake struct {
	mu      sync.Mutex
	driver  string
	now     time.Time
	since   time.Time
	vols    map[string]*fakeVolume
	beats   map[string]time.Time
	leaving map[string]fakeLeave
	cut     bool
	fail    map[string]error
	calls   map[string]int
	hook    func(ctx context.Context, method, node string) error
}

type fakeVolume struct {
	epoch uint64
	rows  map[string]fenceapi.Grant
}

type fakeLeave struct{ until, announced time.Time }

// NewFake returns an empty fake whose clock reads start (and whose watch began
// then: Report.Since), fencing volumes of vigil.DriverName.
func NewFake(start time.Time) *Fake {
	return &Fake{driver: vigil.DriverName, now: start, since: start,
		vols: map[string]*fakeVolume{}, beats: map[string]time.Time{}, leaving: map[string]fakeLeave{},
		fail: map[string]error{}, calls: map[string]int{}}
}

// SetDriver changes the driver name Driver returns.
func (f *Fake) SetDriver(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.driver = name
}

// Now reads the fake's clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake's clock forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// SetUnavailable makes every FenceBackend call fail with fenceapi.ErrUnavailable
// (true) until called with false. Control methods keep working.
func (f *Fake) SetUnavailable(cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = cut
}

// FailWith makes every call of the FenceBackend method (MethodFenceNode, …) return
// err, changing nothing, until FailWith(method, nil).
func (f *Fake) FailWith(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.fail, method)
		return
	}
	f.fail[method] = err
}

// SetHook installs fn, called (without the fake's lock) at the start of every
// FenceBackend call after it is counted; a non-nil error is returned as the call's,
// with nothing changed. A hook may block to hold a call in flight. nil
// removes it.
func (f *Fake) SetHook(fn func(ctx context.Context, method, node string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = fn
}

// Calls returns how many times the FenceBackend method was called (failed calls
// included).
func (f *Fake) Calls(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// enter counts a call and decides whether it fails before touching state.
func (f *Fake) enter(ctx context.Context, method, node string) error {
	f.mu.Lock()
	f.calls[method]++
	hook, injected, cut := f.hook, f.fail[method], f.cut
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, method, node); err != nil {
			return err
		}
	}
	switch {
	case injected != nil:
		return injected
	case cut:
		return fmt.Errorf("%w: fake back end cut off (%s)", fenceapi.ErrUnavailable, method)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %s: %w", fenceapi.ErrUnavailable, method, ctx.Err())
	}
	return nil
}

// Driver returns the driver name (vigil.DriverName unless SetDriver).
func (f *Fake) Driver() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.driver
}

// FenceNode fences node on every volume where its grant is live, each with a
// new epoch, sorted by handle.
func (f *Fake) FenceNode(ctx context.Context, node string) ([]fenceapi.Fenced, error) {
	if err := f.enter(ctx, MethodFenceNode, node); err != nil {
		return nil, err
	}
	if err := validNode(node); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fenceapi.Fenced
	for _, h := range f.handlesLocked() {
		v := f.vols[h]
		if g, ok := v.rows[node]; ok && g.State.Live() {
			v.epoch++
			v.rows[node] = fenceapi.Grant{Handle: h, Epoch: v.epoch, State: fenceapi.StateFenced, Updated: f.now}
			out = append(out, fenceapi.Fenced{Handle: h, Epoch: v.epoch})
		}
	}
	return out, nil
}

// FenceVolumes fences node on each of handles where its grant is live, each
// with a new epoch, sorted by handle; other volumes and unknown handles are
// left alone.
func (f *Fake) FenceVolumes(ctx context.Context, node string, handles []string) ([]fenceapi.Fenced, error) {
	if err := f.enter(ctx, MethodFenceVolumes, node); err != nil {
		return nil, err
	}
	if err := validNode(node); err != nil {
		return nil, err
	}
	named := make(map[string]bool, len(handles))
	for _, h := range handles {
		named[h] = true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fenceapi.Fenced
	for _, h := range f.handlesLocked() {
		v := f.vols[h]
		if g, ok := v.rows[node]; ok && named[h] && g.State.Live() {
			v.epoch++
			v.rows[node] = fenceapi.Grant{Handle: h, Epoch: v.epoch, State: fenceapi.StateFenced, Updated: f.now}
			out = append(out, fenceapi.Fenced{Handle: h, Epoch: v.epoch})
		}
	}
	return out, nil
}

// Grants returns node's row on every volume that has one, sorted by handle.
func (f *Fake) Grants(ctx context.Context, node string) ([]fenceapi.Grant, error) {
	if err := f.enter(ctx, MethodGrants, node); err != nil {
		return nil, err
	}
	if err := validNode(node); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fenceapi.Grant
	for _, h := range f.handlesLocked() {
		if g, ok := f.vols[h].rows[node]; ok {
			out = append(out, g)
		}
	}
	return out, nil
}

// Connectivity lists every node that heartbeated, holds a live grant, or has
// an announced stop no heartbeat cleared, sorted by name.
func (f *Fake) Connectivity(ctx context.Context) (fenceapi.Report, error) {
	if err := f.enter(ctx, MethodConnectivity, ""); err != nil {
		return fenceapi.Report{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	byNode := map[string]*fenceapi.NodeConnectivity{}
	get := func(n string) *fenceapi.NodeConnectivity {
		if byNode[n] == nil {
			byNode[n] = &fenceapi.NodeConnectivity{Node: n}
		}
		return byNode[n]
	}
	for n, t := range f.beats {
		get(n).LastHeartbeat = t
	}
	for _, v := range f.vols {
		for n, g := range v.rows {
			if g.State.Live() {
				get(n)
			}
		}
	}
	for n, l := range f.leaving {
		get(n).LeavingUntil = l.until
	}
	r := fenceapi.Report{Now: f.now, Since: f.since}
	for _, n := range byNode {
		r.Nodes = append(r.Nodes, *n)
	}
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Node < r.Nodes[j].Node })
	return r, nil
}

func (f *Fake) handlesLocked() []string {
	hs := make([]string, 0, len(f.vols))
	for h := range f.vols {
		hs = append(hs, h)
	}
	sort.Strings(hs)
	return hs
}

// NewVolume adds a ReadWriteOnce volume whose handle is name.
func (f *Fake) NewVolume(_ context.Context, name string) (string, error) {
	if name == "" {
		return "", errors.New("fenceapitest: volume handle is empty")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.vols[name] != nil {
		return "", fmt.Errorf("fenceapitest: volume %s exists", name)
	}
	f.vols[name] = &fakeVolume{rows: map[string]fenceapi.Grant{}}
	return name, nil
}

// Grant gives node a grant on the volume, as the datapath does: the same
// epoch again to a node already live, a new one otherwise, and
// ErrFakeAttachedElsewhere while another node is live.
func (f *Fake) Grant(_ context.Context, handle, node string) (uint64, error) {
	if err := validNode(node); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.vols[handle]
	if v == nil {
		return 0, fmt.Errorf("fenceapitest: no volume %s", handle)
	}
	if g, ok := v.rows[node]; ok && g.State.Live() {
		return g.Epoch, nil
	}
	for other, g := range v.rows {
		if g.State.Live() {
			return 0, fmt.Errorf("%w: grant %s to %s: node %s holds it (epoch %d)", ErrFakeAttachedElsewhere, handle, node, other, g.Epoch)
		}
	}
	v.epoch++
	v.rows[node] = fenceapi.Grant{Handle: handle, Epoch: v.epoch, State: fenceapi.StateGranted, Updated: f.now}
	return v.epoch, nil
}

// Release ends node's live grant on the volume; anything else is left as it is.
func (f *Fake) Release(_ context.Context, handle, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.vols[handle]
	if v == nil {
		return fmt.Errorf("fenceapitest: no volume %s", handle)
	}
	if g, ok := v.rows[node]; ok && g.State.Live() {
		g.State, g.Updated = fenceapi.StateReleased, f.now
		v.rows[node] = g
	}
	return nil
}

// Heartbeat records node's heartbeat at the fake's clock, clearing an
// announced stop at least FakeLeaveSettle old.
func (f *Fake) Heartbeat(_ context.Context, node string) error {
	if err := validNode(node); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beats[node] = f.now
	if l, ok := f.leaving[node]; ok && !f.now.Before(l.announced.Add(FakeLeaveSettle)) {
		delete(f.leaving, node)
	}
	return nil
}

// Leave announces node's graceful stop for d (cut to FakeMaxLeave); d must be
// positive.
func (f *Fake) Leave(_ context.Context, node string, d time.Duration) error {
	if err := validNode(node); err != nil {
		return err
	}
	if d <= 0 {
		return fmt.Errorf("fenceapitest: leave of node %s for %s: the duration must be positive", node, d)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaving[node] = fakeLeave{until: f.now.Add(min(d, FakeMaxLeave)), announced: f.now}
	return nil
}

// validNode refuses what the datapath refuses: empty, longer than 253 bytes,
// white space or control characters.
func validNode(node string) error {
	switch {
	case node == "" || len(node) > 253:
		return fmt.Errorf("fenceapitest: node %.40q: want 1 to 253 bytes", node)
	case strings.ContainsFunc(node, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return fmt.Errorf("fenceapitest: node %q contains white space or a control character", node)
	}
	return nil
}
