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

// replicated is a volume of three copies on three servers, granted to
// node n1: srvs[holder] holds it; ids are its replicas' server ids, the
// holder's first, and at[id] the server of each.
type replicated struct {
	srvs   []*datapathtest.Server
	ctl    *client.Client
	vol    string
	ids    []string
	at     map[string]*datapathtest.Server
	epoch  uint64
	holder *datapathtest.Server
}

// startReplicated starts three servers and creates a volume named name
// with a copy on each (CreateReplicated), granted to n1.
func startReplicated(t testing.TB, ctx context.Context, name string) *replicated {
	return startReplicas(t, ctx, datapathtest.StartGroup(t, 3), name, 1<<20, 3)
}

// startReplicas creates on srvs a volume named name of size bytes with n
// copies (CreateReplicated), granted to n1.
func startReplicas(t testing.TB, ctx context.Context, srvs []*datapathtest.Server, name string, size int64, n int) *replicated {
	t.Helper()
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(srvs[1].Addr, srvs[2].Addr), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	v, err := ctl.CreateReplicated(ctx, name, size, datapath.AccessRWO, n)
	if err != nil {
		t.Fatal(err)
	}
	r := &replicated{srvs: srvs, ctl: ctl, vol: v.ID, at: map[string]*datapathtest.Server{}}
	vols, err := ctl.GroupVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, gv := range vols {
		if gv.ID == v.ID {
			r.ids = gv.Replicas
			if len(r.ids) == 0 {
				r.ids = []string{gv.Server}
			}
		}
	}
	for _, s := range srvs {
		r.at[s.Group.Self()] = s
	}
	if len(r.ids) != n {
		t.Fatalf("volume %s has replicas %v; want %d", v.ID, r.ids, n)
	}
	r.holder = r.at[r.ids[0]]
	if r.epoch, err = ctl.Grant(ctx, v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	return r
}

// engine dials n1's engine at the holder, given the other servers.
func (r *replicated) engine(t testing.TB, ctx context.Context, opts ...client.Option) *client.Client {
	t.Helper()
	var others []string
	for _, s := range r.srvs {
		if s != r.holder {
			others = append(others, s.Addr)
		}
	}
	c, err := client.Dial(ctx, r.holder.Addr, r.holder.NodeToken("n1"), append([]client.Option{client.WithServers(others...), client.WithTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestClient_Group_WriteFollowsTheMemberEpoch: three servers; a volume
// with a copy on each. An engine's writes carry the member epoch of the
// set it read (over the bulk channel and over gRPC): after a committed
// change moves the volume's member epoch under the writer, its next write
// is refused as stale, and the client reads the volume again and sends it
// once more, at the new member epoch, where it lands.
func TestClient_Group_WriteFollowsTheMemberEpoch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := startReplicated(t, ctx, "pvc-three")
	engines := map[string]*client.Client{}
	for _, name := range []string{"bulk", "grpc"} {
		c := r.engine(t, ctx, client.WithBulk(name == "bulk"))
		engines[name] = c
		if err := c.WriteAt(ctx, r.vol, "n1", r.epoch, 0, []byte("before")); err != nil {
			t.Fatalf("%s: write at member epoch 1 (a volume of three copies starts there): %v", name, err)
		}
	}
	leader := groupLeader(t, r.srvs)
	for i, name := range []string{"bulk", "grpc"} {
		// The set changes under the writer: a replica leaves the in-sync
		// set, then comes back.
		change := leader.MarkReplicaInSync
		if i == 0 {
			change = func(ctx context.Context, id, replica string, asked uint64) (raftstate.Volume, error) {
				return leader.MarkReplicaOutOfSync(ctx, id, replica, asked, "", 0)
			}
		}
		if _, err := change(ctx, r.vol, r.ids[1], uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		for _, s := range r.srvs {
			waitMember(t, s, r.vol, uint64(i+2))
		}
		if err := engines[name].WriteAt(ctx, r.vol, "n1", r.epoch, 512, []byte(name)); err != nil {
			t.Fatalf("%s: write after the member epoch moved to %d: %v; want it sent again at the new member epoch", name, i+2, err)
		}
		got, err := engines[name].ReadAt(ctx, r.vol, "n1", r.epoch, 512, len(name))
		if err != nil || string(got) != name {
			t.Fatalf("%s: read back %q, %v; want %q", name, got, err, name)
		}
	}
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

// TestClient_WriteAt_ServerFromBeforeEngineReads: a server from before
// engines may read replica sets refuses the engine GroupVolumes; it offers
// no volume more than one copy to write to, so the engine writes to it at
// member epoch 0, as before, and the write is taken.
func TestClient_WriteAt_ServerFromBeforeEngineReads(t *testing.T) {
	f := startFakeServer(t, &staleServer{older: true})
	c, err := client.Dial(context.Background(), f.addr, "node-token-0123456789", client.WithTimeout(5*time.Second), client.WithBulk(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteAt(context.Background(), "vol-0123456789abcdef", "n1", 1, 0, []byte("x")); err != nil {
		t.Fatalf("write to a server that refuses the engine GroupVolumes: %v; want it taken at member epoch 0", err)
	}
	if got := f.members(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("writes carried member epochs %v; want [0]", got)
	}
}
