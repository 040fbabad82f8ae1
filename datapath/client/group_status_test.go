package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// TestClient_GroupStatus_ServerDown: with one server of three stopped,
// GroupStatus still lists the three members, the stopped one in role
// unreachable with neither last contact nor applied index, the others as
// they report themselves (one leader), and the group's volumes with the
// server holding each, from the leader.
func TestClient_GroupStatus_ServerDown(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(srvs[1].Addr, srvs[2].Addr), client.WithTimeout(time.Second), client.WithRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	v, err := ctl.CreateVolume(ctx, "pvc-a", 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	srvs[2].Stop()
	var st datapath.GroupStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err = ctl.GroupStatus(ctx, true); err == nil && st.VolumesKnown {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GroupStatus with one server stopped: %+v, %v; want the volumes from the leader", st, err)
		}
	}
	if len(st.Servers) != 3 {
		t.Fatalf("servers %+v; want the 3 members", st.Servers)
	}
	leaders := 0
	for _, s := range st.Servers {
		switch {
		case s.Address == srvs[2].Addr:
			if s.Role != datapath.RoleUnreachable || !s.LastContact.IsZero() || s.AppliedIndex != 0 {
				t.Errorf("the stopped server: %+v; want role unreachable, no contact, no index", s)
			}
		case s.Role == datapath.RoleLeader:
			leaders++
		case s.Role != datapath.RoleFollower:
			t.Errorf("a running server: %+v; want leader or follower", s)
		}
		if s.Self {
			t.Errorf("row %+v marked Self: no row is the client's", s)
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders in %+v; want 1", leaders, st.Servers)
	}
	if len(st.Volumes) != 1 || st.Volumes[0].ID != v.ID || st.Volumes[0].Server == "" {
		t.Errorf("volumes %+v; want %s with its holder", st.Volumes, v.ID)
	}
	if st, err := ctl.GroupStatus(ctx, false); err != nil || st.VolumesKnown || st.Volumes != nil || len(st.Servers) != 3 {
		t.Errorf("GroupStatus without the volumes: %+v, %v; want the 3 servers only", st, err)
	}
}
