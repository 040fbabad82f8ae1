package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// deletedTTL is how long the reaper remembers an object it deleted. Its
// informers normally see the deletion within a second; under a loaded API
// server (a rack of 50 nodes reaped at once on a 500-node cluster) the watch
// lagged by several seconds, and every pod requeued in that time was deleted a
// second time: 129 of 770 pod deletes answered 404.
const deletedTTL = 30 * time.Second

// deletedUIDs remembers the UIDs of the objects the reaper deleted (pods
// force-deleted, VolumeAttachments whose deletion was accepted) until its
// informers show them gone or deletedTTL passes, so that a stale cache entry
// does not send the same delete again. Forgetting early only costs a request
// answered 404: a delete carries a UID precondition either way.
type deletedUIDs struct {
	mu        sync.Mutex
	at        map[types.UID]time.Time
	nextSweep time.Time
}

func newDeletedUIDs() *deletedUIDs { return &deletedUIDs{at: map[types.UID]time.Time{}} }

// add records that uid was deleted at now.
func (d *deletedUIDs) add(uid types.UID, now time.Time) {
	if uid == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.at[uid] = now
	if now.After(d.nextSweep) {
		for u, at := range d.at {
			if now.Sub(at) >= deletedTTL {
				delete(d.at, u)
			}
		}
		d.nextSweep = now.Add(deletedTTL)
	}
}

// has reports whether uid was deleted less than deletedTTL before now.
func (d *deletedUIDs) has(uid types.UID, now time.Time) bool {
	if uid == "" {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.at[uid]
	return ok && now.Sub(at) < deletedTTL
}

// forget drops uid: its informer saw it gone.
func (d *deletedUIDs) forget(uid types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.at, uid)
}

// len is the number of UIDs remembered (for tests).
func (d *deletedUIDs) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.at)
}
