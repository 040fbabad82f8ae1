package client_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

const mib = 1 << 20

// startSizedGroup starts three servers with 64, 256 and 128 MiB; server 0
// leads.
func startSizedGroup(t *testing.T) []*datapathtest.Server {
	t.Helper()
	sizes := []int64{64 * mib, 256 * mib, 128 * mib}
	return datapathtest.StartGroupWith(t, 3, datapathtest.GroupConfig{Timing: raftstate.DefaultTiming, Capacity: func(i, _ int) int64 { return sizes[i] }})
}

// holderIndex is the server whose store holds the volume, -1 for none.
func holderIndex(srvs []*datapathtest.Server, id string) int {
	for i, s := range srvs {
		if _, err := s.Store.GetVolume(id); err == nil {
			return i
		}
	}
	return -1
}

// TestClient_Group_CreatePlacesOnTheServerWithMostFreeSpace: a client given
// the servers places each new volume on the server with the most free
// capacity, not on the leader; the volume is open on that server (it
// applied the create) when CreateVolume returns, takes I/O there, and a
// create again of its name returns it.
func TestClient_Group_CreatePlacesOnTheServerWithMostFreeSpace(t *testing.T) {
	srvs := startSizedGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := controllerClient(t, srvs)
	var ids []string
	for _, step := range []struct {
		name string
		size int64
		want int // free: 64, 256, 128 MiB at the start
	}{
		{"a", 64 * mib, 1},  // then 64, 192, 128
		{"b", 96 * mib, 1},  // then 64, 96, 128
		{"c", 16 * mib, 2},  // then 64, 96, 112
		{"d", 100 * mib, 2}, // then 64, 96, 12
		{"e", 8 * mib, 1},
	} {
		v, err := c.CreateVolume(ctx, step.name, step.size, datapath.AccessRWO)
		if err != nil {
			t.Fatalf("create %s: %v", step.name, err)
		}
		if got := holderIndex(srvs, v.ID); got != step.want {
			t.Fatalf("volume %s of %d MiB is on server %d when CreateVolume returned; want server %d, the one with the most free space", step.name, step.size/mib, got, step.want)
		}
		ids = append(ids, v.ID)
	}
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		again, err := c.CreateVolume(ctx, name, []int64{64, 96, 16, 100, 8}[i]*mib, datapath.AccessRWO)
		if err != nil || again.ID != ids[i] {
			t.Fatalf("create %s again: %+v, %v; want %s", name, again, err, ids[i])
		}
	}
	a, _ := srvs[1].Store.ListVolumes()
	e, err := c.Grant(ctx, a[0].ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := client.Dial(ctx, srvs[0].Addr, srvs[0].NodeToken("n1"), client.WithServers(srvs[1].Addr, srvs[2].Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := eng.WriteAt(ctx, a[0].ID, "n1", e, 0, []byte("placed")); err != nil {
		t.Fatalf("write to a placed volume: %v", err)
	}
	if got, err := eng.ReadAt(ctx, a[0].ID, "n1", e, 0, 6); err != nil || string(got) != "placed" {
		t.Fatalf("read back: %q, %v", got, err)
	}
}

// TestClient_Group_CreateBadInputAndNoSpace: bad input is refused before
// any server is asked; a volume no server can hold gets ErrNoSpace from the
// server with the most free space; neither leaves a volume, a promise or a
// data file anywhere.
func TestClient_Group_CreateBadInputAndNoSpace(t *testing.T) {
	srvs := startSizedGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := controllerClient(t, srvs)
	for _, tc := range []struct {
		name string
		size int64
		mode datapath.AccessMode
	}{
		{"", mib, datapath.AccessRWO},
		{"tab\there", mib, datapath.AccessRWO},
		{"ok", 0, datapath.AccessRWO},
		{"ok", -1, datapath.AccessRWO},
		{"ok", mib, "rwz"},
	} {
		if _, err := c.CreateVolume(ctx, tc.name, tc.size, tc.mode); !errors.Is(err, datapath.ErrInvalidArgument) {
			t.Errorf("create %q of %d bytes, mode %q: %v; want ErrInvalidArgument", tc.name, tc.size, tc.mode, err)
		}
	}
	_, err := c.CreateVolume(ctx, "huge", 300*mib, datapath.AccessRWO)
	if !errors.Is(err, datapath.ErrNoSpace) || !strings.Contains(err.Error(), srvs[1].Addr) {
		t.Fatalf("create of a volume no server can hold: %v; want ErrNoSpace from the roomiest server, %s", err, srvs[1].Addr)
	}
	for i, s := range srvs {
		if vs, _ := s.Store.ListVolumes(); len(vs) != 0 {
			t.Errorf("server %d holds %+v", i, vs)
		}
		entries, _ := os.ReadDir(s.Dir + "/volumes")
		if len(entries) != 0 {
			t.Errorf("server %d has data files %v", i, entries)
		}
	}
	if n, err := srvs[1].Store.Capacity(); err != nil || n != 256*mib {
		t.Errorf("server 1 can promise %d (%v) after the refused create; want all 256 MiB", n, err)
	}
}

// TestStore_PlacedCreate_PreparedFileAndBadInput: a prepared volume is a
// durable data file no volume of the group names, its size promised; a
// prepare again of the name returns it; the commit at the leader naming
// its server makes that server open it. The commit refuses a server that is
// not a member, a bad id, and no server; a prepare at a store without a
// control group is refused.
func TestStore_PlacedCreate_PreparedFileAndBadInput(t *testing.T) {
	srvs := startSizedGroup(t)
	p, server, err := srvs[2].Store.PrepareVolume("prep", 8*mib, datapath.AccessRWO)
	if err != nil || server != "datapath-2" {
		t.Fatalf("prepare: %s, %v", server, err)
	}
	if _, err := os.Stat(srvs[2].Store.DataFile(p.ID)); err != nil {
		t.Fatalf("the prepared data file: %v", err)
	}
	if holderIndex(srvs, p.ID) != -1 {
		t.Fatal("a prepared volume is open before its create is committed")
	}
	if n, _ := srvs[2].Store.Capacity(); n != 120*mib {
		t.Fatalf("server 2 can promise %d MiB with 8 MiB prepared; want 120", n/mib)
	}
	if again, _, err := srvs[2].Store.PrepareVolume("prep", 8*mib, datapath.AccessRWO); err != nil || again.ID != p.ID {
		t.Fatalf("prepare again: %+v, %v; want %s", again, err, p.ID)
	}
	if _, _, err := srvs[2].Store.PrepareVolume("prep", 9*mib, datapath.AccessRWO); !errors.Is(err, datapath.ErrAlreadyExists) {
		t.Fatalf("prepare again with another size: %v; want ErrAlreadyExists", err)
	}
	leader := srvs[0].Store
	for _, tc := range []struct{ id, server, want string }{
		{p.ID, "datapath-9", "not a member"},
		{"vol-xyz", "datapath-2", "volume id"},
		{p.ID, "", "no server named"},
	} {
		if _, err := leader.CreatePlacedVolume(tc.id, "prep", 8*mib, datapath.AccessRWO, tc.server); !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("placed create of %q on %q: %v; want ErrInvalidArgument saying %q", tc.id, tc.server, err, tc.want)
		}
	}
	v, err := leader.CreatePlacedVolume(p.ID, "prep", 8*mib, datapath.AccessRWO, "datapath-2")
	if err != nil || v.ID != p.ID {
		t.Fatalf("placed create: %+v, %v", v, err)
	}
	for deadline := time.Now().Add(10 * time.Second); holderIndex(srvs, p.ID) != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("server 2 did not open the volume it prepared once the group created it")
		}
	}
	if n, _ := srvs[2].Store.Capacity(); n != 120*mib {
		t.Fatalf("server 2 can promise %d MiB with the 8 MiB volume created; want 120", n/mib)
	}
	plain, err := datapath.Open(t.TempDir(), datapath.Options{Capacity: 64 * mib})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, _, err := plain.PrepareVolume("x", mib, datapath.AccessRWO); !errors.Is(err, datapath.ErrInvalidArgument) {
		t.Fatalf("prepare at a store without a control group: %v; want ErrInvalidArgument", err)
	}
}

// TestClient_Group_BootstrappedFollowerThatNeverLedTakesACreate: three
// servers bootstrapped together with each one's datapath address in the
// peer list are members from the start, so a create lands on the roomiest
// server even when it is a follower that never led (before, only servers
// that had led were recorded, and placement kept to them).
func TestClient_Group_BootstrappedFollowerThatNeverLedTakesACreate(t *testing.T) {
	roomiest := -1
	srvs := datapathtest.StartGroupWith(t, 3, datapathtest.GroupConfig{Timing: raftstate.DefaultTiming, Bootstrap: true,
		Capacity: func(i, leader int) int64 {
			switch {
			case i == leader:
				return 64 * mib
			case roomiest < 0:
				roomiest = i
				return 256 * mib
			}
			return 128 * mib
		}})
	leader := -1
	for i, s := range srvs {
		if s.Group.IsLeader() {
			leader = i
		}
	}
	if leader < 0 || roomiest < 0 || roomiest == leader {
		t.Fatalf("leader %d, roomiest %d: want a leader and another server the roomiest", leader, roomiest)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := controllerClient(t, srvs)
	v, err := c.CreateVolume(ctx, "a", 16*mib, datapath.AccessRWO)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if got := holderIndex(srvs, v.ID); got != roomiest {
		t.Fatalf("volume a is on server %d; want server %d, the roomiest (a follower that never led; server %d leads)", got, roomiest, leader)
	}
	if !srvs[leader].Group.IsLeader() {
		t.Fatal("the leadership moved during the test; the follower may have led")
	}
}
