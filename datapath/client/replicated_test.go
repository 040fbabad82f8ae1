package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
)

// memberOf returns the volume's in-sync replicas and member epoch as the
// group's leader reports them.
func memberOf(t *testing.T, ctx context.Context, ctl *client.Client, vol string) ([]string, uint64) {
	t.Helper()
	vols, err := ctl.GroupVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.ID == vol {
			return v.InSync, v.MemberEpoch
		}
	}
	t.Fatalf("volume %s not in the group's volumes", vol)
	return nil, 0
}

// TestClient_Group_ReplicatedWrite_NoQuorumFailsCleanly: a volume of three
// copies with one replica already out of sync, and the server of the other
// non-holder replica stopped. The engine's write reaches the holder alone;
// the writer asks the leader to take the stopped replica out of sync, the
// group refuses (one of three would stay in sync), and the write fails
// after the replica deadline and the no-quorum wait with an error that says
// "no quorum" and names the replica. Nothing changed in the group.
func TestClient_Group_ReplicatedWrite_NoQuorumFailsCleanly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := startReplicated(t, ctx, "pvc-three")
	ctl, vol, ids := r.ctl, r.vol, r.ids
	if _, err := groupLeader(t, r.srvs).MarkReplicaOutOfSync(ctx, vol, ids[1], 1, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.srvs {
		waitMember(t, s, vol, 1)
	}
	r.at[ids[2]].Stop()
	const deadline, wait = 300 * time.Millisecond, 700 * time.Millisecond
	c := r.engine(t, ctx, client.WithReplicaDeadline(deadline), client.WithNoQuorumWait(wait))
	start := time.Now()
	err := c.WriteAt(ctx, vol, "n1", r.epoch, 0, []byte("lone"))
	took := time.Since(start)
	if !errors.Is(err, datapath.ErrReplicaQuorum) || !strings.Contains(err.Error(), "no quorum") || !strings.Contains(err.Error(), ids[2]) {
		t.Fatalf("write with one of three replicas answering: %v; want ErrReplicaQuorum saying no quorum and naming %s", err, ids[2])
	}
	if took < deadline+wait {
		t.Errorf("the write failed after %s; want after the deadline and the wait (%s)", took, deadline+wait)
	}
	t.Logf("no quorum: the write failed after %s", took)
	if in, m := memberOf(t, ctx, ctl, vol); m != 2 || len(in) != 2 {
		t.Errorf("after the refused change: in sync %v at member epoch %d; want 2 in sync at member epoch 2", in, m)
	}
}

// TestClient_Group_ReplicatedWrite_FencedNeverAcked: a fenced writer's
// write to a volume of three copies is refused by the holder and fails at
// once with ErrFenced; the writer takes no replica out of sync.
func TestClient_Group_ReplicatedWrite_FencedNeverAcked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := startReplicated(t, ctx, "pvc-three")
	ctl, vol := r.ctl, r.vol
	if _, err := ctl.Fence(ctx, vol, "n1"); err != nil {
		t.Fatal(err)
	}
	const deadline = 10 * time.Second // far above any delay of a loaded machine
	c := r.engine(t, ctx, client.WithReplicaDeadline(deadline))
	start := time.Now()
	if err := c.WriteAt(ctx, vol, "n1", r.epoch, 0, []byte("zombie")); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("a fenced writer's write: %v; want ErrFenced", err)
	}
	took := time.Since(start)
	if took >= deadline {
		t.Errorf("the fenced write failed after %s; want at once, before the replica deadline %s", took, deadline)
	}
	t.Logf("the fenced write failed after %s", took)
	if in, m := memberOf(t, ctx, ctl, vol); m != 1 || len(in) != 3 {
		t.Errorf("after the fenced write: in sync %v at member epoch %d; want all 3 at member epoch 1", in, m)
	}
}

// TestClient_Dial_ReplicaTimesOutOfRange: a replica deadline or a no-quorum
// wait out of range is refused by Dial, naming the option and the range.
func TestClient_Dial_ReplicaTimesOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		opt  client.Option
		want string
	}{
		{client.WithReplicaDeadline(time.Millisecond), "WithReplicaDeadline(1ms): allowed are 100ms to 30s"},
		{client.WithReplicaDeadline(time.Minute), "WithReplicaDeadline(1m0s): allowed are 100ms to 30s"},
		{client.WithNoQuorumWait(-time.Second), "WithNoQuorumWait(-1s): allowed are 0 to 10m"},
	} {
		_, err := client.Dial(context.Background(), "127.0.0.1:1", "token-0123456789abcdef", tc.opt)
		if !errors.Is(err, datapath.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Dial: %v; want ErrInvalidArgument saying %q", err, tc.want)
		}
	}
}
