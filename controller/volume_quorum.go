package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/vigil-storage/vigil/fenceapi"
)

// A volume of several replicas is served while a majority of them are in
// sync on servers that answer and its holder, which serves its reads,
// answers (the back end judges it: fenceapi.VolumeReplicas). Losing another
// replica's server is not an outage: the volume is degraded, and its
// PersistentVolume gets a Normal Event, never VigilVolumeServerDown, which
// would claim it unavailable. Losing its holder's server is that outage
// (server_outage.go). Losing the majority is worse: I/O is suspended,
// nothing stale is served, and its PersistentVolume gets a Warning Event
// once, then a Normal one once the quorum is back.

// volumeQuorum is a replicated volume that is not ok, as last judged.
type volumeQuorum struct {
	Handle string
	// State is fenceapi.VolumeDegraded or fenceapi.VolumeNoQuorum.
	State string
	// Replicas are its replicas with their servers, as last seen.
	Replicas []replicaOnServer
	Live     int
	Need     int
	// Since is when the manager first saw it in State, on its clock.
	Since time.Time
	// Invalid: the back end reported its replica set invalid since; the
	// record stays as it was before, and the problem is logged once.
	Invalid bool
}

// replicaOnServer is one replica with its server as the placement has it
// (Role unreachable for a server that is not a member).
type replicaOnServer struct {
	Server fenceapi.Server
	InSync bool
}

// quorumEvent is one Event (or, for Reason empty, one log line about an
// invalid replica set) decideVolumeQuorum asks for.
type quorumEvent struct {
	Reason string
	Volume volumeQuorum
	// Was is the volume's state before (ok when it had none), for the
	// message of an Event that ends one.
	Was volumeQuorum
	// Problem is the back end's word on an invalid replica set.
	Problem string
}

// decideVolumeQuorum is the pure part: given the placement now and the
// replicated volumes that were not ok before, the Events to emit and the
// volumes not ok now. A volume's state changes from ok, degraded or
// no-quorum to another, and each change gives one Event:
//
//	to no-quorum                     Warning EventVolumeNoQuorum
//	from no-quorum to another        Normal  EventVolumeQuorumBack
//	from ok, server-down to degraded Normal  EventVolumeDegraded
//	from degraded to ok              Normal  EventVolumeReplicasRestored
//
// Server-down (the holder's server down, the quorum kept) is
// decideServerOutages' outage, and is not recorded here.
// A placement whose holders are not known proves nothing: nothing changes.
// An invalid replica set changes nothing either, and is logged once. A
// volume gone from the placement leaves quietly.
func decideVolumeQuorum(p fenceapi.Placement, before map[string]volumeQuorum, now time.Time) ([]quorumEvent, map[string]volumeQuorum) {
	if p.Holders == nil {
		return nil, before
	}
	after := map[string]volumeQuorum{}
	var evs []quorumEvent
	for h, vr := range p.Replicas {
		was, seen := before[h]
		if vr.State == fenceapi.VolumeInvalid {
			if !was.Invalid {
				evs = append(evs, quorumEvent{Volume: volumeQuorum{Handle: h, Replicas: replicasOnServers(p.Servers, vr)}, Problem: vr.Problem})
			}
			was.Handle, was.Invalid = h, true // State stays, "" when it was ok
			after[h] = was
			continue
		}
		seen = seen && was.State != ""
		cur := volumeQuorum{Handle: h, State: vr.State, Replicas: replicasOnServers(p.Servers, vr), Live: vr.Live, Need: vr.Need, Since: now}
		if seen && was.State == cur.State {
			was.Replicas, was.Live, was.Need, was.Invalid = cur.Replicas, cur.Live, cur.Need, false
			after[h] = was
			continue
		}
		if cur.State == fenceapi.VolumeDegraded || cur.State == fenceapi.VolumeNoQuorum {
			after[h] = cur
		}
		if r := quorumReason(was.State, seen, cur.State); r != "" {
			evs = append(evs, quorumEvent{Reason: r, Volume: cur, Was: was})
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].Volume.Handle < evs[j].Volume.Handle })
	return evs, after
}

// quorumReason is the Event of a change from was (seen false: ok) to now;
// none for a change that needs none.
func quorumReason(was string, seen bool, now string) string {
	switch {
	case now == fenceapi.VolumeNoQuorum:
		return EventVolumeNoQuorum
	case seen && was == fenceapi.VolumeNoQuorum:
		return EventVolumeQuorumBack
	case now == fenceapi.VolumeDegraded:
		return EventVolumeDegraded
	case seen && was == fenceapi.VolumeDegraded && now == fenceapi.VolumeOK:
		return EventVolumeReplicasRestored
	}
	return ""
}

// replicasOnServers is vr's replicas with their servers from servers; a
// server not among them is unreachable.
func replicasOnServers(servers []fenceapi.Server, vr fenceapi.VolumeReplicas) []replicaOnServer {
	out := make([]replicaOnServer, len(vr.Replicas))
	for i, r := range vr.Replicas {
		out[i] = replicaOnServer{Server: fenceapi.Server{ID: r.Server, Role: fenceapi.RoleUnreachable}, InSync: r.InSync}
		for _, s := range servers {
			if s.ID == r.Server {
				out[i].Server = s
			}
		}
	}
	return out
}

// volumeStates counts the volumes of the placement by state: a single copy
// is ok, or server-down when its holder is unreachable or not a member; a
// volume of several replicas has the back end's state. Nil when the
// holders are not known.
func volumeStates(p fenceapi.Placement) map[string]int {
	if p.Holders == nil {
		return nil
	}
	answers := map[string]bool{}
	for _, s := range p.Servers {
		answers[s.ID] = s.Role != fenceapi.RoleUnreachable
	}
	n := map[string]int{}
	for h, id := range p.Holders {
		switch vr, replicated := p.Replicas[h]; {
		case replicated:
			n[vr.State]++
		case answers[id]:
			n[fenceapi.VolumeOK]++
		default:
			n[fenceapi.VolumeServerDown]++
		}
	}
	return n
}

// volumeStateNames are the states vigil_volumes always has a series for.
var volumeStateNames = []string{fenceapi.VolumeOK, fenceapi.VolumeDegraded, fenceapi.VolumeNoQuorum,
	fenceapi.VolumeServerDown, fenceapi.VolumeInvalid}

// setVolumeStates sets the vigil_volumes gauge from n (none: unchanged).
func (c *Controller) setVolumeStates(n map[string]int) {
	if n == nil {
		return
	}
	for _, st := range volumeStateNames {
		c.metrics.Volumes.WithLabelValues(st).Set(float64(n[st]))
	}
}

// emitQuorum puts e on its volume's PersistentVolume, or logs it when no
// PersistentVolume has that handle; an invalid replica set is logged.
func (c *Controller) emitQuorum(ctx context.Context, e quorumEvent) {
	v := e.Volume
	if e.Reason == "" {
		klog.FromContext(ctx).Info("the storage reports an invalid replica set; the volume's state is not judged from it",
			"handle", v.Handle, "problem", e.Problem, "replicas", replicaStates(v.Replicas))
		return
	}
	typ, msg := corev1.EventTypeNormal, quorumMessage(e)
	if e.Reason == EventVolumeNoQuorum {
		typ = corev1.EventTypeWarning
	}
	pv := c.pvOf(v.Handle)
	if pv == nil {
		klog.FromContext(ctx).Info("no PersistentVolume has the volume's handle: "+msg, "handle", v.Handle, "reason", e.Reason)
		return
	}
	c.emitOnPV(pv, typ, e.Reason, msg)
}

// quorumMessage says what e's change is, names the replicas, their
// servers and states, and what happens to the volume's I/O.
func quorumMessage(e quorumEvent) string {
	v := e.Volume
	replicas := replicaStates(v.Replicas)
	switch e.Reason {
	case EventVolumeNoQuorum:
		return fmt.Sprintf("volume %s has no quorum since %s: %d of its %d replicas are in sync on servers that answer, %d are needed (%s); "+
			"its I/O is suspended and nothing stale is served until enough of them are back: bring their servers back. "+
			"If they are lost for good, an operator may serve it from the replicas left with the explicit, audited vigil-datapath force-replica, "+
			"which loses the writes an out-of-sync replica missed; it is never done automatically",
			v.Handle, v.Since.UTC().Format(time.RFC3339), v.Live, len(v.Replicas), v.Need, replicas)
	case EventVolumeQuorumBack:
		next := "its I/O goes on"
		if v.State == fenceapi.VolumeServerDown {
			next = "its I/O still waits for its holder's server, which serves its reads and does not answer"
		}
		return fmt.Sprintf("volume %s has its quorum back (it had none from %s): %d of its %d replicas are in sync on servers that answer (%s); %s",
			v.Handle, e.Was.Since.UTC().Format(time.RFC3339), v.Live, len(v.Replicas), replicas, next)
	case EventVolumeDegraded:
		return fmt.Sprintf("volume %s is degraded: %d of its %d replicas are in sync on servers that answer, %d are needed (%s); "+
			"it is still served; losing %s would take its quorum",
			v.Handle, v.Live, len(v.Replicas), v.Need, replicas, moreReplicas(v.Live-v.Need+1))
	}
	return fmt.Sprintf("volume %s: all its %d replicas are in sync on servers that answer again (degraded from %s): %s",
		v.Handle, len(v.Replicas), e.Was.Since.UTC().Format(time.RFC3339), replicas)
}

// moreReplicas is "1 more in-sync replica" or "n more in-sync replicas".
func moreReplicas(n int) string {
	if n == 1 {
		return "1 more in-sync replica"
	}
	return fmt.Sprintf("%d more in-sync replicas", n)
}

// replicaStates names each replica's server and its state: in sync or out
// of sync, and whether its server answers.
func replicaStates(rs []replicaOnServer) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		st := "in sync"
		if !r.InSync {
			st = "out of sync"
		}
		if r.Server.Role == fenceapi.RoleUnreachable {
			st += ", does not answer"
		}
		parts[i] = fmt.Sprintf("replica on server %s: %s", serverName(r.Server), st)
	}
	return strings.Join(parts, "; ")
}
