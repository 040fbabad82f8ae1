package datapath_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// replicated is a group of three servers and one volume of which the
// servers at order hold replicas (the first its holder), its data files
// made by hand on each, as a placed create leaves them.
type replicated struct {
	srvs   []*datapathtest.Server
	leader *raftstate.Group
	id     string
	ids    []string // server ids, srvs' order
	// ctl is the controller's client of the group: its changes are
	// confirmed with the volumes' replicas.
	ctl *client.Client
}

func startReplicated(t *testing.T, id string, order ...int) *replicated {
	t.Helper()
	return startReplicatedOn(t, 3, id, order...)
}

// startReplicatedOn is startReplicated with n servers.
func startReplicatedOn(t *testing.T, n int, id string, order ...int) *replicated {
	t.Helper()
	return startReplicatedIn(t, datapathtest.StartGroup(t, n), id, order...)
}

// startReplicatedIn is startReplicated on the servers of a group.
func startReplicatedIn(t *testing.T, srvs []*datapathtest.Server, id string, order ...int) *replicated {
	t.Helper()
	r := &replicated{srvs: srvs, id: id}
	for _, s := range r.srvs {
		r.ids = append(r.ids, s.Group.Self())
		if s.Group.IsLeader() {
			r.leader = s.Group
		}
	}
	if r.leader == nil {
		t.Fatal("no leader")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	var others []string
	for _, s := range r.srvs[1:] {
		others = append(others, s.Addr)
	}
	r.ctl, err = client.Dial(ctx, r.srvs[0].Addr, r.srvs[0].Token, client.WithServers(others...), client.WithTimeout(5*time.Second))
	must(t, err)
	t.Cleanup(func() { _ = r.ctl.Close() })
	r.create(t, id, order...)
	return r
}

// create makes the data file of id on each server of order and commits the
// volume with them as its replicas, applied by all.
func (r *replicated) create(t *testing.T, id string, order ...int) {
	t.Helper()
	var replicas []string
	for _, i := range order {
		must(t, os.WriteFile(filepath.Join(r.srvs[i].Dir, "volumes", id+".img"), nil, 0o600))
		must(t, os.Truncate(filepath.Join(r.srvs[i].Dir, "volumes", id+".img"), 1<<20))
		replicas = append(replicas, r.ids[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.leader.CreateReplicatedVolume(ctx, id, "pvc-"+id[len(id)-2:], 1<<20, datapath.AccessRWO, replicas); err != nil {
		t.Fatal(err)
	}
	r.applied(t)
}

// applied waits until every server applied what the leader did.
func (r *replicated) applied(t *testing.T) {
	t.Helper()
	index, term := r.leader.LastApplied()
	for i, s := range r.srvs {
		if err := s.Store.WaitApplied(context.Background(), index, term, 10*time.Second); err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
	}
}

func (r *replicated) leaderStore() *datapath.Store {
	for _, s := range r.srvs {
		if s.Group == r.leader {
			return s.Store
		}
	}
	return nil
}

// TestStoreGroup_ReplicasTakeCheckedWrites: every replica of a volume, not
// only its holder, takes the writer's writes and flushes and serves its
// reads, with the holder's checks from its own applied state: a write at a
// stale member epoch is refused at each (STALE_MEMBER_EPOCH), one at a newer
// member epoch waits for this server to apply it, a fenced node is refused
// at each (FENCED); a replica out of sync refuses reads naming the in-sync
// replicas' addresses; a server outside the set refuses as not holder; each
// replica reports the table the group applied.
func TestStoreGroup_ReplicasTakeCheckedWrites(t *testing.T) {
	datapath.SetMemberEpochWait(t, 300*time.Millisecond)
	const id, two = "vol-00000000000000aa", "vol-00000000000000bb"
	r := startReplicated(t, id, 0, 1, 2)
	r.create(t, two, 0, 1) // server 2 holds no replica of it
	ldr := r.leaderStore()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := ldr.Grant(id, "n1"); !errors.Is(err, datapath.ErrHeldElsewhere) || !strings.Contains(err.Error(), "a majority of them must apply") {
		t.Fatalf("a grant of a replicated volume the leader holds, for a caller that does not confirm: %v; want ErrHeldElsewhere", err)
	}
	e, err := r.ctl.Grant(ctx, id, "n1")
	must(t, err)
	r.applied(t)
	want, err := ldr.Attachments(id)
	must(t, err)
	for i, s := range r.srvs {
		data := []byte{'a' + byte(i)}
		if err := s.Store.WriteAtMember(id, "n1", e, 1, int64(i), data); err != nil {
			t.Fatalf("write at replica %d: %v", i, err)
		}
		must(t, s.Store.Flush(id, "n1", e))
		if got, err := s.Store.ReadAt(id, "n1", e, int64(i), 1); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read at replica %d: %q, %v; want %q", i, got, err, data)
		}
		if got, err := s.Store.Attachments(id); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("attachments at replica %d: %+v, %v; want the leader's %+v", i, got, err, want)
		}
		if err := s.Store.WriteAtMember(id, "n1", e-1, 1, 0, data); !errors.Is(err, datapath.ErrFenced) {
			t.Fatalf("write at an older attach epoch at replica %d: %v; want ErrFenced", i, err)
		}
	}
	if err := r.srvs[2].Store.WriteAt(two, "n1", e, 0, []byte("x")); !errors.Is(err, datapath.ErrNotHolder) {
		t.Fatalf("write at a server outside the replica set: %v; want ErrNotHolder", err)
	}

	if _, err := r.leader.MarkReplicaOutOfSync(ctx, id, r.ids[2], 1, "", 0); err != nil {
		t.Fatal(err)
	}
	r.applied(t)
	for i, s := range r.srvs {
		err := s.Store.WriteAtMember(id, "n1", e, 1, 0, []byte("z"))
		if !errors.Is(err, datapath.ErrStaleMemberEpoch) || !strings.Contains(err.Error(), "this server applied member epoch 2") {
			t.Fatalf("write at member epoch 1 at replica %d: %v; want ErrStaleMemberEpoch naming member epoch 2", i, err)
		}
		must(t, s.Store.WriteAtMember(id, "n1", e, 2, 0, []byte("1")))
		start := time.Now()
		err = s.Store.WriteAtMember(id, "n1", e, 3, 0, []byte("2"))
		if !errors.Is(err, datapath.ErrStaleMemberEpoch) || !strings.Contains(err.Error(), "waited 300ms") || time.Since(start) < 300*time.Millisecond {
			t.Fatalf("write at member epoch 3, never applied, at replica %d: %v after %s; want ErrStaleMemberEpoch after waiting 300ms", i, err, time.Since(start))
		}
	}
	for i, s := range r.srvs[:2] {
		if got, err := s.Store.ReadAt(id, "n1", e, 0, 1); err != nil || string(got) != "1" {
			t.Fatalf("read at in-sync replica %d: %q, %v; want \"1\"", i, got, err)
		}
	}
	got, err := r.srvs[2].Store.ReadAt(id, "n1", e, 0, 1)
	var ns *datapath.ReplicaNotInSyncError
	if !errors.As(err, &ns) || got != nil || !slices.Equal(ns.InSyncAddresses, []string{r.srvs[0].Addr, r.srvs[1].Addr}) {
		t.Fatalf("read at the replica out of sync: %q, %v; want ErrReplicaNotInSync naming %s and %s, nothing read", got, err, r.srvs[0].Addr, r.srvs[1].Addr)
	}
	if !errors.Is(datapath.FromStatus(datapath.ToStatus(err)), datapath.ErrReplicaNotInSync) {
		t.Fatalf("over gRPC the refusal is %v; want ErrReplicaNotInSync", datapath.FromStatus(datapath.ToStatus(err)))
	}

	// A write at the next member epoch waits for this server to apply it.
	done := make(chan error, 1)
	datapath.SetMemberEpochWait(t, 5*time.Second)
	go func() { done <- r.srvs[1].Store.WriteAtMember(id, "n1", e, 3, 0, []byte("2")) }()
	select { // it cannot be taken before the change is applied
	case err := <-done:
		t.Fatalf("a write at member epoch 3 returned (%v) before that member epoch was committed; want it waiting", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := r.leader.MarkReplicaInSync(ctx, id, r.ids[2], 2); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a write at the member epoch committed meanwhile: %v; want it taken once applied", err)
	}

	_, err = r.ctl.Fence(ctx, id, "n1")
	must(t, err)
	r.applied(t)
	for i, s := range r.srvs {
		if err := s.Store.WriteAtMember(id, "n1", e, 3, 0, []byte("f")); !errors.Is(err, datapath.ErrFenced) {
			t.Fatalf("a fenced node's write at replica %d: %v; want ErrFenced", i, err)
		}
		if err := s.Store.Flush(id, "n1", e); !errors.Is(err, datapath.ErrFenced) {
			t.Fatalf("a fenced node's flush at replica %d: %v; want ErrFenced", i, err)
		}
	}
}

// TestStoreGroup_ReplicaFilesSparedThenDeleted: the data files of a
// volume's replicas are not abandoned files, on the leader that holds a
// replica but not the volume, while an old file no volume names is
// removed; a delete committed by the group removes the file on every
// replica.
func TestStoreGroup_ReplicaFilesSparedThenDeleted(t *testing.T) {
	const id, orphan = "vol-00000000000000aa", "vol-00000000000000ff"
	r := startReplicated(t, id, 1, 0, 2) // server 0 leads; server 1 holds
	old := time.Now().Add(-time.Hour)
	for _, s := range r.srvs {
		must(t, os.Chtimes(filepath.Join(s.Dir, "volumes", id+".img"), old, old))
	}
	must(t, os.WriteFile(filepath.Join(r.srvs[0].Dir, "volumes", orphan+".img"), nil, 0o600))
	must(t, os.Chtimes(filepath.Join(r.srvs[0].Dir, "volumes", orphan+".img"), old, old))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	removed, err := r.leaderStore().RemoveAbandoned(ctx)
	if err != nil || !slices.Equal(removed, []string{orphan}) {
		t.Fatalf("abandoned files removed: %v, %v; want only %s", removed, err, orphan)
	}
	for i, s := range r.srvs {
		if _, err := os.Stat(filepath.Join(s.Dir, "volumes", id+".img")); err != nil {
			t.Fatalf("replica %d's data file after the sweep: %v", i, err)
		}
	}
	must(t, r.ctl.DeleteVolume(ctx, id))
	r.applied(t)
	for i, s := range r.srvs {
		if _, err := os.Stat(filepath.Join(s.Dir, "volumes", id+".img")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("replica %d's data file after the delete: %v; want it removed", i, err)
		}
		if _, err := s.Store.GetVolume(id); !errors.Is(err, datapath.ErrNotFound) {
			t.Fatalf("replica %d after the delete: %v; want ErrNotFound", i, err)
		}
	}
}

// TestStoreGroup_ReplicaMovedAway: a server whose replica the group
// replaced by another server's stops serving the volume (ErrNotHolder, as
// any server outside the set) and removes its data file as it applies the
// change; it keeps it while the set still names it (out of sync); the
// others go on.
func TestStoreGroup_ReplicaMovedAway(t *testing.T) {
	const id = "vol-00000000000000aa"
	r := startReplicatedOn(t, 4, id, 0, 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e, err := r.ctl.Grant(ctx, id, "n1")
	must(t, err)
	if _, err := r.leader.MarkReplicaOutOfSync(ctx, id, r.ids[2], 1, "", 0); err != nil {
		t.Fatal(err)
	}
	r.applied(t)
	if _, err := os.Stat(filepath.Join(r.srvs[2].Dir, "volumes", id+".img")); err != nil {
		t.Fatalf("the data file of a replica out of sync, still named: %v; want it kept", err)
	}
	if _, err := r.leader.ReplaceReplica(ctx, id, r.ids[2], r.ids[3], 2); err != nil {
		t.Fatal(err)
	}
	r.applied(t)
	if err := r.srvs[2].Store.WriteAtMember(id, "n1", e, 3, 0, []byte("x")); !errors.Is(err, datapath.ErrNotHolder) {
		t.Fatalf("a write at the server whose replica moved away: %v; want ErrNotHolder", err)
	}
	if _, err := os.Stat(filepath.Join(r.srvs[2].Dir, "volumes", id+".img")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the moved replica's data file: %v; want it removed once the server applied the move", err)
	}
	for _, i := range []int{0, 1} {
		if err := r.srvs[i].Store.WriteAtMember(id, "n1", e, 3, 0, []byte("y")); err != nil {
			t.Fatalf("a write at replica %d after the move: %v", i, err)
		}
	}
	if err := r.srvs[3].Store.WriteAtMember(id, "n1", e, 3, 0, []byte("z")); !errors.Is(err, datapath.ErrNotApplied) {
		t.Fatalf("a write at the new replica, which has no copy yet: %v; want ErrNotApplied", err)
	}
}
