package datapath_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
)

// dirtyFiles lists the dirty-region map files in server s's data directory.
func dirtyFiles(t *testing.T, s *datapathtest.Server) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(s.Dir, "volumes", "*.dirty.*"))
	must(t, err)
	return names
}

// TestStoreGroup_DirtyRegionMaps: a volume of three replicas made by
// client.CreateReplicated; one replica taken out of sync by a committed
// change; writes at the other two. After each acknowledged write its
// regions are in the map file on the disk of both in-sync replicas (read
// back as a server at start reads it), and their maps name exactly the
// written regions; the out-of-sync replica keeps none and refuses to report
// one; the replica back in sync: the maps and their files are gone.
func TestStoreGroup_DirtyRegionMaps(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var others []string
	for _, s := range srvs[1:] {
		others = append(others, s.Addr)
	}
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(others...), client.WithTimeout(5*time.Second))
	must(t, err)
	t.Cleanup(func() { _ = ctl.Close() })
	const size = 8 << 20
	v, err := ctl.CreateReplicated(ctx, "pvc-dirty", size, datapath.AccessRWO, 3)
	must(t, err)
	e, err := ctl.Grant(ctx, v.ID, "n1")
	must(t, err)
	var leader int
	for i, s := range srvs {
		if s.Group.IsLeader() {
			leader = i
		}
	}
	cv, _, _ := srvs[leader].Group.AppliedVolume(v.ID)
	set := cv.ReplicaSet()
	var out, in []int // out: the server taken out of sync
	for i, s := range srvs {
		if s.Group.Self() != set.Holder && out == nil {
			out = []int{i}
		} else {
			in = append(in, i)
		}
	}
	away := srvs[out[0]].Group.Self()
	cv, err = srvs[leader].Group.MarkReplicaOutOfSync(ctx, v.ID, away, set.MemberEpoch, "n1", e)
	must(t, err)
	member := cv.MemberEpoch
	waitAllApplied(t, srvs, srvs[leader])

	writes := []struct{ off, n int64 }{
		{0, 4096}, {4096, 4096}, // adjacent: joined
		{1 << 20, 1}, {3<<20 + 4000, 200}, // one byte; across a region boundary
		{1 << 20, 4096}, // again: nothing new
		{size - 4096, 4096},
	}
	for _, w := range writes {
		for _, i := range in {
			must(t, srvs[i].Store.WriteAtMember(v.ID, "n1", e, member, w.off, make([]byte, w.n)))
			// Acknowledged: its regions' marks are on this server's disk.
			files := dirtyFiles(t, srvs[i])
			if len(files) != 1 {
				t.Fatalf("server %d keeps map files %v; want one, of %s", i, files, away)
			}
			ranges, all, err := datapath.ReadDirtyMapFile(files[0])
			must(t, err)
			if !all && !coveredBy(ranges, w.off, w.n) {
				t.Fatalf("server %d acknowledged a write of %d bytes at %d whose regions its map file lacks: %v", i, w.n, w.off, ranges)
			}
		}
		must(t, srvs[out[0]].Store.WriteAtMember(v.ID, "n1", e, member, w.off, make([]byte, w.n)))
	}
	wantRanges := []datapath.DirtyRange{{Off: 0, Len: 8192}, {Off: 1 << 20, Len: 4096}, {Off: 3 << 20, Len: 8192}, {Off: size - 4096, Len: 4096}}
	for _, i := range in {
		got, err := srvs[i].Store.DirtyRegions(v.ID, away, "", 0)
		must(t, err)
		if got.All || !slices.Equal(got.Ranges, wantRanges) || got.Since != member || got.Bytes != 6*4096 {
			t.Errorf("server %d's map of %s: %+v; want exactly %v since member epoch %d", i, away, got, wantRanges, member)
		}
		if _, err := srvs[i].Store.DirtyRegions(v.ID, srvs[i].Group.Self(), "", 0); !errors.Is(err, datapath.ErrInvalidArgument) {
			t.Errorf("server %d: map of an in-sync replica: %v; want ErrInvalidArgument", i, err)
		}
		if _, err := srvs[i].Store.DirtyRegions("vol-00000000000000ff", away, "", 0); !errors.Is(err, datapath.ErrNotFound) {
			t.Errorf("server %d: map of an unknown volume: %v; want ErrNotFound", i, err)
		}
	}
	checkDirtyOverTheWire(t, ctx, srvs, ctl, v.ID, away, in, out[0], e, wantRanges)
	if files := dirtyFiles(t, srvs[out[0]]); len(files) != 0 {
		t.Errorf("the out-of-sync server keeps map files %v", files)
	}
	if _, err := srvs[out[0]].Store.DirtyRegions(v.ID, away, "", 0); !errors.Is(err, datapath.ErrReplicaNotInSync) {
		t.Errorf("the out-of-sync server reports a map: %v; want ErrReplicaNotInSync", err)
	}

	_, err = srvs[leader].Group.MarkReplicaInSync(ctx, v.ID, away, member)
	must(t, err)
	waitAllApplied(t, srvs, srvs[leader])
	for i, s := range srvs {
		if files := dirtyFiles(t, s); len(files) != 0 {
			t.Errorf("server %d keeps map files %v after %s is back in sync", i, files, away)
		}
		if _, err := s.Store.DirtyRegions(v.ID, away, "", 0); !errors.Is(err, datapath.ErrInvalidArgument) {
			t.Errorf("server %d: map of a replica back in sync: %v; want ErrInvalidArgument", i, err)
		}
	}
}

// coveredBy says whether ranges hold every byte of [off, off+n).
func coveredBy(ranges []datapath.DirtyRange, off, n int64) bool {
	for _, r := range ranges {
		if off >= r.Off && off+n <= r.Off+r.Len {
			return true
		}
	}
	return false
}

func waitAllApplied(t *testing.T, srvs []*datapathtest.Server, leader *datapathtest.Server) {
	t.Helper()
	index, term := leader.Group.LastApplied()
	for i, s := range srvs {
		if err := s.Store.WaitApplied(context.Background(), index, term, 10*time.Second); err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
	}
}

// BenchmarkStoreGroup_WriteAt_DirtyMap: 4 KiB writes at an in-sync replica
// of a volume of three, with one replica out of sync, against the same
// writes at a volume all in sync (no map): "first" writes each to a clean
// region (each marks it: a block written and an fdatasync of the map file
// before the write), "steady" to regions already dirty (no I/O for the map).
func BenchmarkStoreGroup_WriteAt_DirtyMap(b *testing.B) {
	srvs := datapathtest.StartGroup(b, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var others []string
	for _, s := range srvs[1:] {
		others = append(others, s.Addr)
	}
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(others...), client.WithTimeout(5*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer ctl.Close()
	const size = 256 << 20
	var leader *datapathtest.Server
	for _, s := range srvs {
		if s.Group.IsLeader() {
			leader = s
		}
	}
	vol := func(name string, out bool) (id string, at *datapath.Store, e, member uint64) {
		v, err := ctl.CreateReplicated(ctx, name, size, datapath.AccessRWO, 3)
		if err != nil {
			b.Fatal(err)
		}
		if e, err = ctl.Grant(ctx, v.ID, "n1"); err != nil {
			b.Fatal(err)
		}
		cv, _, _ := leader.Group.AppliedVolume(v.ID)
		set := cv.ReplicaSet()
		member = set.MemberEpoch
		if out {
			away := set.Replicas[len(set.Replicas)-1]
			if cv, err = leader.Group.MarkReplicaOutOfSync(ctx, v.ID, away, member, "n1", e); err != nil {
				b.Fatal(err)
			}
			member = cv.MemberEpoch
		}
		for _, s := range srvs {
			if s.Group.Self() == set.Holder {
				at = s.Store
			}
		}
		index, term := leader.Group.LastApplied()
		for _, s := range srvs {
			if err := s.Store.WaitApplied(ctx, index, term, 10*time.Second); err != nil {
				b.Fatal(err)
			}
		}
		return v.ID, at, e, member
	}
	p := make([]byte, 4096)
	for _, c := range []struct {
		name string
		out  bool
	}{{"in-sync", false}, {"one-out", true}} {
		id, st, e, member := vol("bench-"+c.name, c.out)
		var clean int64 // regions below it were written
		for _, phase := range []string{"first", "steady"} {
			b.Run(c.name+"/"+phase, func(b *testing.B) {
				if phase == "first" && clean+int64(b.N) > size/4096 {
					b.Skipf("%d more writes do not fit the %d regions left", b.N, size/4096-clean)
				}
				b.SetBytes(4096)
				for i := range b.N {
					r := clean
					if phase == "first" {
						clean++
					} else {
						r = int64(i) % clean
					}
					if err := st.WriteAtMember(id, "n1", e, member, r*4096, p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// checkDirtyOverTheWire reads the maps over gRPC, as the controller and as
// the writer's engine (its node, its live grant's epoch), and the refusals.
func checkDirtyOverTheWire(t *testing.T, ctx context.Context, srvs []*datapathtest.Server, ctl *client.Client, id, away string, in []int, out int, e uint64, want []datapath.DirtyRange) {
	t.Helper()
	for _, i := range in {
		eng, err := client.Dial(ctx, srvs[i].Addr, srvs[i].NodeToken("n1"), client.WithTimeout(5*time.Second))
		must(t, err)
		defer eng.Close()
		for who, c := range map[string]*client.Client{"controller": ctl, "engine of n1": eng} {
			node, epoch := "", uint64(0)
			if c == eng {
				node, epoch = "n1", e
			}
			got, err := c.DirtyRegions(ctx, srvs[i].Addr, id, away, node, epoch)
			if err != nil || !slices.Equal(got.Ranges, want) || got.Bytes != 6*4096 {
				t.Errorf("server %d's map read over the wire by the %s: %+v, %v; want %v", i, who, got, err, want)
			}
		}
		if _, err := eng.DirtyRegions(ctx, srvs[i].Addr, id, away, "n1", e-1); !errors.Is(err, datapath.ErrFenced) {
			t.Errorf("server %d: the map read by n1 at an epoch it holds no grant at: %v; want ErrFenced", i, err)
		}
		// An epoch above the one this server applied is a grant it has not
		// applied yet: send it again, never fenced.
		if _, err := eng.DirtyRegions(ctx, srvs[i].Addr, id, away, "n1", e+1); !errors.Is(err, datapath.ErrNotApplied) {
			t.Errorf("server %d: the map read by n1 at an epoch above the volume's: %v; want ErrNotApplied", i, err)
		}
		if _, err := eng.DirtyRegions(ctx, srvs[i].Addr, id, away, "n2", 0); !errors.Is(err, datapath.ErrPermissionDenied) {
			t.Errorf("server %d: the map read by n1's engine as n2: %v; want ErrPermissionDenied", i, err)
		}
		if _, err := ctl.DirtyRegions(ctx, srvs[i].Addr, id, away, "", 3); !errors.Is(err, datapath.ErrInvalidArgument) {
			t.Errorf("server %d: the map read with an epoch and no node: %v; want ErrInvalidArgument", i, err)
		}
	}
	_, err := ctl.DirtyRegions(ctx, srvs[out].Addr, id, away, "", 0)
	if !errors.Is(err, datapath.ErrReplicaNotInSync) || !strings.Contains(err.Error(), srvs[in[0]].Addr) || !strings.Contains(err.Error(), srvs[in[1]].Addr) {
		t.Errorf("the out-of-sync server's map over the wire: %v; want REPLICA_NOT_IN_SYNC naming the two in-sync replicas", err)
	}
}

// TestStoreGroup_DirtyRegionMaps_Restart: an in-sync replica that took
// writes while another was out of sync restarts as after a crash; once it
// has caught up, its map still holds every region it acknowledged a write
// to (exactly, or all of the volume: never fewer), and it marks new writes.
// Without the rule that a change replayed before catching up never starts
// an empty map, the replayed change that took the replica out started one,
// and the regions written before the restart were gone from it.
func TestStoreGroup_DirtyRegionMaps_Restart(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var others []string
	for _, s := range srvs[1:] {
		others = append(others, s.Addr)
	}
	ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(others...), client.WithTimeout(5*time.Second))
	must(t, err)
	t.Cleanup(func() { _ = ctl.Close() })
	v, err := ctl.CreateReplicated(ctx, "pvc-dirty-restart", 1<<20, datapath.AccessRWO, 3)
	must(t, err)
	e, err := ctl.Grant(ctx, v.ID, "n1")
	must(t, err)
	var leader *datapathtest.Server
	for _, s := range srvs {
		if s.Group.IsLeader() {
			leader = s
		}
	}
	cv, _, _ := leader.Group.AppliedVolume(v.ID)
	set := cv.ReplicaSet()
	// away: a replica that is not the holder; restarted: the in-sync one
	// that is neither the holder nor away (the leader when it must be).
	var away string
	var restarted *datapathtest.Server
	for _, s := range srvs {
		switch id := s.Group.Self(); {
		case id == set.Holder:
		case away == "":
			away = id
		default:
			restarted = s
		}
	}
	cv, err = leader.Group.MarkReplicaOutOfSync(ctx, v.ID, away, set.MemberEpoch, "n1", e)
	must(t, err)
	waitAllApplied(t, srvs, leader)
	must(t, restarted.Store.WriteAtMember(v.ID, "n1", e, cv.MemberEpoch, 64<<10, make([]byte, 4096)))
	restarted.Restart(t)
	var got datapath.DirtyRegions
	for {
		got, err = restarted.Store.DirtyRegions(v.ID, away, "", 0)
		if !errors.Is(err, datapath.ErrNotApplied) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	must(t, err)
	if !got.All && !coveredBy(got.Ranges, 64<<10, 4096) {
		t.Fatalf("after a restart the map lacks a region written before it: %+v", got)
	}
	t.Logf("after the restart: all dirty %v, ranges %v, since member epoch %d", got.All, got.Ranges, got.Since)
	must(t, restarted.Store.WriteAtMember(v.ID, "n1", e, cv.MemberEpoch, 128<<10, make([]byte, 4096)))
	got, err = restarted.Store.DirtyRegions(v.ID, away, "", 0)
	must(t, err)
	if !got.All && !coveredBy(got.Ranges, 128<<10, 4096) {
		t.Fatalf("after a restart a new write is not marked: %+v", got)
	}
}
