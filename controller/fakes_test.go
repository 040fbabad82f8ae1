package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/fenceapi"
)

// fakeBackend is an in-memory fencing back end for the sync tests: grants per
// (node, volume handle) with epochs, FenceVolumes revoking the named live ones, a
// connectivity report the test sets, and an injectable error.
type fakeBackend struct {
	mu          sync.Mutex
	rows        map[string]map[string]fenceapi.Grant // node → handle → row
	epochs      map[string]uint64                    // handle → highest epoch
	report      fenceapi.Report
	failed      []fenceapi.FailedVolume
	placement   fenceapi.Placement
	err         error
	fenceCalls  int
	fenceAsked  [][]string // the handles of each FenceVolumes call, sorted
	grantsCalls int
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{rows: map[string]map[string]fenceapi.Grant{}, epochs: map[string]uint64{}}
}

func (f *fakeBackend) Driver() string { return vigil.DriverName }

// grant gives node a live grant on handle.
func (f *fakeBackend) grant(node, handle string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epochs[handle]++
	if f.rows[node] == nil {
		f.rows[node] = map[string]fenceapi.Grant{}
	}
	f.rows[node][handle] = fenceapi.Grant{Handle: handle, Epoch: f.epochs[handle], State: fenceapi.StateGranted}
}

func (f *fakeBackend) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeBackend) setReport(r fenceapi.Report) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.report = r
}

func (f *fakeBackend) FenceVolumes(_ context.Context, node string, handles []string) ([]fenceapi.Fenced, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fenceCalls++
	f.fenceAsked = append(f.fenceAsked, slices.Sorted(slices.Values(handles)))
	if f.err != nil {
		return nil, fmt.Errorf("%w: %v", fenceapi.ErrUnavailable, f.err)
	}
	var out []fenceapi.Fenced
	for h, g := range f.rows[node] {
		if !g.State.Live() || !slices.Contains(handles, h) {
			continue
		}
		f.epochs[h]++
		f.rows[node][h] = fenceapi.Grant{Handle: h, Epoch: f.epochs[h], State: fenceapi.StateFenced}
		out = append(out, fenceapi.Fenced{Handle: h, Epoch: f.epochs[h]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Handle < out[j].Handle })
	return out, nil
}

// fenceAll fences node on every volume where its grant is live, as a person
// fencing the whole node would.
func (f *fakeBackend) fenceAll(ctx context.Context, node string) ([]fenceapi.Fenced, error) {
	f.mu.Lock()
	var all []string
	for h := range f.rows[node] {
		all = append(all, h)
	}
	f.mu.Unlock()
	return f.FenceVolumes(ctx, node, all)
}

func (f *fakeBackend) Grants(_ context.Context, node string) ([]fenceapi.Grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grantsCalls++
	if f.err != nil {
		return nil, fmt.Errorf("%w: %v", fenceapi.ErrUnavailable, f.err)
	}
	var out []fenceapi.Grant
	for _, g := range f.rows[node] {
		out = append(out, g)
	}
	return out, nil
}

func (f *fakeBackend) setPlacement(p fenceapi.Placement) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.placement = p
}

func (f *fakeBackend) ServerPlacement(context.Context) (fenceapi.Placement, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return fenceapi.Placement{}, f.err
	}
	return f.placement, nil
}

func (f *fakeBackend) setFailed(fs ...fenceapi.FailedVolume) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = fs
}

func (f *fakeBackend) FailedVolumes(context.Context) ([]fenceapi.FailedVolume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, fmt.Errorf("%w: %v", fenceapi.ErrUnavailable, f.err)
	}
	return f.failed, nil
}

func (f *fakeBackend) Connectivity(context.Context) (fenceapi.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return fenceapi.Report{}, fmt.Errorf("%w: %v", fenceapi.ErrUnavailable, f.err)
	}
	return f.report, nil
}

// live reports whether node holds a live grant on handle.
func (f *fakeBackend) live(node, handle string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rows[node][handle].State.Live()
}

// heartbeatReport is a report in which each node last spoke silentFor ago.
func heartbeatReport(now time.Time, silentFor map[string]time.Duration) fenceapi.Report {
	r := fenceapi.Report{Now: now, Since: now.Add(-time.Hour)}
	for n, d := range silentFor {
		r.Nodes = append(r.Nodes, fenceapi.NodeConnectivity{Node: n, LastHeartbeat: now.Add(-d)})
	}
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Node < r.Nodes[j].Node })
	return r
}

var _ FenceBackend = (*fakeBackend)(nil)
