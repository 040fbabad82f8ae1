package csi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// fakeVolumes is the in-memory test double of the datapath, following the
// documented semantics of datapath/client: create idempotent by name, delete of
// an unknown id succeeds, a live grant blocks deletion, grants are idempotent per
// node, fences bump the epoch and are remembered.
type fakeVolumes struct {
	mu       sync.Mutex
	next     int
	capacity int64
	vols     map[string]datapath.Volume
	atts     map[string]map[string]*datapath.Attachment // volume id -> node -> row
	epochs   map[string]uint64                          // volume id -> current epoch
	replicas map[string]int                             // volume id -> replica count
	servers  int                                        // how many servers Servers reports
	calls    []string                                   // every mutating call, in order
	failWith error                                      // returned by every call when set
}

func newFakeVolumes() *fakeVolumes {
	return &fakeVolumes{
		capacity: 1 << 40,
		vols:     map[string]datapath.Volume{},
		atts:     map[string]map[string]*datapath.Attachment{},
		epochs:   map[string]uint64{},
		replicas: map[string]int{},
		servers:  3,
	}
}

// checkID mirrors the datapath's id shape check: ids it never issued are
// InvalidArgument, not NotFound.
func checkID(id string) error {
	if !strings.HasPrefix(id, "vol-") {
		return fmt.Errorf("%w: volume id %q is not of the form vol-<hex>", datapath.ErrInvalidArgument, id)
	}
	return nil
}

func (f *fakeVolumes) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

// mutations returns the mutating calls made so far.
func (f *fakeVolumes) mutations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeVolumes) CreateVolume(ctx context.Context, name string, size int64, mode datapath.AccessMode) (datapath.Volume, error) {
	return f.CreateReplicated(ctx, name, size, mode, 1)
}

// CreateReplicated is the datapath's create as the CSI controller sees it:
// by name, a different size, mode or replica count is ErrAlreadyExists (the
// count's message names both, as the datapath's does).
func (f *fakeVolumes) CreateReplicated(_ context.Context, name string, size int64, mode datapath.AccessMode, r int) (datapath.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return datapath.Volume{}, f.failWith
	}
	if err := mode.Validate(); err != nil {
		return datapath.Volume{}, err
	}
	if name == "" || size <= 0 {
		return datapath.Volume{}, fmt.Errorf("%w: name %q size %d", datapath.ErrInvalidArgument, name, size)
	}
	for _, v := range f.vols {
		if v.Name != name {
			continue
		}
		if v.Size != size || v.Access != mode {
			return datapath.Volume{}, fmt.Errorf("%w: %s", datapath.ErrAlreadyExists, name)
		}
		if f.replicas[v.ID] != r {
			return datapath.Volume{}, fmt.Errorf("%w: volume %q is %s with %d replicas; asked for %d", datapath.ErrAlreadyExists, name, v.ID, f.replicas[v.ID], r)
		}
		return v, nil
	}
	if r < 1 || r > f.servers {
		return datapath.Volume{}, fmt.Errorf("%w: %d replicas asked, but the control group records %d servers", datapath.ErrInvalidArgument, r, f.servers)
	}
	if size > f.capacity {
		return datapath.Volume{}, fmt.Errorf("%w: %d > %d", datapath.ErrNoSpace, size, f.capacity)
	}
	f.next++
	v := datapath.Volume{ID: fmt.Sprintf("vol-%016x", f.next), Name: name, Size: size, Access: mode, Created: time.Now().UTC()}
	f.vols[v.ID] = v
	f.capacity -= size
	f.epochs[v.ID] = 0
	f.replicas[v.ID] = r
	f.record("create %s %d %s r=%d", name, size, mode, r)
	return v, nil
}

// AnyServers reports f.servers servers.
func (f *fakeVolumes) AnyServers(context.Context) (datapath.ServersReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return datapath.ServersReport{}, f.failWith
	}
	rep := datapath.ServersReport{Now: time.Now().UTC()}
	for i := range f.servers {
		rep.Servers = append(rep.Servers, datapath.ServerStatus{ID: fmt.Sprintf("s%d", i+1)})
	}
	return rep, nil
}

func (f *fakeVolumes) DeleteVolume(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return f.failWith
	}
	if err := checkID(id); err != nil {
		return err
	}
	v, ok := f.vols[id]
	if !ok {
		return nil
	}
	for _, a := range f.atts[id] {
		if a.Live() {
			return fmt.Errorf("%w: %s granted to %s", datapath.ErrInUse, id, a.Node)
		}
	}
	delete(f.vols, id)
	delete(f.atts, id)
	f.capacity += v.Size
	f.record("delete %s", id)
	return nil
}

func (f *fakeVolumes) GetVolume(_ context.Context, id string) (datapath.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return datapath.Volume{}, f.failWith
	}
	if err := checkID(id); err != nil {
		return datapath.Volume{}, err
	}
	v, ok := f.vols[id]
	if !ok {
		return datapath.Volume{}, fmt.Errorf("volume %s: %w", id, datapath.ErrNotFound)
	}
	return v, nil
}

func (f *fakeVolumes) ListVolumes(context.Context) ([]datapath.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return nil, f.failWith
	}
	out := make([]datapath.Volume, 0, len(f.vols))
	for _, v := range f.vols {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b datapath.Volume) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (f *fakeVolumes) Capacity(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return 0, f.failWith
	}
	return f.capacity, nil
}

func (f *fakeVolumes) GrantAs(_ context.Context, id, node string, use datapath.GrantUse) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return 0, f.failWith
	}
	if err := checkID(id); err != nil {
		return 0, err
	}
	v, ok := f.vols[id]
	if !ok {
		return 0, fmt.Errorf("volume %s: %w", id, datapath.ErrNotFound)
	}
	rows := f.atts[id]
	if rows == nil {
		rows = map[string]*datapath.Attachment{}
		f.atts[id] = rows
	}
	if a := rows[node]; a != nil && a.Live() && a.Use == use {
		return a.Epoch, nil
	}
	for _, a := range rows {
		if !a.Live() || a.Node == node {
			continue
		}
		fsWriters := use == datapath.UseFilesystemWriter && a.Use.Writes() || use.Writes() && a.Use == datapath.UseFilesystemWriter
		if v.Access == datapath.AccessRWO || fsWriters {
			return 0, fmt.Errorf("volume %s held by %s (%s): %w", id, a.Node, a.Use, datapath.ErrAttachedElsewhere)
		}
	}
	if a := rows[node]; a != nil && a.Live() { // a new use, recorded in place
		a.Use = use
		f.record("grant %s %s %s", id, node, use)
		return a.Epoch, nil
	}
	f.epochs[id]++
	rows[node] = &datapath.Attachment{VolumeID: id, Node: node, Epoch: f.epochs[id], State: datapath.StateGranted, Use: use}
	f.record("grant %s %s %s", id, node, use)
	return f.epochs[id], nil
}

func (f *fakeVolumes) Fence(_ context.Context, id, node string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return 0, f.failWith
	}
	if err := checkID(id); err != nil {
		return 0, err
	}
	if _, ok := f.vols[id]; !ok {
		return 0, fmt.Errorf("volume %s: %w", id, datapath.ErrNotFound)
	}
	if f.atts[id] == nil {
		f.atts[id] = map[string]*datapath.Attachment{}
	}
	f.epochs[id]++
	f.atts[id][node] = &datapath.Attachment{VolumeID: id, Node: node, Epoch: f.epochs[id], State: datapath.StateFenced}
	f.record("fence %s %s", id, node)
	return f.epochs[id], nil
}

func (f *fakeVolumes) Release(_ context.Context, id, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return f.failWith
	}
	if err := checkID(id); err != nil {
		return err
	}
	if _, ok := f.vols[id]; !ok {
		return fmt.Errorf("volume %s: %w", id, datapath.ErrNotFound)
	}
	if a := f.atts[id][node]; a != nil && a.Live() {
		a.State = datapath.StateReleased
	}
	f.record("release %s %s", id, node)
	return nil
}

func (f *fakeVolumes) Attachments(_ context.Context, id string) ([]datapath.Attachment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return nil, f.failWith
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	if _, ok := f.vols[id]; !ok {
		return nil, fmt.Errorf("volume %s: %w", id, datapath.ErrNotFound)
	}
	var out []datapath.Attachment
	for _, a := range f.atts[id] {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b datapath.Attachment) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// liveNodes lists the nodes with a live grant on id.
func (f *fakeVolumes) liveNodes(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n, a := range f.atts[id] {
		if a.Live() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
