package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Crash-loop deletion backoff per owner: the first deletion of an owner's pod is
// at once, the next after crashLoopBackoffBase, doubling up to crashLoopBackoffMax;
// an owner with no deletion for crashLoopBackoffReset starts again at once.
const (
	crashLoopBackoffBase  = time.Minute
	crashLoopBackoffMax   = 30 * time.Minute
	crashLoopBackoffReset = time.Hour
	crashLoopUIDMemory    = 24 * time.Hour
)

// Reasons of the crash-loop decision.
const (
	ReasonCrashLoopOff          Reason = "crash-loop-deletion-off"
	ReasonCrashLoopNotLooping   Reason = "not-crash-looping"
	ReasonCrashLoopBelowLimit   Reason = "restarts-below-limit"
	ReasonCrashLoopTerminating  Reason = "already-terminating"
	ReasonCrashLoopOwner        Reason = "owner-not-statefulset-or-deployment"
	ReasonCrashLoopNotProtected Reason = "no-protected-volume"
	ReasonCrashLoopOnceDone     Reason = "already-deleted-once"
	ReasonCrashLoopBackoff      Reason = "owner-backoff"
	ReasonCrashLoopDelete       Reason = "crash-looping-past-limit"
)

// crashOwner is what the manager remembers of one owner's crash-loop deletions.
type crashOwner struct {
	last  time.Time
	level int // deletions within the reset window, minus one
}

// crashLoops bounds crash-loop deletions: each pod UID at most once, and a
// backoff per owner. It lives for one leadership; after a failover a pod already
// deleted is terminating (skipped), so the bound still holds per UID.
type crashLoops struct {
	mu      sync.Mutex
	deleted map[types.UID]time.Time
	owners  map[string]*crashOwner
}

func newCrashLoops() *crashLoops {
	return &crashLoops{deleted: map[types.UID]time.Time{}, owners: map[string]*crashOwner{}}
}

// crashState is the bound's state for one pod at one instant.
type crashState struct {
	DeletedBefore bool
	// NextAllowed is when the owner may lose another pod (zero: now).
	NextAllowed time.Time
}

func (c *crashLoops) state(uid types.UID, owner string, now time.Time) crashState {
	c.mu.Lock()
	defer c.mu.Unlock()
	for u, at := range c.deleted {
		if now.Sub(at) > crashLoopUIDMemory {
			delete(c.deleted, u)
		}
	}
	st := crashState{}
	_, st.DeletedBefore = c.deleted[uid]
	if o := c.owners[owner]; o != nil && now.Sub(o.last) < crashLoopBackoffReset {
		st.NextAllowed = o.last.Add(crashBackoff(o.level))
	}
	return st
}

func crashBackoff(level int) time.Duration {
	d := crashLoopBackoffBase
	for range level {
		d *= 2
		if d >= crashLoopBackoffMax {
			return crashLoopBackoffMax
		}
	}
	return d
}

func (c *crashLoops) deletedNow(uid types.UID, owner string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleted[uid] = now
	o := c.owners[owner]
	switch {
	case o == nil:
		c.owners[owner] = &crashOwner{last: now}
	case now.Sub(o.last) >= crashLoopBackoffReset:
		o.last, o.level = now, 0
	default:
		o.last, o.level = now, o.level+1
	}
}

// crashDecision is decideCrashLoop's answer.
type crashDecision struct {
	Delete       bool
	Reason       Reason
	RecheckAfter time.Duration
}

// decideCrashLoop decides whether a pod on a live node is deleted (not forced)
// because a container crash-loops: crash-loop-pod-deletion on; the pod owned by
// a StatefulSet or a Deployment's ReplicaSet; a protected volume; a container in
// CrashLoopBackOff with at least crash-loop-restart-limit restarts; this UID
// never deleted before; the owner's backoff passed. It is pure.
func decideCrashLoop(s *Snapshot, restarts int32, st crashState, set *Settings, now time.Time) crashDecision {
	switch {
	case !set.CrashLoopPodDeletion:
		return crashDecision{Reason: ReasonCrashLoopOff}
	case restarts == 0:
		return crashDecision{Reason: ReasonCrashLoopNotLooping}
	case s.Pod.DeletionTimestamp != nil:
		return crashDecision{Reason: ReasonCrashLoopTerminating}
	case s.Owner != OwnerStatefulSet && s.Owner != OwnerDeployment:
		return crashDecision{Reason: ReasonCrashLoopOwner}
	case !usesProtectedVolume(s.Volumes, set.ExtraProtectedProvisioners):
		return crashDecision{Reason: ReasonCrashLoopNotProtected}
	case int(restarts) < set.CrashLoopRestartLimit:
		return crashDecision{Reason: ReasonCrashLoopBelowLimit}
	case st.DeletedBefore:
		return crashDecision{Reason: ReasonCrashLoopOnceDone}
	case now.Before(st.NextAllowed):
		return crashDecision{Reason: ReasonCrashLoopBackoff, RecheckAfter: st.NextAllowed.Sub(now)}
	}
	return crashDecision{Delete: true, Reason: ReasonCrashLoopDelete}
}
