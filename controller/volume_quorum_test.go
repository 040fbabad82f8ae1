package controller

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/vigil-storage/vigil/fenceapi"
)

// TestDecideVolumeQuorum is the specification of the quorum Events of a
// volume of several replicas: its state before × its state now → at most
// one Event, once per change.
func TestDecideVolumeQuorum(t *testing.T) {
	now := t0.Add(time.Minute)
	s1 := fenceapi.Server{ID: "s1", Node: "node-1", Address: "a1", Role: fenceapi.RoleLeader}
	s2 := fenceapi.Server{ID: "s2", Node: "node-2", Address: "a2", Role: fenceapi.RoleFollower}
	s3down := fenceapi.Server{ID: "s3", Node: "node-3", Address: "a3", Role: fenceapi.RoleUnreachable}
	servers := []fenceapi.Server{s1, s2, s3down}
	three := []fenceapi.Replica{{Server: "s1", InSync: true}, {Server: "s2", InSync: true}, {Server: "s3", InSync: true}}
	onServers := []replicaOnServer{{Server: s1, InSync: true}, {Server: s2, InSync: true}, {Server: s3down, InSync: true}}
	vr := func(state string, live int) fenceapi.VolumeReplicas {
		return fenceapi.VolumeReplicas{Replicas: three, State: state, Live: live, Need: 2}
	}
	vq := func(state string, live int, since time.Time) volumeQuorum {
		return volumeQuorum{Handle: "v1", State: state, Replicas: onServers, Live: live, Need: 2, Since: since}
	}
	placed := func(r map[string]fenceapi.VolumeReplicas) fenceapi.Placement {
		return fenceapi.Placement{Servers: servers, Holders: map[string]string{"v1": "s1", "v2": "s1"}, Replicas: r}
	}
	one := func(v fenceapi.VolumeReplicas) map[string]fenceapi.VolumeReplicas {
		return map[string]fenceapi.VolumeReplicas{"v1": v}
	}
	invalid := fenceapi.VolumeReplicas{Replicas: three, State: fenceapi.VolumeInvalid, Need: 2, Problem: "lists server s2 twice"}
	for _, tc := range []struct {
		name   string
		p      fenceapi.Placement
		before map[string]volumeQuorum
		evs    []quorumEvent
		after  map[string]volumeQuorum
	}{
		{"ok: nothing", placed(one(vr(fenceapi.VolumeOK, 3))), nil, nil, map[string]volumeQuorum{}},
		{"a single copy is not this decision's", placed(nil), nil, nil, map[string]volumeQuorum{}},
		{"one server of three down: degraded, a Normal Event", placed(one(vr(fenceapi.VolumeDegraded, 2))), nil,
			[]quorumEvent{{Reason: EventVolumeDegraded, Volume: vq(fenceapi.VolumeDegraded, 2, now)}},
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeDegraded, 2, now)}},
		{"still degraded: no second Event", placed(one(vr(fenceapi.VolumeDegraded, 2))),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeDegraded, 2, t0)}, nil, map[string]volumeQuorum{"v1": vq(fenceapi.VolumeDegraded, 2, t0)}},
		{"degraded to no quorum: a Warning", placed(one(vr(fenceapi.VolumeNoQuorum, 1))),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeDegraded, 2, t0)},
			[]quorumEvent{{Reason: EventVolumeNoQuorum, Volume: vq(fenceapi.VolumeNoQuorum, 1, now), Was: vq(fenceapi.VolumeDegraded, 2, t0)}},
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, now)}},
		{"ok to no quorum at once: a Warning", placed(one(vr(fenceapi.VolumeNoQuorum, 0))), nil,
			[]quorumEvent{{Reason: EventVolumeNoQuorum, Volume: vq(fenceapi.VolumeNoQuorum, 0, now)}},
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 0, now)}},
		{"still no quorum: no second Warning, the replicas as now", placed(one(vr(fenceapi.VolumeNoQuorum, 0))),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, t0)}, nil, map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 0, t0)}},
		{"no quorum to degraded: quorum back", placed(one(vr(fenceapi.VolumeDegraded, 2))),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, t0)},
			[]quorumEvent{{Reason: EventVolumeQuorumBack, Volume: vq(fenceapi.VolumeDegraded, 2, now), Was: vq(fenceapi.VolumeNoQuorum, 1, t0)}},
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeDegraded, 2, now)}},
		{"no quorum to ok: quorum back", placed(one(vr(fenceapi.VolumeOK, 3))),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, t0)},
			[]quorumEvent{{Reason: EventVolumeQuorumBack, Volume: vq(fenceapi.VolumeOK, 3, now), Was: vq(fenceapi.VolumeNoQuorum, 1, t0)}},
			map[string]volumeQuorum{}},
		{"no quorum to server-down: quorum back, the holder's outage not recorded here", placed(one(vr(fenceapi.VolumeServerDown, 2))),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, t0)},
			[]quorumEvent{{Reason: EventVolumeQuorumBack, Volume: vq(fenceapi.VolumeServerDown, 2, now), Was: vq(fenceapi.VolumeNoQuorum, 1, t0)}},
			map[string]volumeQuorum{}},
		{"degraded to server-down: the outage's Event, none here", placed(one(vr(fenceapi.VolumeServerDown, 2))),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeDegraded, 2, t0)}, nil, map[string]volumeQuorum{}},
		{"server-down to degraded (not recorded): degraded", placed(one(vr(fenceapi.VolumeDegraded, 2))), nil,
			[]quorumEvent{{Reason: EventVolumeDegraded, Volume: vq(fenceapi.VolumeDegraded, 2, now)}},
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeDegraded, 2, now)}},
		{"degraded to ok: restored", placed(one(vr(fenceapi.VolumeOK, 3))),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeDegraded, 2, t0)},
			[]quorumEvent{{Reason: EventVolumeReplicasRestored, Volume: vq(fenceapi.VolumeOK, 3, now), Was: vq(fenceapi.VolumeDegraded, 2, t0)}},
			map[string]volumeQuorum{}},
		{"holders not known (no leader): nothing changes", fenceapi.Placement{Servers: servers},
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, t0)}, nil, map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, t0)}},
		{"deleted while without quorum: leaves quietly", placed(nil),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, t0)}, nil, map[string]volumeQuorum{}},
		{"an invalid replica set: logged once, the state kept", placed(one(invalid)),
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, t0)},
			[]quorumEvent{{Volume: volumeQuorum{Handle: "v1", Replicas: onServers}, Problem: "lists server s2 twice"}},
			map[string]volumeQuorum{"v1": func() volumeQuorum { v := vq(fenceapi.VolumeNoQuorum, 1, t0); v.Invalid = true; return v }()}},
		{"still invalid: not logged again", placed(one(invalid)),
			map[string]volumeQuorum{"v1": {Handle: "v1", Invalid: true}}, nil, map[string]volumeQuorum{"v1": {Handle: "v1", Invalid: true}}},
		{"invalid, then no quorum: judged as before it", placed(one(vr(fenceapi.VolumeNoQuorum, 1))),
			map[string]volumeQuorum{"v1": {Handle: "v1", Invalid: true}},
			[]quorumEvent{{Reason: EventVolumeNoQuorum, Volume: vq(fenceapi.VolumeNoQuorum, 1, now), Was: volumeQuorum{Handle: "v1", Invalid: true}}},
			map[string]volumeQuorum{"v1": vq(fenceapi.VolumeNoQuorum, 1, now)}},
		{"a replica on a server that is not a member: unreachable", fenceapi.Placement{Servers: []fenceapi.Server{s1}, Holders: map[string]string{"v1": "s1"},
			Replicas: map[string]fenceapi.VolumeReplicas{"v1": {Replicas: []fenceapi.Replica{{Server: "s1", InSync: true}, {Server: "s9"}}, State: fenceapi.VolumeNoQuorum, Live: 1, Need: 2}}},
			nil, []quorumEvent{{Reason: EventVolumeNoQuorum, Volume: volumeQuorum{Handle: "v1", State: fenceapi.VolumeNoQuorum, Live: 1, Need: 2, Since: now,
				Replicas: []replicaOnServer{{Server: s1, InSync: true}, {Server: fenceapi.Server{ID: "s9", Role: fenceapi.RoleUnreachable}}}}}},
			map[string]volumeQuorum{"v1": {Handle: "v1", State: fenceapi.VolumeNoQuorum, Live: 1, Need: 2, Since: now,
				Replicas: []replicaOnServer{{Server: s1, InSync: true}, {Server: fenceapi.Server{ID: "s9", Role: fenceapi.RoleUnreachable}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, after := decideVolumeQuorum(tc.p, tc.before, now)
			if !reflect.DeepEqual(evs, tc.evs) || !reflect.DeepEqual(after, tc.after) {
				t.Fatalf("decideVolumeQuorum =\n %+v\n %+v\nwant\n %+v\n %+v", evs, after, tc.evs, tc.after)
			}
		})
	}
}

// TestVolumeStates: the volumes of a placement by state, a single copy ok
// or server-down by its holder, a replicated one by the back end's word.
func TestVolumeStates(t *testing.T) {
	p := fenceapi.Placement{
		Servers: []fenceapi.Server{{ID: "s1", Role: fenceapi.RoleLeader}, {ID: "s2", Role: fenceapi.RoleUnreachable}},
		Holders: map[string]string{"a": "s1", "b": "s2", "c": "s9", "d": "s2", "e": "s1", "f": "s1"},
		Replicas: map[string]fenceapi.VolumeReplicas{"d": {State: fenceapi.VolumeDegraded}, "e": {State: fenceapi.VolumeNoQuorum},
			"f": {State: fenceapi.VolumeInvalid}},
	}
	want := map[string]int{"ok": 1, "server-down": 2, "degraded": 1, "no-quorum": 1, "invalid": 1}
	if got := volumeStates(p); !reflect.DeepEqual(got, want) {
		t.Errorf("volumeStates = %v; want %v", got, want)
	}
	if got := volumeStates(fenceapi.Placement{Servers: p.Servers}); got != nil {
		t.Errorf("volumeStates without holders = %v; want nil (not known)", got)
	}
}

// TestController_PollStorage_ReplicatedVolumeQuorum: a volume of three
// replicas one of whose servers other than its holder's goes is degraded,
// not down: a Normal Event, no VigilVolumeServerDown; a second server going takes its quorum:
// one Warning naming the replicas, their servers and states and saying I/O
// is suspended; once a server is back, a Normal Event; its holder's server
// going is the server-down outage, since the holder serves its reads;
// vigil_volumes counts the volumes by state all along.
func TestController_PollStorage_ReplicatedVolumeQuorum(t *testing.T) {
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
	s3 := fenceapi.Server{ID: "s3", Node: "node-3", Address: "10.0.0.3:9600", Role: fenceapi.RoleFollower}
	replicas := []fenceapi.Replica{{Server: "s1", InSync: true}, {Server: "s2", InSync: true}, {Server: "s3", InSync: true}} // s1 holds it
	set := func(state string, live int) {
		f.backend.setPlacement(fenceapi.Placement{Servers: []fenceapi.Server{s1, s2, s3}, Holders: map[string]string{"handle-pv-a": "s1", "handle-pv-b": "s2"},
			Replicas: map[string]fenceapi.VolumeReplicas{"handle-pv-a": {Replicas: replicas, State: state, Live: live, Need: 2}}})
	}
	gauge := func(want map[string]float64) {
		t.Helper()
		for st, n := range want {
			if got := testutil.ToFloat64(f.ctrl.metrics.Volumes.WithLabelValues(st)); got != n {
				t.Errorf("vigil_volumes{state=%q} = %v; want %v", st, got, n)
			}
		}
	}
	set(fenceapi.VolumeOK, 3)
	poll()
	f.expectEvents()
	gauge(map[string]float64{"ok": 2, "degraded": 0, "no-quorum": 0})
	s3.Role = fenceapi.RoleUnreachable
	set(fenceapi.VolumeDegraded, 2)
	poll()
	evs := f.expectEvents("Normal " + EventVolumeDegraded) // not VigilVolumeServerDown: it is served
	wantIn(t, evs, "kind=PersistentVolume", "volume handle-pv-a is degraded: 2 of its 3 replicas are in sync on servers that answer, 2 are needed",
		"replica on server s3 on node node-3 (10.0.0.3:9600): in sync, does not answer", "it is still served; losing 1 more in-sync replica would take its quorum")
	gauge(map[string]float64{"ok": 1, "degraded": 1, "no-quorum": 0})
	s2.Role = fenceapi.RoleUnreachable
	set(fenceapi.VolumeNoQuorum, 1)
	poll()
	evs = f.expectEvents("Warning "+EventVolumeServerDown, "Warning "+EventVolumeNoQuorum) // pv-b is a single copy on s2
	wantIn(t, evs[1:], "volume handle-pv-a has no quorum since", "1 of its 3 replicas are in sync on servers that answer, 2 are needed",
		"replica on server s1 on node node-1 (10.0.0.1:9600): in sync; replica on server s2 on node node-2 (10.0.0.2:9600): in sync, does not answer; "+
			"replica on server s3 on node node-3 (10.0.0.3:9600): in sync, does not answer",
		"I/O is suspended and nothing stale is served", "explicit, audited vigil-datapath force-replica", "never done automatically")
	gauge(map[string]float64{"ok": 0, "degraded": 0, "no-quorum": 1, "server-down": 1})
	poll()
	f.expectEvents() // once per loss
	s2.Role = fenceapi.RoleFollower
	set(fenceapi.VolumeDegraded, 2)
	poll()
	evs = f.expectEvents("Normal "+EventVolumeServerBack, "Normal "+EventVolumeQuorumBack)
	wantIn(t, evs[1:], "volume handle-pv-a has its quorum back", "its I/O goes on")
	s3.Role = fenceapi.RoleFollower
	set(fenceapi.VolumeOK, 3)
	poll()
	f.expectEvents("Normal " + EventVolumeReplicasRestored)
	gauge(map[string]float64{"ok": 2, "degraded": 0, "no-quorum": 0, "server-down": 0})
	s1.Role = fenceapi.RoleUnreachable // the holder, which serves the reads
	set(fenceapi.VolumeServerDown, 2)
	poll()
	evs = f.expectEvents("Warning " + EventVolumeServerDown)
	wantIn(t, evs, "volume handle-pv-a is unavailable", "datapath server s1 on node node-1")
	gauge(map[string]float64{"ok": 1, "server-down": 1})
	s1.Role = fenceapi.RoleLeader
	set(fenceapi.VolumeOK, 3)
	poll()
	f.expectEvents("Normal " + EventVolumeServerBack)
}

// wantIn checks that there is one Event and it holds each of want.
func wantIn(t *testing.T, evs []string, want ...string) {
	t.Helper()
	if len(evs) != 1 {
		t.Fatalf("events %q; want one", evs)
	}
	for _, w := range want {
		if !strings.Contains(evs[0], w) {
			t.Errorf("event %q lacks %q", evs[0], w)
		}
	}
}
