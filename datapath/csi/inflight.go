package csi

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// inflight serialises operations per volume, as the CSI spec recommends: a
// second call for a volume that is still being worked on is refused with Aborted
// and the sidecar retries it later, instead of two calls racing in the datapath.
type inflight struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// acquire marks key busy and returns the function that frees it, or Aborted
// when another operation holds key.
func (f *inflight) acquire(key string) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys = make(map[string]struct{})
	}
	if _, busy := f.keys[key]; busy {
		return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress; retry later", key)
	}
	f.keys[key] = struct{}{}
	return func() {
		f.mu.Lock()
		delete(f.keys, key)
		f.mu.Unlock()
	}, nil
}
