package client_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath/client"
)

// TestClient_Group_ReplicatedWrite_AReplicaStops: a volume of three copies
// written by its node's engine; the server of one non-holder replica (not
// the control leader) is stopped under the writes. The write in flight
// loses its connection to the replica (or, past the replica deadline, its
// answer), the writer takes the replica out of sync by a committed
// change, and the writes go on without an error, at the new member epoch;
// a flush is acknowledged without the replica; the group shows it out of
// sync. The longest write is the stall, logged: a stopped server's
// connections reset, so it is below the deadline.
func TestClient_Group_ReplicatedWrite_AReplicaStops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := startReplicated(t, ctx, "pvc-three")
	victim := r.ids[1]
	if r.at[victim].Group.IsLeader() {
		victim = r.ids[2]
	}
	const deadline = 500 * time.Millisecond
	c := r.engine(t, ctx, client.WithReplicaDeadline(deadline))
	buf := make([]byte, 4096)
	var longest time.Duration
	var stopped time.Time
	for i := 0; i < 100000; i++ {
		if i == 100 {
			r.at[victim].Stop()
			stopped = time.Now()
		}
		buf[0] = byte(i)
		start := time.Now()
		if err := c.WriteAt(ctx, r.vol, "n1", r.epoch, int64(i%64)*4096, buf); err != nil {
			t.Fatalf("write %d (the replica on %s stopped before write 100): %v", i, victim, err)
		}
		longest = max(longest, time.Since(start))
		if i > 100 && time.Since(stopped) > 2*time.Second {
			break
		}
	}
	t.Logf("longest write (the stall) with a replica deadline of %s: %s", deadline, longest)
	in, m := memberOf(t, ctx, r.ctl, r.vol)
	if slices.Contains(in, victim) || m != 2 {
		t.Errorf("in sync %v at member epoch %d; want %s out of sync at member epoch 2", in, m, victim)
	}
	if err := c.Flush(ctx, r.vol, "n1", r.epoch); err != nil {
		t.Errorf("flush without the stopped replica: %v", err)
	}
	got, err := c.ReadAt(ctx, r.vol, "n1", r.epoch, 0, 1)
	if err != nil || len(got) != 1 {
		t.Errorf("read after the stop: %v", err)
	}
}

// TestClient_Group_ReplicatedRead_FromTheHolder: an engine dialed to a
// replica that is out of sync writes a volume of three copies and reads it
// back: the read goes to the holder, in sync, and returns what was
// written; the replica dialed would have refused it (REPLICA_NOT_IN_SYNC).
func TestClient_Group_ReplicatedRead_FromTheHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := startReplicated(t, ctx, "pvc-three")
	if _, err := groupLeader(t, r.srvs).MarkReplicaOutOfSync(ctx, r.vol, r.ids[1], 1, "", 0); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.srvs {
		waitMember(t, s, r.vol, 1)
	}
	out := r.at[r.ids[1]]
	var others []string
	for _, s := range r.srvs {
		if s != out {
			others = append(others, s.Addr)
		}
	}
	c, err := client.Dial(ctx, out.Addr, out.NodeToken("n1"), client.WithServers(others...), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteAt(ctx, r.vol, "n1", r.epoch, 4096, []byte("current")); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadAt(ctx, r.vol, "n1", r.epoch, 4096, 7)
	if err != nil || string(got) != "current" {
		t.Fatalf("read through a client dialed to the out-of-sync replica: %q, %v; want %q from the holder", got, err, "current")
	}
}

// TestClient_Group_ReplicatedWrite_AReplicaStopsUnderConcurrentWrites: as
// TestClient_Group_ReplicatedWrite_AReplicaStops with eight writers of the
// same engine at once: each write in flight misses the stopped replica,
// one of them commits its removal, the others find it done (their own
// change refused as stale, the volume read again) or are sent again under
// the new member epoch, and every write is acknowledged without an error.
func TestClient_Group_ReplicatedWrite_AReplicaStopsUnderConcurrentWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r := startReplicated(t, ctx, "pvc-three")
	victim := r.ids[1]
	if r.at[victim].Group.IsLeader() {
		victim = r.ids[2]
	}
	c := r.engine(t, ctx, client.WithReplicaDeadline(500*time.Millisecond))
	stop := make(chan struct{})
	errs := make(chan error, 8)
	var longest [8]time.Duration
	for w := range 8 {
		go func() {
			buf := make([]byte, 4096)
			for i := 0; ; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				start := time.Now()
				if err := c.WriteAt(ctx, r.vol, "n1", r.epoch, int64(w*8+i%8)*4096, buf); err != nil {
					errs <- fmt.Errorf("writer %d, write %d: %w", w, i, err)
					return
				}
				longest[w] = max(longest[w], time.Since(start))
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	r.at[victim].Stop()
	time.Sleep(2 * time.Second)
	close(stop)
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	t.Logf("longest write of each writer: %v", longest)
	in, m := memberOf(t, ctx, r.ctl, r.vol)
	if slices.Contains(in, victim) || m != 2 {
		t.Errorf("in sync %v at member epoch %d; want %s out of sync at member epoch 2", in, m, victim)
	}
}
