package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// groupLeader waits for the member of srvs that leads and returns its group.
func groupLeader(t testing.TB, srvs []*datapathtest.Server) *raftstate.Group {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range srvs {
			if s.Group.IsLeader() {
				return s.Group
			}
		}
	}
	t.Fatal("no leader")
	return nil
}

// waitMember waits until srv applied member epoch m of volume id.
func waitMember(t testing.TB, srv *datapathtest.Server, id string, m uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if v, _, ok := srv.Group.AppliedVolume(id); ok && v.MemberEpoch >= m {
			return
		}
	}
	t.Fatalf("volume %s never at member epoch %d on %s", id, m, srv.Addr)
}

// replicatedVolume creates a volume named name with a copy on every server
// of srvs, srvs[holder] holding it (its data file prepared there first, as
// a placed create does), in sync at member epoch 0, and returns its id and
// its replicas' server ids, the holder's first.
func replicatedVolume(t testing.TB, ctx context.Context, srvs []*datapathtest.Server, holder int, name string) (string, []string) {
	t.Helper()
	v, _, err := srvs[holder].Store.PrepareVolume(name, 1<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{srvs[holder].Group.Self()}
	for i, s := range srvs {
		if i != holder {
			ids = append(ids, s.Group.Self())
		}
	}
	if _, err := groupLeader(t, srvs).CreateReplicatedVolume(ctx, v.ID, name, 1<<20, datapath.AccessRWO, ids); err != nil {
		t.Fatal(err)
	}
	for _, s := range srvs {
		waitApplied(t, s, v.ID)
	}
	return v.ID, ids
}

// TestClient_WriteAt_StaleTwiceIsTheError: the client reads the volume's
// member epoch before its first write and sends the write at it; a server
// that refuses every write as at a stale member epoch gets it twice, the
// second at the member epoch the client read again after the first
// refusal, and the second refusal is the write's error (the fake server
// speaks gRPC only, no bulk channel).
func TestClient_WriteAt_StaleTwiceIsTheError(t *testing.T) {
	f := startStaleServer(t, 7)
	c, err := client.Dial(context.Background(), f.addr, "node-token-0123456789", client.WithTimeout(5*time.Second), client.WithBulk(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.WriteAt(context.Background(), "vol-0123456789abcdef", "n1", 1, 0, []byte("x"))
	if !errors.Is(err, datapath.ErrStaleMemberEpoch) {
		t.Fatalf("write refused twice as stale: %v; want ErrStaleMemberEpoch", err)
	}
	if got := f.members(); len(got) != 2 || got[0] != 7 || got[1] != 8 {
		t.Fatalf("writes carried member epochs %v; want [7 8]: the first at the epoch read first, the second at the one read again", got)
	}
}
