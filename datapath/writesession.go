package datapath

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Write sessions order every write the server accepts, on the bulk channel
// (package wire, bulk.go) and over gRPC (service.go) alike. A
// client that gave up on a write (no answer within its timeout, a connection
// lost) cannot know whether the write is still on its way: delayed in TCP on
// a black-holed path, it may arrive after the client has sent the write again
// on another connection, after the retry succeeded and after a newer write to
// the same block. The epoch does not help: no fence happened. So the client
// opens a new generation of its write session for (volume, node, epoch)
// before it sends anything else, and the server applies a write only under the
// generation opened last: the late write is refused with ErrStaleSession.
//
// Opening a generation waits for the writes in progress under the older one
// (a write holds its session's read lock from the generation check to the
// end of its pwrite), so when the client has the new generation, no write of
// an older one is in progress or can start.
//
// Sessions are soft state, one per (volume, node) that wrote since the
// server started (a new epoch replaces the old one's): a server restart
// forgets them, and since it also drops every connection, no write of a lost
// generation can arrive afterwards. Generations come from one counter for the
// whole server that starts at the clock's nanoseconds, so a generation issued
// before a restart is not issued again after it. A session idle for two
// sweeps (sessionSweepEvery) is forgotten; its next write is refused as stale
// and its client opens a new generation. The zero value is ready for use.
type writeSessions struct {
	mu        sync.Mutex
	m         map[sessionKey]*writeSession
	lastSweep time.Time
	next      atomic.Uint64 // the last generation issued
}

type sessionKey struct{ volumeID, node string }

type writeSession struct {
	mu    sync.RWMutex // writes hold RLock across check and write; open holds Lock
	epoch uint64
	gen   uint64      // 0: forgotten (every write is refused)
	dead  bool        // forgotten by a sweep: open looks it up again
	used  atomic.Bool // a write or an open since the last sweep
}

// sessionSweepEvery is how often opening a session also forgets idle ones.
const sessionSweepEvery = 10 * time.Minute

// open starts a new generation of (volumeID, node)'s session under epoch,
// once every write in progress under the previous one has ended, and returns
// it.
func (s *writeSessions) open(volumeID, node string, epoch uint64, now time.Time) uint64 {
	k := sessionKey{volumeID, node}
	for {
		s.mu.Lock()
		if s.m == nil {
			s.m, s.lastSweep = map[sessionKey]*writeSession{}, now
			s.next.Store(uint64(now.UnixNano()))
		}
		if now.Sub(s.lastSweep) >= sessionSweepEvery {
			s.sweepLocked()
			s.lastSweep = now
		}
		ws := s.m[k]
		if ws == nil {
			ws = &writeSession{}
			s.m[k] = ws
		}
		ws.used.Store(true)
		s.mu.Unlock()
		ws.mu.Lock()
		if !ws.dead {
			ws.epoch, ws.gen = epoch, s.next.Add(1)
			gen := ws.gen
			ws.mu.Unlock()
			return gen
		}
		ws.mu.Unlock()
	}
}

// OpenWriteSession starts a new generation of the write session of
// (volumeID, node) under epoch and returns it: from then on the server
// applies that node's writes to the volume only under this generation (see
// writeSessions). It waits for the writes in progress under the previous one.
// ErrInvalidArgument for a malformed node name. It checks neither the volume
// nor the epoch and records no activity: a write to an unknown volume or
// under a stale epoch is refused by the write itself.
func (s *Store) OpenWriteSession(volumeID, node string, epoch uint64) (uint64, error) {
	if err := validNode(node); err != nil {
		return 0, err
	}
	if err := s.heldElsewhere(volumeID); err != nil {
		return 0, err // its writes go to its holder, which keeps its sessions
	}
	return s.sessions.open(volumeID, node, epoch, s.now()), nil
}

// writeInSession is WriteAt under generation gen of (volumeID, node)'s write
// session: ErrStaleSession, nothing written, unless gen is the generation
// opened last under epoch.
func (s *Store) writeInSession(volumeID, node string, epoch, gen, member uint64, off int64, p []byte) error {
	return s.sessions.write(volumeID, node, epoch, gen, func() error { return s.WriteAtMember(volumeID, node, epoch, member, off, p) })
}

// write runs apply if gen is the current generation of (volumeID, node)'s
// session under epoch, holding the session's read lock until apply returns;
// else it returns ErrStaleSession and apply does not run.
func (s *writeSessions) write(volumeID, node string, epoch, gen uint64, apply func() error) error {
	s.mu.Lock()
	ws := s.m[sessionKey{volumeID, node}]
	s.mu.Unlock()
	if ws == nil {
		return fmt.Errorf("%w: volume %s, node %s, epoch %d: generation %d, but no write session is open (the server restarted, or the session was idle); open one and send the write again",
			ErrStaleSession, volumeID, node, epoch, gen)
	}
	ws.mu.RLock()
	defer ws.mu.RUnlock()
	if gen == 0 || ws.gen != gen || ws.epoch != epoch {
		return fmt.Errorf("%w: volume %s, node %s: write under epoch %d generation %d, but the session's current one is epoch %d generation %d; nothing written",
			ErrStaleSession, volumeID, node, epoch, gen, ws.epoch, ws.gen)
	}
	if !ws.used.Load() {
		ws.used.Store(true)
	}
	return apply()
}

// sweepLocked forgets the sessions without a write since the last sweep and
// without one in progress (s.mu is held). A write that found such a session
// before it was forgotten sees generation 0 and is refused.
func (s *writeSessions) sweepLocked() {
	for k, ws := range s.m {
		if ws.used.Swap(false) || !ws.mu.TryLock() {
			continue
		}
		ws.gen, ws.dead = 0, true
		delete(s.m, k)
		ws.mu.Unlock()
	}
}

// len is how many sessions the server keeps (for tests).
func (s *writeSessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
