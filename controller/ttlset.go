package controller

import (
	"sync"
	"time"
)

// ttlSet remembers keys for ttl after they were added. Expired keys are
// swept on an add, at most once a ttl, so the set holds at most what was added
// in the last two ttls.
type ttlSet[K comparable] struct {
	ttl       time.Duration
	mu        sync.Mutex
	at        map[K]time.Time
	nextSweep time.Time
}

func newTTLSet[K comparable](ttl time.Duration) *ttlSet[K] {
	return &ttlSet[K]{ttl: ttl, at: map[K]time.Time{}}
}

// add records k at now, replacing an earlier time.
func (s *ttlSet[K]) add(k K, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(k, now)
}

// addIfAbsent records k at now unless it was added less than ttl before now;
// it reports whether it added.
func (s *ttlSet[K]) addIfAbsent(k K, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at, ok := s.at[k]; ok && now.Sub(at) < s.ttl {
		return false
	}
	s.put(k, now)
	return true
}

func (s *ttlSet[K]) put(k K, now time.Time) {
	s.at[k] = now
	if now.After(s.nextSweep) {
		for key, at := range s.at {
			if now.Sub(at) >= s.ttl {
				delete(s.at, key)
			}
		}
		s.nextSweep = now.Add(s.ttl)
	}
}

// has reports whether k was added less than ttl before now.
func (s *ttlSet[K]) has(k K, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[k]
	return ok && now.Sub(at) < s.ttl
}

// forget drops k.
func (s *ttlSet[K]) forget(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.at, k)
}

// len is the number of keys held, expired ones not yet swept included.
func (s *ttlSet[K]) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}
