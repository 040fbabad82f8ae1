package datapath

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// leaves holds the graceful stops nodes announced with Leave, mirrored in the
// leaving bucket. mu guards m and is held only briefly (every heartbeat reads
// it); writeMu orders the changes, which commit to bbolt, so the map and the
// bucket change in the same order.
type leaves struct {
	mu      sync.RWMutex
	m       map[string]leaveRecord
	writeMu sync.Mutex
	// clearing holds the nodes whose announced stop is being cleared in the
	// control group (clearLeave with a Control), one clear at a time each.
	clearing sync.Map
}

func (l *leaves) get(node string) (leaveRecord, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	r, ok := l.m[node]
	return r, ok
}

// Leave records that node's agent is stopping on purpose (a rolling update) and
// will be silent for up to d: until then its silence is not a failure. d must
// be positive; more than MaxLeave is cut to MaxLeave. A later Leave replaces
// the earlier one. The node's next heartbeat clears it (one arriving within
// LeaveSettle of the announcement is taken as sent before it and does not).
// It is committed before Leave returns, so a restart of the server during the
// node's stop does not turn the stop into a failover. It returns when the
// announcement runs out, on the server's clock.
func (s *Store) Leave(node string, d time.Duration) (time.Time, error) {
	if err := validNode(node); err != nil {
		return time.Time{}, err
	}
	if d <= 0 {
		return time.Time{}, fmt.Errorf("%w: leave of node %s for %s: the duration must be positive (at most %s is kept)", ErrInvalidArgument, node, d, MaxLeave)
	}
	if err := s.checkOpen(); err != nil {
		return time.Time{}, err
	}
	if s.ctl != nil {
		ctx, cancel := s.ctlContext()
		defer cancel()
		until, err := s.ctl.Leave(ctx, node, d)
		if err == nil {
			s.log.Info("datapath: node announced a graceful stop", "node", node, "until", until)
		}
		return until, err
	}
	now := s.now().UTC()
	rec := leaveRecord{Until: now.Add(min(d, MaxLeave)), Announced: now}
	s.leaves.writeMu.Lock()
	defer s.leaves.writeMu.Unlock()
	err := s.commits.update(func(tx *bolt.Tx) error { return putJSON(tx.Bucket(bucketLeaving), node, rec) })
	if err != nil {
		return time.Time{}, fmt.Errorf("leave of node %s: %w", node, err)
	}
	s.leaves.mu.Lock()
	s.leaves.m[node] = rec
	s.leaves.mu.Unlock()
	s.log.Info("datapath: node announced a graceful stop", "node", node, "until", rec.Until)
	return rec.Until, nil
}

// clearLeave ends node's announced stop when it heartbeats at now, at least
// LeaveSettle after the announcement. A failure to commit the removal is
// logged and the announcement stays (it runs out by itself).
func (s *Store) clearLeave(node string, now time.Time) {
	if s.ctl != nil {
		s.clearLeaveInBackground(node, now)
		return
	}
	settled := func() bool {
		r, ok := s.leaves.get(node)
		return ok && !now.Before(r.Announced.Add(LeaveSettle))
	}
	if !settled() {
		return
	}
	s.leaves.writeMu.Lock()
	defer s.leaves.writeMu.Unlock()
	if !settled() { // replaced by a newer Leave meanwhile
		return
	}
	err := s.commits.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketLeaving).Delete([]byte(node)) })
	if err != nil {
		s.log.Warn("datapath: node heartbeats again but its announced stop could not be cleared; it runs out by itself", "node", node, "err", err)
		return
	}
	s.leaves.mu.Lock()
	delete(s.leaves.m, node)
	s.leaves.mu.Unlock()
	s.log.Info("datapath: node heartbeats again; its announced stop is over", "node", node)
}

// clearLeaveInBackground clears node's announced stop in the control group
// without holding the heartbeat that ends it: the clear is a Raft apply (a
// commit, an fsync), and a heartbeat must not wait on one
// (TestStoreControl_HeartbeatDoesNotWaitForTheClearOfItsLeave). Only a stop
// that is over is cleared, one clear at a time per node; a later heartbeat
// tries again if it failed.
func (s *Store) clearLeaveInBackground(node string, now time.Time) {
	if l, ok := s.ctlLeaves()[node]; !ok || now.Before(l.Announced.Add(LeaveSettle)) {
		return
	}
	if _, busy := s.leaves.clearing.LoadOrStore(node, struct{}{}); busy {
		return
	}
	go func() {
		defer s.leaves.clearing.Delete(node)
		s.ctlClearLeave(node, now)
	}()
}

// loadLeaves reads the announced stops at start, dropping those that ran out
// and any record that does not decode (a lost announcement can only cause a
// failover, never hide one).
func (s *Store) loadLeaves() error {
	now := s.now()
	s.leaves.m = map[string]leaveRecord{}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLeaving)
		var drop [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var r leaveRecord
			if err := json.Unmarshal(v, &r); err != nil {
				s.log.Warn("datapath: dropping an undecodable leave record", "node", string(k), "err", err)
				drop = append(drop, append([]byte(nil), k...))
				return nil
			}
			if !r.Until.After(now) {
				drop = append(drop, append([]byte(nil), k...))
				return nil
			}
			s.leaves.m[string(k)] = r
			return nil
		})
		for _, k := range drop {
			if err == nil {
				err = b.Delete(k)
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("datapath.db: leave records: %w", err)
	}
	return nil
}

func (s *Store) checkOpen() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	return nil
}

// Nodes reports every node the server knows: each that heartbeated or did I/O
// since the server started, holds a live grant (so a node that died before a
// restart of the server is still listed, silent since the start), or announced
// a stop no heartbeat has cleared. It reads in-memory state only.
func (s *Store) Nodes() (NodesReport, error) {
	if err := s.checkOpen(); err != nil {
		return NodesReport{}, err
	}
	r := NodesReport{Now: s.now().UTC(), Started: s.started}
	byNode := map[string]*NodeStatus{}
	get := func(node string) *NodeStatus {
		n := byNode[node]
		if n == nil {
			n = &NodeStatus{Node: node}
			byNode[node] = n
		}
		return n
	}
	eachStamp(&s.act.heartbeats, func(node string, t time.Time) { get(node).LastHeartbeat = t })
	eachStamp(&s.act.ioByNode, func(node string, t time.Time) { get(node).LastIO = t })
	for node, c := range s.index.liveNodes() {
		get(node).LiveGrants = c
	}
	if s.ctl != nil {
		for node, l := range s.ctlLeaves() {
			get(node).LeavingUntil = l.Until
		}
	} else {
		s.leaves.mu.RLock()
		for node, l := range s.leaves.m {
			get(node).LeavingUntil = l.Until
		}
		s.leaves.mu.RUnlock()
	}
	r.Nodes = make([]NodeStatus, 0, len(byNode))
	for _, n := range byNode {
		r.Nodes = append(r.Nodes, *n)
	}
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Node < r.Nodes[j].Node })
	return r, nil
}

// eachStamp calls fn for every node of an activity map.
func eachStamp(m *sync.Map, fn func(node string, t time.Time)) {
	m.Range(func(k, v any) bool {
		fn(k.(string), time.Unix(0, v.(*atomic.Int64).Load()).UTC())
		return true
	})
}
