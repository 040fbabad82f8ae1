package raftstate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// TestGroup_Settled_LeaderAndFollowers: the leader and each follower in
// touch with it are settled, and a follower settled some time after a
// create holds it in its applied state; a closed member refuses.
func TestGroup_Settled_LeaderAndFollowers(t *testing.T) {
	groups, peers, _ := startThree(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l := leaderOf(t, groups, -1)
	if _, err := groups[l].CreateVolumeWithID(ctx, "vol-0123456789abcdef", "pvc-1", 1<<20, datapath.AccessRWO, peers[l].ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // past the followers' replication lag
	for i, g := range groups {
		if err := g.Settled(ctx); err != nil {
			t.Fatalf("%s (leader %v): %v", peers[i].ID, i == l, err)
		}
		if _, err := g.Local().Volume("vol-0123456789abcdef"); err != nil {
			t.Fatalf("%s is settled but its applied state lacks the volume created 200 ms before", peers[i].ID)
		}
	}
	f := (l + 1) % 3
	_ = groups[f].Close()
	if err := groups[f].Settled(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("a closed member: %v, want ErrClosed", err)
	}
}
