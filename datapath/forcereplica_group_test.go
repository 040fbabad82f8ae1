package datapath_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// forceFixture is a group of three with vol-…f1 on all three, the leader
// its holder, the last replica out of sync (member epoch 2): the volume
// has quorum until one more server stops.
type forceFixture struct {
	srvs   []*datapathtest.Server
	leader *datapathtest.Server
	ids    []string // the replicas: leader, other in sync, out of sync
	ctl    *client.Client
}

const forceVol = "vol-00000000000000f1"

func startForceFixture(t *testing.T, ctx context.Context) forceFixture {
	t.Helper()
	srvs := datapathtest.StartGroup(t, 3)
	f := forceFixture{srvs: srvs}
	for deadline := time.Now().Add(10 * time.Second); f.leader == nil; time.Sleep(20 * time.Millisecond) {
		for _, s := range srvs {
			if s.Group.IsLeader() {
				f.leader = s
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	servers, err := f.leader.Group.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	self := f.leader.Group.Self()
	f.ids = []string{self}
	for _, s := range servers {
		if s.ID != self {
			f.ids = append(f.ids, s.ID)
		}
	}
	g := f.leader.Group
	if _, err := g.CreateReplicatedVolume(ctx, forceVol, "pvc-force", 1<<20, datapath.AccessRWO, f.ids); err != nil {
		t.Fatal(err)
	}
	if _, err := g.MarkReplicaOutOfSync(ctx, forceVol, f.ids[2], 1, "", 0); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, s := range srvs {
		addrs = append(addrs, s.Addr)
	}
	f.ctl, err = client.Dial(ctx, f.leader.Addr, f.leader.Token, client.WithServers(addrs...), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.ctl.Close() })
	return f
}

// stop stops the server of replica id and waits until the leader sees it
// unreachable.
func (f forceFixture) stop(t *testing.T, id string) {
	t.Helper()
	for _, s := range f.srvs {
		if s.Group.Self() == id {
			s.Stop()
		}
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for _, s := range f.leader.Group.GroupStatus() {
			if s.ID == id && s.Role == datapath.RoleUnreachable {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader does not see server %s unreachable", id)
		}
	}
}

func (f forceFixture) memberEpoch(t *testing.T) uint64 {
	t.Helper()
	v, _, ok := f.leader.Group.AppliedVolume(forceVol)
	if !ok {
		t.Fatal("volume gone")
	}
	return v.MemberEpoch
}

// TestForceReplicas_ControllerOnly: an engine's token is refused, the
// volume unchanged.
func TestForceReplicas_ControllerOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := startForceFixture(t, ctx)
	f.stop(t, f.ids[1])
	eng, err := client.Dial(ctx, f.leader.Addr, f.leader.NodeToken("n1"))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	_, err = eng.ForceReplicas(ctx, datapath.ForceRequest{VolumeID: forceVol, Replicas: f.ids[:1], MemberEpoch: 2, Reason: "test"})
	if status.Code(err) != codes.PermissionDenied || !errors.Is(err, datapath.ErrPermissionDenied) {
		t.Fatalf("an engine's force: %v; want PermissionDenied", err)
	}
	if got := f.memberEpoch(t); got != 2 {
		t.Fatalf("member epoch %d after a refused force; want 2", got)
	}
}

// TestForceReplicas_Leader: the leader refuses a volume that has quorum and
// a forced replica whose server does not answer; a dry run says what it
// would do and changes nothing; a force at a stale member epoch is
// refused; the force commits the forced set with its audit.
func TestForceReplicas_Leader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f := startForceFixture(t, ctx)
	req := datapath.ForceRequest{VolumeID: forceVol, Replicas: f.ids[:1], MemberEpoch: 2, Reason: "server of " + f.ids[1] + " lost its disk", DryRun: true}
	if _, err := f.ctl.ForceReplicas(ctx, req); !errors.Is(err, datapath.ErrReplicaQuorum) || !strings.Contains(err.Error(), "has quorum (2 of 3 in sync") {
		t.Fatalf("force with quorum: %v", err)
	}
	f.stop(t, f.ids[1])

	plan, err := f.ctl.ForceReplicas(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Done || !reflect.DeepEqual(plan.Unreachable, f.ids[1:2]) || !reflect.DeepEqual(plan.Before.Replicas, f.ids) ||
		!reflect.DeepEqual(plan.After.Replicas, f.ids[:1]) || plan.After.MemberEpoch != 3 {
		t.Fatalf("dry run %+v", plan)
	}
	if got := f.memberEpoch(t); got != 2 {
		t.Fatalf("member epoch %d after a dry run; want 2", got)
	}
	if _, ok := f.leader.Group.AppliedForced(forceVol); ok {
		t.Fatal("a dry run recorded a force")
	}

	bad := req
	bad.DryRun, bad.Replicas = false, f.ids[1:2]
	if _, err := f.ctl.ForceReplicas(ctx, bad); !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), "does not answer the leader") {
		t.Fatalf("forcing an unreachable replica: %v", err)
	}
	bad.Replicas, bad.MemberEpoch = f.ids[:1], 1
	if _, err := f.ctl.ForceReplicas(ctx, bad); !errors.Is(err, datapath.ErrStaleMemberEpoch) {
		t.Fatalf("force at a stale member epoch: %v", err)
	}
	bad.MemberEpoch, bad.Reason = 2, ""
	if _, err := f.ctl.ForceReplicas(ctx, bad); !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), "needs a reason") {
		t.Fatalf("force without a reason: %v", err)
	}
	if got := f.memberEpoch(t); got != 2 {
		t.Fatalf("member epoch %d after refused forces; want 2", got)
	}

	req.DryRun = false
	plan, err = f.ctl.ForceReplicas(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Done || plan.After.MemberEpoch != 3 || !reflect.DeepEqual(plan.After.Replicas, f.ids[:1]) {
		t.Fatalf("force %+v", plan)
	}
	a, ok := f.leader.Group.AppliedForced(forceVol)
	want := raftstate.ForceAudit{By: a.By, At: a.At, Reason: req.Reason, Forced: f.ids[:1], ReplicasBefore: f.ids, InSyncBefore: f.ids[:2], MemberEpoch: 3}
	if !ok || !reflect.DeepEqual(a, want) || !strings.HasPrefix(a.By, "the controller (") || time.Since(a.At) > time.Minute {
		t.Fatalf("audit %+v; want %+v by the controller, now", a, want)
	}
}
