package controller

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vigil-storage/vigil/fenceapi"
)

// TestDecideServerOutages is the specification of the outage Events: server
// states × volume placement → Events, once per outage.
func TestDecideServerOutages(t *testing.T) {
	now := t0.Add(time.Minute)
	s1 := fenceapi.Server{ID: "s1", Node: "node-1", Address: "a1", Role: fenceapi.RoleLeader}
	s2 := fenceapi.Server{ID: "s2", Node: "node-2", Address: "a2", Role: fenceapi.RoleFollower, LastContact: t0}
	s2down := fenceapi.Server{ID: "s2", Node: "node-2", Address: "a2", Role: fenceapi.RoleUnreachable}
	s3cand := fenceapi.Server{ID: "s3", Node: "node-3", Address: "a3", Role: fenceapi.RoleCandidate}
	gone := fenceapi.Server{ID: "s9", Role: fenceapi.RoleUnreachable}
	out := func(h string, s fenceapi.Server, since time.Time) volumeOutage {
		return volumeOutage{Handle: h, Server: s, Since: since}
	}
	for _, tc := range []struct {
		name   string
		p      fenceapi.Placement
		before map[string]volumeOutage
		evs    []outageEvent
		after  map[string]volumeOutage
	}{
		{"all servers answer", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2, s3cand}, Holders: map[string]string{"v1": "s1", "v2": "s2", "v3": "s3"}},
			nil, nil, map[string]volumeOutage{}},
		{"a server goes: only its volumes", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2down}, Holders: map[string]string{"v1": "s1", "v2": "s2", "v3": "s2"}},
			map[string]volumeOutage{}, []outageEvent{{Outage: out("v2", s2down, now)}, {Outage: out("v3", s2down, now)}},
			map[string]volumeOutage{"v2": out("v2", s2down, now), "v3": out("v3", s2down, now)}},
		{"still down: no second Event", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2down}, Holders: map[string]string{"v1": "s1", "v2": "s2"}},
			map[string]volumeOutage{"v2": out("v2", s2down, t0)}, nil, map[string]volumeOutage{"v2": out("v2", s2down, t0)}},
		{"back", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2}, Holders: map[string]string{"v1": "s1", "v2": "s2"}},
			map[string]volumeOutage{"v2": out("v2", s2down, t0)}, []outageEvent{{Outage: out("v2", s2, t0), Back: true}}, map[string]volumeOutage{}},
		{"holder not a member", fenceapi.Placement{Servers: []fenceapi.Server{s1}, Holders: map[string]string{"v1": "s1", "v9": "s9"}},
			nil, []outageEvent{{Outage: out("v9", gone, now)}}, map[string]volumeOutage{"v9": out("v9", gone, now)}},
		{"holders not known (no leader): nothing changes", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2down}},
			map[string]volumeOutage{"v2": out("v2", s2down, t0)}, nil, map[string]volumeOutage{"v2": out("v2", s2down, t0)}},
		{"deleted while down: leaves quietly", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2down}, Holders: map[string]string{"v1": "s1"}},
			map[string]volumeOutage{"v2": out("v2", s2down, t0)}, nil, map[string]volumeOutage{}},
		{"a back end of one server", fenceapi.Placement{}, nil, nil, nil},
		{"a replicated volume whose other replica's server is down: served, no outage", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2down},
			Holders: map[string]string{"v2": "s1"}, Replicas: map[string]fenceapi.VolumeReplicas{"v2": {State: fenceapi.VolumeDegraded}}},
			nil, nil, map[string]volumeOutage{}},
		{"a replicated volume whose holder's server is down, quorum kept: the outage", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2down},
			Holders: map[string]string{"v2": "s2"}, Replicas: map[string]fenceapi.VolumeReplicas{"v2": {State: fenceapi.VolumeServerDown}}},
			nil, []outageEvent{{Outage: out("v2", s2down, now)}}, map[string]volumeOutage{"v2": out("v2", s2down, now)}},
		{"a replicated volume without quorum, its holder down: decideVolumeQuorum's, no outage", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2down},
			Holders: map[string]string{"v2": "s2"}, Replicas: map[string]fenceapi.VolumeReplicas{"v2": {State: fenceapi.VolumeNoQuorum}}},
			nil, nil, map[string]volumeOutage{}},
		{"a replicated volume's holder back, another replica still down: served, the outage ends", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2},
			Holders: map[string]string{"v2": "s2"}, Replicas: map[string]fenceapi.VolumeReplicas{"v2": {State: fenceapi.VolumeDegraded}}},
			map[string]volumeOutage{"v2": out("v2", s2down, t0)}, []outageEvent{{Outage: out("v2", s2, t0), Back: true}}, map[string]volumeOutage{}},
		{"an invalid replica set changes nothing", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2},
			Holders: map[string]string{"v2": "s2"}, Replicas: map[string]fenceapi.VolumeReplicas{"v2": {State: fenceapi.VolumeInvalid}}},
			map[string]volumeOutage{"v2": out("v2", s2down, t0)}, nil, map[string]volumeOutage{"v2": out("v2", s2down, t0)}},
		{"an outage of a volume now without quorum leaves quietly", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2down},
			Holders: map[string]string{"v2": "s2"}, Replicas: map[string]fenceapi.VolumeReplicas{"v2": {State: fenceapi.VolumeNoQuorum}}},
			map[string]volumeOutage{"v2": out("v2", s2down, t0)}, nil, map[string]volumeOutage{}},
		{"first poll of a new leader, server down", fenceapi.Placement{Servers: []fenceapi.Server{s1, s2down}, Holders: map[string]string{"v2": "s2"}},
			nil, []outageEvent{{Outage: out("v2", s2down, now)}}, map[string]volumeOutage{"v2": out("v2", s2down, now)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, after := decideServerOutages(tc.p, tc.before, now)
			if !reflect.DeepEqual(evs, tc.evs) || !reflect.DeepEqual(after, tc.after) {
				t.Fatalf("decideServerOutages =\n %+v\n %+v\nwant\n %+v\n %+v", evs, after, tc.evs, tc.after)
			}
		})
	}
}

// TestController_PollStorage_ServerDownWarnsOnItsPVs: the server holding a
// volume's data stops answering: one Warning Event on that volume's
// PersistentVolume (naming the server and its node, saying that I/O and
// attach wait and no other volume is affected), none on the volume another
// server holds, none at the next polls, and a Normal Event when it is back.
func TestController_PollStorage_ServerDownWarnsOnItsPVs(t *testing.T) {
	f := fencedFixture(t, corev1.ConditionTrue)
	f.objects = append(f.objects, newPV("pv-b", "driver.vigil.io"))
	f.recorder.IncludeObject = true
	f.start()
	ctx := context.Background()
	reachable, warned := true, false
	poll := func() {
		f.now = f.now.Add(placementPoll)
		f.ctrl.pollStorage(ctx, &reachable, &warned)
	}
	f.backend.setReport(heartbeatReport(t0, map[string]time.Duration{"node-1": 0, "node-2": 0}))
	s1 := fenceapi.Server{ID: "s1", Node: "node-1", Address: "10.0.0.1:9600", Role: fenceapi.RoleLeader}
	s2 := fenceapi.Server{ID: "s2", Node: "node-2", Address: "10.0.0.2:9600", Role: fenceapi.RoleFollower}
	holders := map[string]string{"handle-pv-a": "s2", "handle-pv-b": "s1"}
	f.backend.setPlacement(fenceapi.Placement{Servers: []fenceapi.Server{s1, s2}, Holders: holders})
	poll()
	f.expectEvents()
	s2.Role = fenceapi.RoleUnreachable
	f.backend.setPlacement(fenceapi.Placement{Servers: []fenceapi.Server{s1, s2}, Holders: holders})
	poll()
	evs := f.expectEvents("Warning " + EventVolumeServerDown)
	if len(evs) == 1 {
		for _, want := range []string{"kind=PersistentVolume", "volume handle-pv-a is unavailable", "datapath server s2 on node node-2 (10.0.0.2:9600)",
			"I/O and attach wait until that server is back", "no other volume is affected"} {
			if !strings.Contains(evs[0], want) {
				t.Errorf("event %q lacks %q", evs[0], want)
			}
		}
	}
	poll()
	f.expectEvents() // still down: once per outage
	f.backend.setErr(errors.New("refused"))
	poll()
	f.backend.setErr(nil)
	f.backend.setPlacement(fenceapi.Placement{Servers: []fenceapi.Server{s1, s2}}) // no leader: holders not known
	poll()
	f.expectEvents() // nothing proven either way
	s2.Role = fenceapi.RoleFollower
	f.backend.setPlacement(fenceapi.Placement{Servers: []fenceapi.Server{s1, s2}, Holders: holders})
	poll()
	evs = f.expectEvents("Normal " + EventVolumeServerBack)
	if len(evs) == 1 && (!strings.Contains(evs[0], "kind=PersistentVolume") || !strings.Contains(evs[0], "volume handle-pv-a: datapath server s2 on node node-2 (10.0.0.2:9600) answers again")) {
		t.Errorf("event %q: want on the PersistentVolume of handle-pv-a, saying its server answers again", evs[0])
	}
	poll()
	f.expectEvents()
}
