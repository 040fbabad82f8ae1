package datapath

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// nodeIndex maps each node to the volumes on which it has a row in the
// attachment table, and counts its live grants, so that NodeGrants and
// FenceNode touch only the node's own volumes and Nodes does not walk every
// table. It is changed together with a volume's table, under that volume's
// write lock (Store.record, DeleteVolume) or at load; its own lock is a
// leaf: nothing else is locked while it is held.
type nodeIndex struct {
	mu   sync.RWMutex
	vols map[string]map[string]struct{} // node -> ids of volumes with a row for it
	live map[string]int                 // node -> live grants (absent when 0)
}

func newNodeIndex() nodeIndex {
	return nodeIndex{vols: map[string]map[string]struct{}{}, live: map[string]int{}}
}

// set records that node has a row on volumeID that went from live (wasLive)
// to live or not (isLive).
func (x *nodeIndex) set(node, volumeID string, wasLive, isLive bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	vs := x.vols[node]
	if vs == nil {
		vs = map[string]struct{}{}
		x.vols[node] = vs
	}
	vs[volumeID] = struct{}{}
	switch {
	case isLive && !wasLive:
		x.live[node]++
	case wasLive && !isLive:
		if x.live[node]--; x.live[node] <= 0 {
			delete(x.live, node)
		}
	}
}

// drop forgets a deleted volume's rows (none of them live: DeleteVolume
// refuses a volume with a live grant).
func (x *nodeIndex) drop(volumeID string, nodes map[string]attachmentRecord) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for node := range nodes {
		vs := x.vols[node]
		delete(vs, volumeID)
		if len(vs) == 0 {
			delete(x.vols, node)
		}
	}
}

// volumesOf returns the ids of the volumes with a row for node, sorted.
func (x *nodeIndex) volumesOf(node string) []string {
	x.mu.RLock()
	out := make([]string, 0, len(x.vols[node]))
	for id := range x.vols[node] {
		out = append(out, id)
	}
	x.mu.RUnlock()
	sort.Strings(out)
	return out
}

func (x *nodeIndex) liveGrants(node string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.live[node]
}

// liveNodes returns every node with at least one live grant and its count.
func (x *nodeIndex) liveNodes() map[string]int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make(map[string]int, len(x.live))
	for n, c := range x.live {
		out[n] = c
	}
	return out
}

// volumes returns the open volumes among ids (deleted ones are left out).
func (s *Store) volumes(ids []string) ([]*volume, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	out := make([]*volume, 0, len(ids))
	for _, id := range ids {
		if v := s.vols[id]; v != nil {
			out = append(out, v)
		}
	}
	return out, nil
}

// NodeGrants returns node's row on every volume that has one (live, fenced or
// released), sorted by volume id; none is not an error. It reads only the
// node's own volumes (an index kept with the attachment tables), so it costs
// the same with ten volumes on the server as with ten thousand.
func (s *Store) NodeGrants(node string) ([]Attachment, error) {
	if err := validNode(node); err != nil {
		return nil, err
	}
	if err := s.errNotCaughtUp(); err != nil {
		return nil, err
	}
	vols, err := s.volumes(s.index.volumesOf(node))
	if err != nil {
		return nil, err
	}
	out := make([]Attachment, 0, len(vols))
	for _, v := range vols {
		v.mu.RLock()
		a, ok := v.attach[node]
		if ok && !v.deleted {
			out = append(out, Attachment{VolumeID: v.rec.ID, Node: node, Epoch: a.Epoch, State: a.State, Use: a.use(), Updated: a.Updated})
		}
		v.mu.RUnlock()
	}
	return out, nil
}

// fenceNodeParallel bounds the volumes FenceNode fences at once. Their commits
// share transactions (group commit), so a wide fan-out turns thousands of
// fences into a handful of fsyncs.
const fenceNodeParallel = 256

// fenceNodePasses bounds how often FenceNode looks again for live grants that
// appeared while it ran (a grant racing the fence).
const fenceNodePasses = 4

// FenceNode fences node on every volume where it holds a live grant: each such
// volume moves to a new epoch with the node recorded as fenced, exactly as
// Fence does it (under the volume's write lock, so no write from the node is
// in flight or lands later), and every fence is committed before FenceNode
// returns. Volumes where the node is already fenced or released, or never had
// a grant, are left alone, so calling it again fences nothing new and returns
// an empty list. The volumes are fenced in parallel, so their commits share
// transactions. A grant given to the node while FenceNode runs is fenced too;
// one given after it returns is a new grant.
//
// It returns the volumes it fenced, sorted by id. If some fence fails (the
// disk), the error names each volume; the others are fenced and durable, and
// the list still names them. Calling FenceNode again fences what is left.
func (s *Store) FenceNode(node string) ([]FencedVolume, error) { return s.fenceNode(node, nil) }

// fenceNode is FenceNode; pend, when set, takes the servers that must apply
// the fence of the volumes other servers hold (holders.go), which are then
// fenced too.
func (s *Store) fenceNode(node string, pend *pendingApply) ([]FencedVolume, error) {
	if err := validNode(node); err != nil {
		return nil, err
	}
	if s.ctl != nil {
		return s.ctlFenceNode(node, pend)
	}
	var (
		out  []FencedVolume
		errs []error
	)
	for pass := 0; pass < fenceNodePasses; pass++ {
		vols, err := s.volumes(s.index.volumesOf(node))
		if err != nil {
			return nil, err
		}
		done, err := s.fenceEach(node, vols)
		out = append(out, done...)
		if err != nil {
			errs = append(errs, err)
			break
		}
		if s.index.liveGrants(node) == 0 {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolumeID < out[j].VolumeID })
	return out, errors.Join(errs...)
}

// fenceEach fences node on each of vols where its grant is live, at most
// fenceNodeParallel at a time.
func (s *Store) fenceEach(node string, vols []*volume) ([]FencedVolume, error) {
	var (
		mu   sync.Mutex
		out  []FencedVolume
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, fenceNodeParallel)
	)
	for _, v := range vols {
		sem <- struct{}{}
		wg.Add(1)
		go func(v *volume) {
			defer func() { <-sem; wg.Done() }()
			f, fenced, err := s.fenceIfLive(v, node)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case fenced:
				out = append(out, f)
			}
		}(v)
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// fenceIfLive fences node on v if it holds a live grant there.
func (s *Store) fenceIfLive(v *volume, node string) (FencedVolume, bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.deleted {
		return FencedVolume{}, false, nil
	}
	step, err := v.table().FenceIfLive(node)
	if err != nil || !step.Changed {
		return FencedVolume{}, false, err
	}
	if err := s.record(v, step); err != nil {
		return FencedVolume{}, false, fmt.Errorf("fence node %s on volume %s: %w", node, v.rec.ID, err)
	}
	return FencedVolume{VolumeID: v.rec.ID, Epoch: step.Epoch}, true, nil
}
