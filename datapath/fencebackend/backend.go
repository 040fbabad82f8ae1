package fencebackend

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/fenceapi"
)

// Datapath is what Backend calls on the datapath; *datapath/client.Client
// satisfies it.
type Datapath interface {
	FenceNode(ctx context.Context, node string) ([]datapath.FencedVolume, error)
	Fence(ctx context.Context, volumeID, node string) (epoch uint64, err error)
	NodeGrants(ctx context.Context, node string) ([]datapath.Attachment, error)
	Nodes(ctx context.Context) (datapath.NodesReport, error)
	FailedVolumes(ctx context.Context) ([]datapath.FailedVolume, error)
}

// Backend fences nodes on the datapath. It is safe for concurrent use (as
// safe as its Datapath; the client is).
type Backend struct {
	dp Datapath
}

// New returns a Backend over dp.
func New(dp Datapath) *Backend { return &Backend{dp: dp} }

// Driver is the CSI driver whose volumes the datapath serves.
func (b *Backend) Driver() string { return vigil.DriverName }

// FenceNode fences node on every volume where it holds a live grant and
// returns those volumes with their new epochs; every fence is durable when it
// returns. A node without a live grant gets an empty list; calling it again is
// safe. On an error some volumes may be fenced already: Grants tells which.
func (b *Backend) FenceNode(ctx context.Context, node string) ([]fenceapi.Fenced, error) {
	fs, err := b.dp.FenceNode(ctx, node)
	if err != nil {
		return nil, wrap("fence node "+node, err)
	}
	out := make([]fenceapi.Fenced, len(fs))
	for i, v := range fs {
		out[i] = fenceapi.Fenced{Handle: v.VolumeID, Epoch: v.Epoch}
	}
	return out, nil
}

// fenceVolumesParallel bounds the Fence calls FenceVolumes has in flight: a
// node's volumes are fenced together, but a rack of nodes does not open
// thousands of calls at once.
const fenceVolumesParallel = 16

// FenceVolumes fences node on each of handles where it holds a live grant and
// returns those volumes with their new epochs, sorted by handle; every fence is
// durable when it returns. Volumes not named keep their grant, whatever their
// state; a named volume where node holds no live grant, or that the datapath
// does not have, is left alone, so calling it again is safe. On an error some
// volumes may be fenced already: Grants tells which.
func (b *Backend) FenceVolumes(ctx context.Context, node string, handles []string) ([]fenceapi.Fenced, error) {
	rows, unknown, err := b.nodeGrants(ctx, node)
	if err != nil {
		return nil, wrap("grants of node "+node, err)
	}
	named := make(map[string]bool, len(handles))
	for _, h := range handles {
		named[h] = true
	}
	var (
		mu   sync.Mutex
		out  []fenceapi.Fenced
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, fenceVolumesParallel)
	)
	for _, id := range unknown {
		if named[id] {
			errs = append(errs, fmt.Errorf("%w: datapath: fence node %s on volume %s: the server holding it does not answer; not fenced", fenceapi.ErrUnavailable, node, id))
		}
	}
	for _, a := range rows {
		if !named[a.VolumeID] || !a.Live() {
			continue
		}
		named[a.VolumeID] = false // once, even if the datapath listed it twice
		sem <- struct{}{}
		wg.Add(1)
		go func(id string) {
			defer func() { <-sem; wg.Done() }()
			epoch, err := b.dp.Fence(ctx, id, node)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, datapath.ErrNotFound):
				// Deleted meanwhile: no node can write it any more.
			case err != nil:
				errs = append(errs, wrap(fmt.Sprintf("fence node %s on volume %s", node, id), err))
			default:
				out = append(out, fenceapi.Fenced{Handle: id, Epoch: epoch})
			}
		}(a.VolumeID)
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Handle < out[j].Handle })
	return out, errors.Join(errs...)
}

// Grants lists node's row on every volume that has one. A volume whose
// datapath server does not answer is listed in state unknown, which counts
// as live: nothing proves the node cannot write it.
func (b *Backend) Grants(ctx context.Context, node string) ([]fenceapi.Grant, error) {
	as, unknown, err := b.nodeGrants(ctx, node)
	if err != nil {
		return nil, wrap("grants of node "+node, err)
	}
	out := make([]fenceapi.Grant, len(as), len(as)+len(unknown))
	for i, a := range as {
		st, err := state(a)
		if err != nil {
			return nil, err
		}
		out[i] = fenceapi.Grant{Handle: a.VolumeID, Epoch: a.Epoch, State: st, Updated: a.Updated}
	}
	for _, id := range unknown {
		out = append(out, fenceapi.Grant{Handle: id, State: fenceapi.StateUnknown})
	}
	return out, nil
}

// GroupGranter is implemented by a Datapath of several servers
// (datapath/client.Client given the group's servers): a node's rows from
// the servers that answer, and the volumes of those that do not.
type GroupGranter interface {
	GroupNodeGrants(ctx context.Context, node string) (datapath.GroupGrants, error)
}

// nodeGrants is the node's rows, and the volumes on which nothing is known
// (their server did not answer; GroupGranter).
func (b *Backend) nodeGrants(ctx context.Context, node string) ([]datapath.Attachment, []string, error) {
	if g, ok := b.dp.(GroupGranter); ok {
		gg, err := g.GroupNodeGrants(ctx, node)
		return gg.Rows, gg.Unknown, err
	}
	rows, err := b.dp.NodeGrants(ctx, node)
	return rows, nil, err
}

// Connectivity reports, on the datapath's clock, when each node last
// heartbeated or did I/O since the datapath started, and which nodes announced
// a graceful stop. A node with a live grant is listed even if it has been
// silent since the start. With several servers (ServerNodes) it merges the
// reports of those that answer (mergeReports): a node heard by any server
// recently is not silent.
func (b *Backend) Connectivity(ctx context.Context) (fenceapi.Report, error) {
	if sn, ok := b.dp.(ServerNodes); ok {
		rs, err := sn.ServerNodes(ctx)
		if err == nil && len(rs) == 0 {
			err = errors.New("no datapath server answered")
		}
		if err != nil {
			return fenceapi.Report{}, wrap("nodes", err)
		}
		reps := make([]fenceapi.Report, len(rs))
		for i, r := range rs {
			reps[i] = report(r)
		}
		return mergeReports(reps), nil
	}
	r, err := b.dp.Nodes(ctx)
	if err != nil {
		return fenceapi.Report{}, wrap("nodes", err)
	}
	return report(r), nil
}

// FailedVolumes lists the volumes whose data failed to flush to disk: the
// datapath refuses their I/O until an operator clears them.
func (b *Backend) FailedVolumes(ctx context.Context) ([]fenceapi.FailedVolume, error) {
	fs, err := b.dp.FailedVolumes(ctx)
	if err != nil {
		return nil, wrap("failed volumes", err)
	}
	out := make([]fenceapi.FailedVolume, len(fs))
	for i, v := range fs {
		out[i] = fenceapi.FailedVolume{Handle: v.VolumeID, Since: v.Since,
			Reason: fmt.Sprintf("flushing its data to disk failed (%s: %s)", v.Op, v.Error),
			Clear:  datapath.ClearFailureCommand + " " + v.VolumeID}
	}
	return out, nil
}

// state maps a datapath attachment state; an unknown one is an error, so a
// newer server's state is never read as proof that a node cannot write.
func state(a datapath.Attachment) (fenceapi.State, error) {
	switch a.State {
	case datapath.StateGranted:
		return fenceapi.StateGranted, nil
	case datapath.StateFenced:
		return fenceapi.StateFenced, nil
	case datapath.StateReleased:
		return fenceapi.StateReleased, nil
	}
	return "", fmt.Errorf("%w: datapath reports node %s on volume %s in state %q, which this manager does not know (known: %s, %s, %s)",
		fenceapi.ErrUnavailable, a.Node, a.VolumeID, a.State, datapath.StateGranted, datapath.StateFenced, datapath.StateReleased)
}

// wrap marks every failure but a refusal of the caller's input as the back
// end being unavailable: nothing is proven.
func wrap(op string, err error) error {
	if errors.Is(err, datapath.ErrInvalidArgument) {
		return fmt.Errorf("datapath: %s: %w", op, err)
	}
	return fmt.Errorf("%w: datapath: %s: %w", fenceapi.ErrUnavailable, op, err)
}
