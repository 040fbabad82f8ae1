package client_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	"github.com/vigil-storage/vigil/datapath/raftstate"
)

// unconfirming is a server's control group member that, while hold is set,
// does not confirm that it applied anything (WaitApplied waits out its
// bound), as a server that is slow or cut off from the client would not,
// though it stays in the group.
type unconfirming struct {
	*raftstate.Group
	hold *atomic.Bool
}

func (u unconfirming) WaitApplied(ctx context.Context, index, term uint64) error {
	if u.hold.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return u.Group.WaitApplied(ctx, index, term)
}

// followers are the indexes of srvs' servers that do not lead.
func followers(srvs []*datapathtest.Server) []int {
	var out []int
	for i, s := range srvs {
		if !s.Group.IsLeader() {
			out = append(out, i)
		}
	}
	return out
}

// TestClient_Group_ReplicatedChange_ConfirmedByAMajority: a fence, a grant
// to a new node and a release of a volume with three replicas are done once
// two of the three replicas confirmed they applied them, without waiting
// for the third; with two of the three not confirming, none is reported
// done (ErrNotApplied naming both), though the group committed it.
func TestClient_Group_ReplicatedChange_ConfirmedByAMajority(t *testing.T) {
	holds := make([]atomic.Bool, 3)
	srvs := datapathtest.StartGroupWrapped(t, 3, datapathtest.GroupTiming, func(i int, g *raftstate.Group) datapath.Control {
		return unconfirming{Group: g, hold: &holds[i]}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const applyWait = 3 * time.Second
	ctl := dialGroup(t, ctx, srvs, client.WithApplyWait(applyWait))
	v, err := ctl.CreateReplicated(ctx, "pvc-r", 1<<20, datapath.AccessRWO, 3)
	if err != nil {
		t.Fatal(err)
	}
	e, err := ctl.Grant(ctx, v.ID, "n1")
	if err != nil {
		t.Fatal(err)
	}
	f := followers(srvs)
	if len(f) != 2 {
		t.Fatalf("followers %v", f)
	}

	holds[f[0]].Store(true)
	start := time.Now()
	if fe, err := ctl.Fence(ctx, v.ID, "n1"); err != nil || fe <= e {
		t.Fatalf("fence with one replica of three not confirming: %d, %v; want done at an epoch after %d", fe, err, e)
	}
	if d := time.Since(start); d >= applyWait {
		t.Fatalf("fence took %s; want it done once two replicas confirmed, before the bound %s", d, applyWait)
	}
	if _, err := ctl.Grant(ctx, v.ID, "n2"); err != nil {
		t.Fatalf("grant to a new node with one replica of three not confirming: %v; want done", err)
	}
	if err := ctl.Release(ctx, v.ID, "n2"); err != nil {
		t.Fatalf("release with one replica of three not confirming: %v; want done", err)
	}
	if _, err := ctl.Grant(ctx, v.ID, "n4"); err != nil {
		t.Fatal(err)
	}
	if fs, err := ctl.FenceNode(ctx, "n4"); err != nil || len(fs) != 1 || fs[0].VolumeID != v.ID {
		t.Fatalf("fence node with one replica of three not confirming: %+v, %v; want its volume fenced, done", fs, err)
	}

	holds[f[1]].Store(true)
	for what, call := range map[string]func() error{
		"grant to a new node": func() error { _, err := ctl.Grant(ctx, v.ID, "n3"); return err },
		"fence":               func() error { _, err := ctl.Fence(ctx, v.ID, "n3"); return err },
		"fence node": func() error {
			if _, err := ctl.Grant(ctx, v.ID, "n5"); !errors.Is(err, datapath.ErrNotApplied) {
				return err
			}
			fs, err := ctl.FenceNode(ctx, "n5")
			if len(fs) != 0 {
				return errors.New("fence node reported a volume fenced")
			}
			return err
		},
	} {
		err := call()
		if !errors.Is(err, datapath.ErrNotApplied) || !strings.Contains(err.Error(), srvs[f[0]].Group.Self()) || !strings.Contains(err.Error(), srvs[f[1]].Group.Self()) {
			t.Fatalf("%s with two replicas of three not confirming: %v; want ErrNotApplied naming both, never done", what, err)
		}
	}
}

// TestClient_Group_ReplicatedFence_ServersStopped: with one of a volume's
// three replicas' servers stopped a fence is done (two of three applied
// it); with two stopped it is never reported done.
func TestClient_Group_ReplicatedFence_ServersStopped(t *testing.T) {
	srvs := datapathtest.StartGroup(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctl := dialGroup(t, ctx, srvs, client.WithApplyWait(2*time.Second), client.WithTimeout(2*time.Second))
	v, err := ctl.CreateReplicated(ctx, "pvc-r", 1<<20, datapath.AccessRWO, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.Grant(ctx, v.ID, "n1"); err != nil {
		t.Fatal(err)
	}
	f := followers(srvs)
	srvs[f[0]].Stop()
	if _, err := ctl.Fence(ctx, v.ID, "n1"); err != nil {
		t.Fatalf("fence with one replica's server stopped: %v; want done", err)
	}
	if _, err := ctl.Grant(ctx, v.ID, "n2"); err != nil {
		t.Fatalf("grant with one replica's server stopped: %v; want done", err)
	}
	srvs[f[1]].Stop()
	if _, err := ctl.Fence(ctx, v.ID, "n2"); err == nil {
		t.Fatal("fence with two replicas' servers of three stopped reported done")
	} else {
		t.Logf("fence with two of three stopped: %v", err)
	}
}

// BenchmarkFence_Replicated measures a quiet fence (no writes) of a volume
// on three servers in one group (raftstate.DefaultTiming), with one copy
// (replicas=1: the leader holds it) and with three (replicas=3: the
// leader's commit, then two of the three replicas confirm, the leader
// being one).
func BenchmarkFence_Replicated(b *testing.B) {
	for _, r := range []int{1, 3} {
		b.Run("replicas="+string(rune('0'+r)), func(b *testing.B) {
			srvs := datapathtest.StartGroupTimed(b, 3, raftstate.DefaultTiming)
			ctx := context.Background()
			ctl, err := client.Dial(ctx, srvs[0].Addr, srvs[0].Token, client.WithServers(srvs[1].Addr, srvs[2].Addr))
			if err != nil {
				b.Fatal(err)
			}
			defer ctl.Close()
			v, err := ctl.CreateReplicated(ctx, "fence-bench", 1<<20, datapath.AccessRWO, r)
			if err != nil {
				b.Fatal(err)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := ctl.Grant(ctx, v.ID, "victim"); err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				if _, err := ctl.Fence(ctx, v.ID, "victim"); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
		})
	}
}
