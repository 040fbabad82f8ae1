package fencebackend

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/fenceapi"
)

func TestPlacement(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	servers := []datapath.ServerStatus{
		{ID: "s1", Node: "node-1", Address: "a1", Role: datapath.RoleLeader, LastContact: t0, AppliedIndex: 9},
		{ID: "s2", Node: "node-2", Address: "a2", Role: datapath.RoleFollower, LastContact: t0, AppliedIndex: 8},
		{ID: "s3", Node: "node-3", Address: "a3", Role: datapath.RoleUnreachable},
	}
	want := []fenceapi.Server{
		{ID: "s1", Node: "node-1", Address: "a1", Role: fenceapi.RoleLeader},
		{ID: "s2", Node: "node-2", Address: "a2", Role: fenceapi.RoleFollower, LastContact: t0},
		{ID: "s3", Node: "node-3", Address: "a3", Role: fenceapi.RoleUnreachable},
	}
	for _, tc := range []struct {
		name string
		in   datapath.GroupStatus
		want fenceapi.Placement
	}{
		{"no group", datapath.GroupStatus{Volumes: []datapath.GroupVolume{{ID: "v1"}}, VolumesKnown: true}, fenceapi.Placement{}},
		{"leader answered", datapath.GroupStatus{Servers: servers, Volumes: []datapath.GroupVolume{{ID: "v1", Server: "s3"}, {ID: "v2", Server: "s1"}}, VolumesKnown: true},
			fenceapi.Placement{Servers: want, Holders: map[string]string{"v1": "s3", "v2": "s1"}, Replicas: map[string]fenceapi.VolumeReplicas{}}},
		{"replicated volumes: judged; a single copy left to its holder", datapath.GroupStatus{Servers: servers, VolumesKnown: true, Volumes: []datapath.GroupVolume{
			{ID: "v1", Server: "s1"},
			{ID: "v2", Server: "s1", MemberEpoch: 1, Replicas: []string{"s1", "s2", "s3"}, InSync: []string{"s1", "s2", "s3"}},
			{ID: "v3", Server: "s1", MemberEpoch: 2, Replicas: []string{"s1", "s2", "s3"}, InSync: []string{"s1", "s3"}},
			{ID: "v4", Server: "s1", MemberEpoch: 1, Replicas: []string{"s1", "s9", "s2"}, InSync: []string{"s1", "s9", "s2"}},
			{ID: "v5", Server: "s1", MemberEpoch: 1, Replicas: []string{"s1", "s2", "s2"}, InSync: []string{"s1", "s2"}},
		}}, fenceapi.Placement{Servers: want, Holders: map[string]string{"v1": "s1", "v2": "s1", "v3": "s1", "v4": "s1", "v5": "s1"},
			Replicas: map[string]fenceapi.VolumeReplicas{
				"v2": {State: fenceapi.VolumeDegraded, Live: 2, Need: 2, Replicas: []fenceapi.Replica{{Server: "s1", InSync: true}, {Server: "s2", InSync: true}, {Server: "s3", InSync: true}}},
				"v3": {State: fenceapi.VolumeNoQuorum, Live: 1, Need: 2, Replicas: []fenceapi.Replica{{Server: "s1", InSync: true}, {Server: "s2", InSync: false}, {Server: "s3", InSync: true}}},
				"v4": {State: fenceapi.VolumeDegraded, Live: 2, Need: 2, Replicas: []fenceapi.Replica{{Server: "s1", InSync: true}, {Server: "s9", InSync: true}, {Server: "s2", InSync: true}}},
				"v5": {State: fenceapi.VolumeInvalid, Need: 2,
					Problem:  "datapath: invalid argument: volume v5 lists server s2 twice among its replicas (s1, s2, s2); each replica must be on its own server",
					Replicas: []fenceapi.Replica{{Server: "s1", InSync: true}, {Server: "s2", InSync: true}, {Server: "s2", InSync: true}}},
			}}},
		{"no leader: holders not known", datapath.GroupStatus{Servers: servers}, fenceapi.Placement{Servers: want}},
		{"no volumes", datapath.GroupStatus{Servers: servers, VolumesKnown: true},
			fenceapi.Placement{Servers: want, Holders: map[string]string{}, Replicas: map[string]fenceapi.VolumeReplicas{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := placement(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("placement = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// groupDatapath is a Datapath of a group: GroupStatus answers st, or err,
// and records whether the volumes were asked for.
type groupDatapath struct {
	Datapath
	st    datapath.GroupStatus
	err   error
	asked []bool
}

func (g *groupDatapath) GroupStatus(_ context.Context, volumes bool) (datapath.GroupStatus, error) {
	g.asked = append(g.asked, volumes)
	return g.st, g.err
}

// ServerPlacement asks for the volumes and Servers does not; a datapath
// without a group reports nothing, and a group none of whose servers
// answers is unavailable.
func TestBackend_ServerPlacementAndServers(t *testing.T) {
	ctx := context.Background()
	g := &groupDatapath{st: datapath.GroupStatus{Servers: []datapath.ServerStatus{{ID: "s1", Node: "n1", Role: datapath.RoleLeader}},
		Volumes: []datapath.GroupVolume{{ID: "v1", Server: "s1"}}, VolumesKnown: true}}
	b := New(g)
	p, err := b.ServerPlacement(ctx)
	if err != nil || len(p.Servers) != 1 || p.Holders["v1"] != "s1" {
		t.Fatalf("ServerPlacement = %+v, %v", p, err)
	}
	servers, err := b.Servers(ctx)
	if err != nil || len(servers) != 1 || servers[0].Role != fenceapi.RoleLeader {
		t.Fatalf("Servers = %+v, %v", servers, err)
	}
	if !reflect.DeepEqual(g.asked, []bool{true, false}) {
		t.Errorf("volumes asked for %v; want by ServerPlacement only", g.asked)
	}
	g.err = errors.New("no datapath server answered")
	if _, err := b.ServerPlacement(ctx); !errors.Is(err, fenceapi.ErrUnavailable) {
		t.Errorf("ServerPlacement of a group that does not answer: %v; want ErrUnavailable", err)
	}
	if _, err := b.Servers(ctx); !errors.Is(err, fenceapi.ErrUnavailable) {
		t.Errorf("Servers of a group that does not answer: %v; want ErrUnavailable", err)
	}
	if p, err := New(struct{ Datapath }{}).ServerPlacement(ctx); err != nil || p.Servers != nil || p.Holders != nil {
		t.Errorf("ServerPlacement of a datapath without a group = %+v, %v; want nothing", p, err)
	}
}
