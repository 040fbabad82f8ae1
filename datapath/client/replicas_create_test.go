package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// dialGroup is the controller's client of a group of servers, dialed at
// the first.
func dialGroup(t *testing.T, ctx context.Context, srvs []*datapathtest.Server, opts ...client.Option) *client.Client {
	t.Helper()
	var addrs []string
	for _, s := range srvs[1:] {
		addrs = append(addrs, s.Addr)
	}
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, append([]client.Option{client.WithServers(addrs...), client.WithTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	return ctl
}

// TestClient_CreateReplicated: a volume created with three replicas has
// its data file on each of the three servers, open there, one id, and the
// group records the three in sync at member epoch 1; its writer's engine
// writes at each replica over the wire; a create again by name is the same
// volume.
func TestClient_CreateReplicated(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl := dialGroup(t, ctx, srvs)
	v, err := ctl.CreateReplicated(ctx, "pvc-r", 1<<20, datapath.AccessRWO, 3)
	if err != nil {
		t.Fatal(err)
	}
	vols, err := ctl.GroupVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 || vols[0].ID != v.ID || len(vols[0].Replicas) != 3 || !slices.Equal(vols[0].InSync, vols[0].Replicas) || vols[0].MemberEpoch != 1 || vols[0].Server != vols[0].Replicas[0] {
		t.Fatalf("the group's volumes: %+v; want %s with three replicas, all in sync, its server first", vols, v.ID)
	}
	var ids []string
	for _, s := range srvs {
		ids = append(ids, s.Group.Self())
	}
	if got := slices.Sorted(slices.Values(vols[0].Replicas)); !slices.Equal(got, ids) {
		t.Fatalf("replicas %v; want one on each server %v", vols[0].Replicas, ids)
	}
	again, err := ctl.CreateReplicated(ctx, "pvc-r", 1<<20, datapath.AccessRWO, 3)
	if err != nil || again.ID != v.ID {
		t.Fatalf("the create again: %+v, %v; want %s", again, err, v.ID)
	}
	e, err := ctl.Grant(ctx, v.ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range srvs {
		if _, err := os.Stat(filepath.Join(s.Dir, "volumes", v.ID+".img")); err != nil {
			t.Fatalf("server %d's data file: %v", i, err)
		}
		eng, err := client.Dial(ctx, s.Addr, s.NodeToken("n1"), client.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer eng.Close()
		if err := eng.WriteAt(ctx, v.ID, "n1", e, int64(i), []byte{'a' + byte(i)}); err != nil {
			t.Fatalf("the writer's write at replica %d: %v", i, err)
		}
		if got, err := s.Store.ReadAt(v.ID, "n1", e, int64(i), 1); err != nil || got[0] != 'a'+byte(i) {
			t.Fatalf("replica %d has %q, %v; want the write", i, got, err)
		}
	}
}

// TestClient_CreateReplicated_BadInput: a replica count outside 1 to 5, or
// above the servers the group records, is refused saying what is allowed,
// and nothing is made on any server.
func TestClient_CreateReplicated_BadInput(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl := dialGroup(t, ctx, srvs)
	for _, tc := range []struct {
		r    int
		want string
	}{
		{0, "with 0 replicas; 1 to 5 are allowed"},
		{6, "with 6 replicas; 1 to 5 are allowed"},
		{4, "4 replicas asked, but the control group records 3 servers"},
		{5, "5 replicas asked, but the control group records 3 servers"},
	} {
		_, err := ctl.CreateReplicated(ctx, "pvc-bad", 1<<20, datapath.AccessRWO, tc.r)
		if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("r=%d: %v; want ErrInvalidArgument containing %q", tc.r, err, tc.want)
		}
	}
	if _, err := ctl.CreateReplicated(ctx, "", 1<<20, datapath.AccessRWO, 3); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Errorf("a bad name: %v; want ErrInvalidArgument", err)
	}
	for i, s := range srvs {
		if es, _ := os.ReadDir(filepath.Join(s.Dir, "volumes")); len(es) != 0 {
			t.Errorf("server %d has %d data files after refused creates; want none", i, len(es))
		}
	}
	if vols, err := ctl.GroupVolumes(ctx); err != nil || len(vols) != 0 {
		t.Errorf("the group's volumes: %+v, %v; want none", vols, err)
	}
}

// TestStore_PrepareReplica_IDMismatch: a replica is prepared under the id
// its holder drew; a name this server prepared under another id, an id
// whose data file exists here, and a malformed id are refused saying so,
// nothing made; the same prepare again is the same volume.
func TestStore_PrepareReplica_IDMismatch(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 1)
	s := srvs[0].Store
	const one, two = "vol-0000000000000001", "vol-0000000000000002"
	v, err := s.PrepareReplica(one, "pvc-x", 1<<20, datapath.AccessRWO)
	if err != nil || v.ID != one {
		t.Fatalf("prepare: %+v, %v", v, err)
	}
	if again, err := s.PrepareReplica(one, "pvc-x", 1<<20, datapath.AccessRWO); err != nil || again.ID != one {
		t.Fatalf("prepare again: %+v, %v; want %s", again, err, one)
	}
	_, err = s.PrepareReplica(two, "pvc-x", 1<<20, datapath.AccessRWO)
	if !errors.Is(err, datapath.ErrAlreadyExists) || !strings.Contains(err.Error(), "prepared on this server as "+one+"; asked to prepare a replica of it as "+two) {
		t.Fatalf("prepare the name under another id: %v; want ErrAlreadyExists naming both ids", err)
	}
	_, err = s.PrepareReplica(one, "pvc-y", 1<<20, datapath.AccessRWO)
	if !errors.Is(err, datapath.ErrAlreadyExists) || !strings.Contains(err.Error(), "that id is prepared for another volume") {
		t.Fatalf("prepare another name under a prepared id: %v; want ErrAlreadyExists", err)
	}
	if _, err := s.PrepareReplica("vol-nope", "pvc-z", 1<<20, datapath.AccessRWO); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Fatalf("a malformed id: %v; want ErrInvalidArgument", err)
	}
	if es, _ := os.ReadDir(filepath.Join(srvs[0].Dir, "volumes")); len(es) != 1 {
		t.Fatalf("%d data files; want the one prepared", len(es))
	}
}

// TestClient_CreateReplicated_TheServerDialedIsDown: with the first server
// of the client's list stopped, the group's servers are read from another
// (AnyServers), and a volume of two copies is placed on the two that answer.
func TestClient_CreateReplicated_TheServerDialedIsDown(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl := dialGroup(t, ctx, srvs)
	stopped := srvs[0].Group.Self()
	srvs[0].Stop()
	rep, err := ctl.AnyServers(ctx)
	if err != nil || len(rep.Servers) != 3 {
		t.Fatalf("AnyServers with the server dialed down: %d servers, %v; want the group's 3", len(rep.Servers), err)
	}
	v, err := ctl.CreateReplicated(ctx, "pvc-two", 1<<20, datapath.AccessRWO, 2)
	if err != nil {
		t.Fatalf("create 2 copies with the server dialed down: %v", err)
	}
	vols, err := ctl.GroupVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(vols, func(gv datapath.GroupVolume) bool { return gv.ID == v.ID })
	if i < 0 {
		t.Fatalf("volume %s not among the group's volumes %v", v.ID, vols)
	}
	if gv := vols[i]; len(gv.Replicas) != 2 || slices.Contains(gv.Replicas, stopped) {
		t.Errorf("replicas %v; want 2, none on the stopped server %s", gv.Replicas, stopped)
	}
}
