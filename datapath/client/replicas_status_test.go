package client_test

import (
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// TestClient_GroupVolumes_ReplicaSets: GroupVolumes reports each volume's
// recorded replica set, in-sync subset and member epoch as the leader
// committed them; a volume of one copy reports none (its one copy is on
// Server, at member epoch 0).
func TestClient_GroupVolumes_ReplicaSets(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(srvs[1].Addr, srvs[2].Addr), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	one, err := ctl.CreateVolume(ctx, "pvc-one", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	servers, err := ctl.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range servers.Servers {
		ids = append(ids, s.ID)
	}
	sort.Strings(ids)
	var leader *raftstate.Group
	for deadline := time.Now().Add(10 * time.Second); leader == nil; time.Sleep(20 * time.Millisecond) {
		for _, s := range srvs {
			if s.Group.IsLeader() {
				leader = s.Group
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	if _, err := leader.CreateReplicatedVolume(ctx, "vol-00000000000000aa", "pvc-three", 1<<20, datapath.AccessRWO, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.MarkReplicaOutOfSync(ctx, "vol-00000000000000aa", ids[2], 1, "", 0); err != nil {
		t.Fatal(err)
	}
	vols, err := ctl.GroupVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 2 || vols[0].ID != one.ID || vols[1].Name != "pvc-three" {
		t.Fatalf("volumes %+v; want pvc-one and pvc-three", vols)
	}
	if v := vols[0]; v.Replicas != nil || v.InSync != nil || v.MemberEpoch != 0 || v.Server == "" {
		t.Errorf("the volume of one copy: %+v; want its server and no replica set", v)
	}
	v := vols[1]
	if !reflect.DeepEqual(v.Replicas, ids) || !reflect.DeepEqual(v.InSync, ids[:2]) || v.MemberEpoch != 2 {
		t.Errorf("the volume of three: replicas %v, in sync %v, member epoch %d; want %v, %v, 2", v.Replicas, v.InSync, v.MemberEpoch, ids, ids[:2])
	}
}
