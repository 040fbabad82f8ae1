package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/fencing"
)

// fakeFencer is an in-memory fencing back end for the sync tests: grants per
// (node, volume handle) with epochs, FenceVolumes revoking the named live ones, a
// connectivity report the test sets, and an injectable error.
type fakeFencer struct {
	mu          sync.Mutex
	rows        map[string]map[string]fencing.Grant // node → handle → row
	epochs      map[string]uint64                   // handle → highest epoch
	report      fencing.Report
	failed      []fencing.FailedVolume
	err         error
	fenceCalls  int
	fenceAsked  [][]string // the handles of each FenceVolumes call, sorted
	grantsCalls int
}

func newFakeFencer() *fakeFencer {
	return &fakeFencer{rows: map[string]map[string]fencing.Grant{}, epochs: map[string]uint64{}}
}

func (f *fakeFencer) Driver() string { return vigil.DriverName }

// grant gives node a live grant on handle.
func (f *fakeFencer) grant(node, handle string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epochs[handle]++
	if f.rows[node] == nil {
		f.rows[node] = map[string]fencing.Grant{}
	}
	f.rows[node][handle] = fencing.Grant{Handle: handle, Epoch: f.epochs[handle], State: fencing.StateGranted}
}

func (f *fakeFencer) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeFencer) setReport(r fencing.Report) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.report = r
}

func (f *fakeFencer) FenceVolumes(_ context.Context, node string, handles []string) ([]fencing.Fenced, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fenceCalls++
	f.fenceAsked = append(f.fenceAsked, slices.Sorted(slices.Values(handles)))
	if f.err != nil {
		return nil, fmt.Errorf("%w: %v", fencing.ErrUnavailable, f.err)
	}
	var out []fencing.Fenced
	for h, g := range f.rows[node] {
		if !g.State.Live() || !slices.Contains(handles, h) {
			continue
		}
		f.epochs[h]++
		f.rows[node][h] = fencing.Grant{Handle: h, Epoch: f.epochs[h], State: fencing.StateFenced}
		out = append(out, fencing.Fenced{Handle: h, Epoch: f.epochs[h]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Handle < out[j].Handle })
	return out, nil
}

// fenceAll fences node on every volume where its grant is live, as a person
// fencing the whole node would.
func (f *fakeFencer) fenceAll(ctx context.Context, node string) ([]fencing.Fenced, error) {
	f.mu.Lock()
	var all []string
	for h := range f.rows[node] {
		all = append(all, h)
	}
	f.mu.Unlock()
	return f.FenceVolumes(ctx, node, all)
}

func (f *fakeFencer) Grants(_ context.Context, node string) ([]fencing.Grant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grantsCalls++
	if f.err != nil {
		return nil, fmt.Errorf("%w: %v", fencing.ErrUnavailable, f.err)
	}
	var out []fencing.Grant
	for _, g := range f.rows[node] {
		out = append(out, g)
	}
	return out, nil
}

func (f *fakeFencer) setFailed(fs ...fencing.FailedVolume) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = fs
}

func (f *fakeFencer) FailedVolumes(context.Context) ([]fencing.FailedVolume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, fmt.Errorf("%w: %v", fencing.ErrUnavailable, f.err)
	}
	return f.failed, nil
}

func (f *fakeFencer) Connectivity(context.Context) (fencing.Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return fencing.Report{}, fmt.Errorf("%w: %v", fencing.ErrUnavailable, f.err)
	}
	return f.report, nil
}

// live reports whether node holds a live grant on handle.
func (f *fakeFencer) live(node, handle string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rows[node][handle].State.Live()
}

// heartbeatReport is a report in which each node last spoke silentFor ago.
func heartbeatReport(now time.Time, silentFor map[string]time.Duration) fencing.Report {
	r := fencing.Report{Now: now, Since: now.Add(-time.Hour)}
	for n, d := range silentFor {
		r.Nodes = append(r.Nodes, fencing.NodeConnectivity{Node: n, LastHeartbeat: now.Add(-d)})
	}
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Node < r.Nodes[j].Node })
	return r
}

var _ Fencer = (*fakeFencer)(nil)
