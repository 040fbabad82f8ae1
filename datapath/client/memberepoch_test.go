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

// TestClient_Group_WriteFollowsTheMemberEpoch: three servers; a volume
// whose replica set the leader records on all three. An engine's writes
// carry the member epoch of the set it read (over the bulk channel and over
// gRPC): after a committed change moves the volume's member epoch under
// the writer, its next write is refused by the holder as stale, and the
// client reads the volume again and sends it once more, at the new member
// epoch, where it lands. Nothing is written at the old one.
func TestClient_Group_WriteFollowsTheMemberEpoch(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addrs := []string{srvs[1].Addr, srvs[2].Addr}
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(addrs...), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	vol, ids := replicatedVolume(t, ctx, srvs, 0, "pvc-three")
	leader := groupLeader(t, srvs)
	e, err := ctl.Grant(ctx, vol, "n1")
	if err != nil {
		t.Fatal(err)
	}
	engines := map[string]*client.Client{}
	for _, ch := range []struct {
		name string
		bulk bool
	}{{"bulk", true}, {"grpc", false}} {
		c, err := client.Dial(ctx, srvs[0].Addr, srvs[0].NodeToken("n1"), client.WithServers(addrs...), client.WithTimeout(5*time.Second),
			client.WithBulk(ch.bulk))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		engines[ch.name] = c
		if err := c.WriteAt(ctx, vol, "n1", e, 0, []byte("before")); err != nil {
			t.Fatalf("%s: write at member epoch 0: %v", ch.name, err)
		}
	}
	for i, name := range []string{"bulk", "grpc"} {
		// The set changes under the writer: a replica leaves the in-sync
		// set, then comes back.
		change := leader.MarkReplicaInSync
		if i == 0 {
			change = func(ctx context.Context, id, replica string, asked uint64) (raftstate.Volume, error) {
				return leader.MarkReplicaOutOfSync(ctx, id, replica, asked, "", 0)
			}
		}
		if _, err := change(ctx, vol, ids[1], uint64(i)); err != nil {
			t.Fatal(err)
		}
		for _, s := range srvs {
			waitMember(t, s, vol, uint64(i+1))
		}
		if err := engines[name].WriteAt(ctx, vol, "n1", e, 512, []byte(name)); err != nil {
			t.Fatalf("%s: write after the member epoch moved to %d: %v; want it sent again at the new member epoch", name, i+1, err)
		}
		got, err := engines[name].ReadAt(ctx, vol, "n1", e, 512, len(name))
		if err != nil || string(got) != name {
			t.Fatalf("%s: read back %q, %v; want %q", name, got, err, name)
		}
	}
}

// TestClient_WriteAt_StaleTwiceIsTheError: a server that refuses every
// write as at a stale member epoch gets the write twice, the second at the
// member epoch the client read after the first refusal, and the second
// refusal is the write's error (the fake server is in
// write_internal_test.go's style: gRPC only, no bulk channel).
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
	if got := f.members(); len(got) != 2 || got[0] != 0 || got[1] != 7 {
		t.Fatalf("writes carried member epochs %v; want [0 7]: the first at 0, the second at the epoch read again", got)
	}
}
