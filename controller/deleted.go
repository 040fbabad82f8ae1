package controller

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// deletedTTL is how long the controller remembers an object it deleted. Its
// informers normally see the deletion within a second; under a loaded API
// server (a rack of 50 nodes reaped at once on a 500-node cluster) the watch
// lagged by several seconds, and every pod requeued in that time was deleted a
// second time: 129 of 770 pod deletes answered 404.
const deletedTTL = 30 * time.Second

// deletedUIDs remembers the UIDs of the objects the controller deleted (pods
// force-deleted, VolumeAttachments whose deletion was accepted) until its
// informers show them gone or deletedTTL passes, so that a stale cache entry
// does not send the same delete again. Forgetting early only costs a request
// answered 404: a delete carries a UID precondition either way. An empty UID
// is never remembered.
type deletedUIDs struct{ *ttlSet[types.UID] }

func newDeletedUIDs() deletedUIDs { return deletedUIDs{newTTLSet[types.UID](deletedTTL)} }

// add records that uid was deleted at now.
func (d deletedUIDs) add(uid types.UID, now time.Time) {
	if uid != "" {
		d.ttlSet.add(uid, now)
	}
}

// has reports whether uid was deleted less than deletedTTL before now.
func (d deletedUIDs) has(uid types.UID, now time.Time) bool {
	return uid != "" && d.ttlSet.has(uid, now)
}
