package client

import (
	"context"
	"sync"
)

// writeSessions is the client's side of the write sessions (see the datapath
// package doc, Bulk channel): per (volume, node) the epoch and generation its
// writes carry, over the bulk channel and gRPC alike (the server keeps one
// session per (volume, node) for both). A write whose outcome is unknown (no
// answer within its timeout, its connection lost) abandons the generation:
// the next write of that (volume, node) opens a new one first, and the server
// then refuses the unanswered write, however late it arrives, instead of
// letting it land after the writes that follow.
type writeSessions struct {
	mu sync.Mutex
	m  map[sessionKey]*writeSession
}

// sessionKey names a session: a (volume, node) at one server, server ""
// being the volume's holder as the client knows it (which forget moves).
type sessionKey struct{ volumeID, node, server string }

// key is the session w is written under.
func (w ioWrite) key() sessionKey { return sessionKey{w.vol, w.node, w.at} }

type writeSession struct {
	epoch   uint64
	gen     uint64        // 0: none open under epoch (open one before writing)
	opening chan struct{} // non-nil while an open is under way; closed at its end
}

// opener opens a new generation of (volumeID, node)'s session under epoch on
// the server.
type opener func(ctx context.Context, volumeID, node string, epoch uint64) (uint64, error)

// gen returns the generation to write (volumeID, node) under epoch, opening
// one first (once for every caller waiting) when none is open.
func (s *writeSessions) gen(ctx context.Context, k sessionKey, epoch uint64, open opener) (uint64, error) {
	for {
		s.mu.Lock()
		if s.m == nil {
			s.m = map[sessionKey]*writeSession{}
		}
		ws := s.m[k]
		if ws == nil {
			ws = &writeSession{epoch: epoch}
			s.m[k] = ws
		}
		if ws.epoch == epoch && ws.gen != 0 {
			gen := ws.gen
			s.mu.Unlock()
			return gen, nil
		}
		if wait := ws.opening; wait != nil {
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		done := make(chan struct{})
		ws.opening = done
		s.mu.Unlock()
		gen, err := open(ctx, k.volumeID, k.node, epoch)
		s.mu.Lock()
		ws.opening = nil
		if err == nil {
			// A write of another epoch may have run meanwhile; the server
			// keeps the session opened last, which is this one.
			ws.epoch, ws.gen = epoch, gen
		}
		s.mu.Unlock()
		close(done)
		if err != nil {
			return 0, err
		}
		return gen, nil
	}
}

// end records that a write under (epoch, gen) went unanswered or was refused
// as stale: unless a newer generation was opened meanwhile, the next write
// opens one.
func (s *writeSessions) end(k sessionKey, epoch, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ws := s.m[k]; ws != nil && ws.epoch == epoch && ws.gen == gen {
		ws.gen = 0
	}
}

// forget drops every session of volumeID (its calls move to another
// server, where none of its generations is open): the next write of each
// (volume, node) opens a new generation there. An open under way finishes
// and records its generation; the write that asked for it goes to the
// server it opened it at.
func (s *writeSessions) forget(volumeID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ws := range s.m {
		if k.volumeID == volumeID {
			ws.gen = 0
		}
	}
}
