package controller

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/vigil-storage/vigil/fenceapi"
)

// Each volume's data is on one server of a storage back end made of several
// (the datapath's control group). Losing that server makes only its volumes
// unavailable: their I/O and attach wait for it. The storage watch tells
// whose: a Warning Event on each such volume's PersistentVolume once per
// outage, and a Normal one when its server answers again.

// placementReader is a FenceBackend of several servers that tells which
// holds each volume's data (the datapath's does).
type placementReader interface {
	ServerPlacement(ctx context.Context) (fenceapi.Placement, error)
}

// placementPoll is how often the storage watch asks for the placement: each
// ask goes to every server, and an outage Event is not a race.
const placementPoll = 2 * time.Second

// volumeOutage is one volume whose server does not answer.
type volumeOutage struct {
	Handle string
	Server fenceapi.Server
	// Since is when the manager first saw it so, on its clock.
	Since time.Time
}

// serverOutages are the volume outages in force at the last poll, by handle.
type serverOutages struct {
	last    time.Time // the last poll
	volumes map[string]volumeOutage
	// quorum are the replicated volumes that were not ok, by handle.
	quorum map[string]volumeQuorum
}

// outageEvent is one Event decideServerOutages asks for: the outage began
// (Back false) or ended (Back true).
type outageEvent struct {
	Outage volumeOutage
	Back   bool
}

// decideServerOutages is the pure part: given the placement now and the
// outages in force before, the Events to emit and the outages in force now.
// A volume is out when its server is unreachable or not a member at all; an
// outage begins once and ends once, when the volume's server answers again.
// A placement whose holders are not known proves nothing: nothing changes. A
// volume gone from the placement (deleted) leaves quietly. A volume of
// several replicas (in p.Replicas) is out only when the back end judged it
// server-down (its holder, which serves its reads, does not answer, and it
// keeps its quorum); one whose other replica's server is down is served,
// which ends an outage; one without quorum is decideVolumeQuorum's, and
// leaves an outage quietly; an invalid replica set changes nothing.
func decideServerOutages(p fenceapi.Placement, before map[string]volumeOutage, now time.Time) ([]outageEvent, map[string]volumeOutage) {
	if p.Holders == nil {
		return nil, before
	}
	byID := make(map[string]fenceapi.Server, len(p.Servers))
	for _, s := range p.Servers {
		byID[s.ID] = s
	}
	after := map[string]volumeOutage{}
	var evs []outageEvent
	for h, id := range p.Holders {
		s, member := byID[id]
		if !member {
			s = fenceapi.Server{ID: id, Role: fenceapi.RoleUnreachable}
		}
		was, wasOut := before[h]
		out := s.Role == fenceapi.RoleUnreachable
		if vr, replicated := p.Replicas[h]; replicated {
			switch vr.State {
			case fenceapi.VolumeNoQuorum:
				continue
			case fenceapi.VolumeInvalid:
				if wasOut {
					after[h] = was
				}
				continue
			}
			out = vr.State == fenceapi.VolumeServerDown
		}
		switch {
		case out && wasOut && was.Server.ID == id:
			after[h] = was
		case out:
			after[h] = volumeOutage{Handle: h, Server: s, Since: now}
			evs = append(evs, outageEvent{Outage: after[h]})
		case wasOut:
			was.Server = s
			evs = append(evs, outageEvent{Outage: was, Back: true})
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].Outage.Handle < evs[j].Outage.Handle })
	return evs, after
}

// pollServerOutages asks the back end for its placement, at most every
// placementPoll, puts the Events decideServerOutages and decideVolumeQuorum
// ask for on the volumes' PersistentVolumes, and counts the volumes by state. Only the storage watch calls it. A back end
// that does not answer changes nothing.
func (c *Controller) pollServerOutages(ctx context.Context) {
	pr, ok := c.backend.(placementReader)
	now := c.now()
	if !ok || now.Sub(c.serverDown.last) < placementPoll {
		return
	}
	c.serverDown.last = now
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	p, err := pr.ServerPlacement(pctx)
	cancel()
	if err != nil {
		klog.FromContext(ctx).V(2).Info("volume placement not known at this poll", "err", err)
		return
	}
	evs, after := decideServerOutages(p, c.serverDown.volumes, now)
	c.serverDown.volumes = after
	for _, e := range evs {
		c.emitOutage(ctx, e)
	}
	qevs, qafter := decideVolumeQuorum(p, c.serverDown.quorum, now)
	c.serverDown.quorum = qafter
	for _, e := range qevs {
		c.emitQuorum(ctx, e)
	}
	c.setVolumeStates(volumeStates(p))
}

// emitOutage puts e on its volume's PersistentVolume, or logs it when no
// PersistentVolume has that handle.
func (c *Controller) emitOutage(ctx context.Context, e outageEvent) {
	o := e.Outage
	typ, reason, msg := corev1.EventTypeWarning, EventVolumeServerDown, outageMessage(o)
	if e.Back {
		typ, reason = corev1.EventTypeNormal, EventVolumeServerBack
		msg = fmt.Sprintf("volume %s: datapath server %s answers again (it did not from %s): the volume's I/O and attach go on",
			o.Handle, serverName(o.Server), o.Since.UTC().Format(time.RFC3339))
	}
	pv := c.pvOf(o.Handle)
	if pv == nil {
		klog.FromContext(ctx).Info("no PersistentVolume has the volume's handle: "+msg, "handle", o.Handle, "reason", reason)
		return
	}
	c.emitOnPV(pv, typ, reason, msg)
}

func outageMessage(o volumeOutage) string {
	why := "which does not answer"
	if o.Server.Node == "" && o.Server.Address == "" {
		why = "which is not a member of the datapath's group"
	}
	return fmt.Sprintf("volume %s is unavailable since %s: its data is on datapath server %s, %s; "+
		"the volume's I/O and attach wait until that server is back, and no other volume is affected",
		o.Handle, o.Since.UTC().Format(time.RFC3339), serverName(o.Server), why)
}

// serverName names a server by its id, node and address, as far as known.
func serverName(s fenceapi.Server) string {
	name := s.ID
	if s.Node != "" {
		name += " on node " + s.Node
	}
	if s.Address != "" {
		name += " (" + s.Address + ")"
	}
	return name
}

// emitOnPV records an Event on pv.
func (c *Controller) emitOnPV(pv *corev1.PersistentVolume, typ, reason, msg string) {
	ref := &corev1.ObjectReference{Kind: "PersistentVolume", APIVersion: "v1", Name: pv.Name, UID: pv.UID}
	c.events.emit(ref, pv.UID, typ, reason, msg)
}

// pvOf is the PersistentVolume of the back end's volume handle, or nil.
func (c *Controller) pvOf(handle string) *corev1.PersistentVolume {
	objs, err := c.pvIndex.ByIndex(pvByHandleIndex, c.backend.Driver()+"^"+handle)
	if err != nil || len(objs) == 0 {
		return nil
	}
	pv, _ := objs[0].(*corev1.PersistentVolume)
	return pv
}
