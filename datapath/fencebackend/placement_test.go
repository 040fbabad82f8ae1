package fencebackend

import (
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
			fenceapi.Placement{Servers: want, Holders: map[string]string{"v1": "s3", "v2": "s1"}}},
		{"no leader: holders not known", datapath.GroupStatus{Servers: servers}, fenceapi.Placement{Servers: want}},
		{"no volumes", datapath.GroupStatus{Servers: servers, VolumesKnown: true}, fenceapi.Placement{Servers: want, Holders: map[string]string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := placement(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("placement = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
