package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// replica behaviours of the fake sends.
const (
	takes    = "takes"       // answers at once
	late     = "late"        // never answers (until the write gives up on it)
	down     = "down"        // its connection fails at once
	fenced   = "fenced"      // refuses the writer as fenced
	stale    = "stale"       // refuses the member epoch
	lateOK   = "late-ok"     // answers after 4 deadlines
	downOnce = "down-once"   // fails once, then takes it
	lateFenc = "late-fenced" // refuses as fenced after 4 deadlines
)

type fakeReplicas struct {
	mu    sync.Mutex
	how   map[string]string
	sends map[string]int
	marks []string
}

func (f *fakeReplicas) send(ctx context.Context, id string, deadline time.Duration) error {
	f.mu.Lock()
	f.sends[id]++
	n := f.sends[id]
	how := f.how[id]
	f.mu.Unlock()
	switch how {
	case takes:
		return nil
	case down:
		return fmt.Errorf("%w: connection refused", errBulkTransport)
	case downOnce:
		if n == 1 {
			return fmt.Errorf("%w: connection reset", errBulkTransport)
		}
		return nil
	case fenced:
		return fmt.Errorf("%w: node n1 was fenced", datapath.ErrFenced)
	case stale:
		return fmt.Errorf("%w: member epoch", datapath.ErrStaleMemberEpoch)
	case lateOK, lateFenc:
		select {
		case <-time.After(4 * deadline):
			if how == lateFenc {
				return fmt.Errorf("%w: node n1 was fenced", datapath.ErrFenced)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestReplicatedWrite is the ack rule's specification: a write is
// acknowledged only when every in-sync replica and at least WriteQuorum(R)
// took it; a replica that missed it is dropped only by a committed change
// (the fake commits by datapath.ReplicaSet's own rules), and the floor
// makes the write wait, then fail with "no quorum"; a fence or a stale
// member epoch ends it at once, unacknowledged.
func TestReplicatedWrite(t *testing.T) {
	three := datapath.ReplicaSet{VolumeID: "vol-1", Holder: "a", Replicas: []string{"a", "b", "c"}, InSync: []string{"a", "b", "c"}, MemberEpoch: 4}
	five := datapath.ReplicaSet{VolumeID: "vol-1", Holder: "a", Replicas: []string{"a", "b", "c", "d", "e"}, InSync: []string{"a", "b", "c", "d", "e"}}
	bOut := three
	bOut.InSync, bOut.MemberEpoch = []string{"a", "c"}, 5
	for _, tc := range []struct {
		name      string
		set       datapath.ReplicaSet
		how       map[string]string
		commit    func(datapath.ReplicaSet, string, uint64) (datapath.ReplicaSet, error) // nil: the rules
		wantErr   error
		wantIn    []string // the in-sync set acknowledged under
		wantEpoch uint64
		wantMarks []string
	}{
		{name: "all take it", set: three, how: map[string]string{"a": takes, "b": takes, "c": takes}, wantIn: []string{"a", "b", "c"}, wantEpoch: 4},
		{name: "a late replica is taken out, then acked", set: three, how: map[string]string{"a": takes, "b": takes, "c": late},
			wantIn: []string{"a", "b"}, wantEpoch: 5, wantMarks: []string{"c"}},
		{name: "a replica whose connection fails is taken out", set: three, how: map[string]string{"a": takes, "b": down, "c": takes},
			wantIn: []string{"a", "c"}, wantEpoch: 5, wantMarks: []string{"b"}},
		{name: "acked by 1 of 3: no quorum", set: three, how: map[string]string{"a": takes, "b": down, "c": late},
			wantErr: datapath.ErrReplicaQuorum, wantMarks: []string{"b", "c"}},
		{name: "the holder late: not taken out, no ack", set: three, how: map[string]string{"a": late, "b": takes, "c": takes},
			wantErr: datapath.ErrReplicaQuorum, wantMarks: []string{"a"}},
		{name: "no quorum until the late replica answers", set: three, how: map[string]string{"a": takes, "b": down, "c": lateOK},
			wantIn: []string{"a", "c"}, wantEpoch: 5, wantMarks: []string{"b", "c"}},
		{name: "a replica down once is sent again while there is no quorum", set: bOut, how: map[string]string{"a": takes, "b": late, "c": downOnce},
			wantIn: []string{"a", "c"}, wantEpoch: 5, wantMarks: []string{"c"}},
		{name: "fenced by one replica: never acked", set: three, how: map[string]string{"a": takes, "b": fenced, "c": takes}, wantErr: datapath.ErrFenced},
		{name: "fenced by a late answer while there is no quorum", set: three, how: map[string]string{"a": takes, "b": down, "c": lateFenc},
			wantErr: datapath.ErrFenced, wantMarks: []string{"b", "c"}},
		{name: "out of sync refused: the writer is fenced", set: three, how: map[string]string{"a": takes, "b": down, "c": takes},
			commit: func(datapath.ReplicaSet, string, uint64) (datapath.ReplicaSet, error) {
				return datapath.ReplicaSet{}, fmt.Errorf("%w: writer fenced", datapath.ErrFenced)
			}, wantErr: datapath.ErrFenced, wantMarks: []string{"b"}},
		{name: "a stale member epoch at a replica", set: three, how: map[string]string{"a": takes, "b": takes, "c": stale}, wantErr: datapath.ErrStaleMemberEpoch},
		{name: "out of sync refused as stale", set: three, how: map[string]string{"a": takes, "b": takes, "c": late},
			commit: func(datapath.ReplicaSet, string, uint64) (datapath.ReplicaSet, error) {
				return datapath.ReplicaSet{}, fmt.Errorf("%w: moved on", datapath.ErrStaleMemberEpoch)
			}, wantErr: datapath.ErrStaleMemberEpoch, wantMarks: []string{"c"}},
		{name: "out of sync answers nil but keeps the replica: no ack", set: three, how: map[string]string{"a": takes, "b": takes, "c": late},
			commit:  func(s datapath.ReplicaSet, _ string, _ uint64) (datapath.ReplicaSet, error) { return s, nil },
			wantErr: errNotAcked, wantMarks: []string{"c"}},
		{name: "a view below the floor writes nothing", set: datapath.ReplicaSet{VolumeID: "vol-1", Holder: "a", Replicas: []string{"a", "b", "c"}, InSync: []string{"a"}},
			how: map[string]string{"a": takes, "b": takes, "c": takes}, wantErr: datapath.ErrReplicaQuorum},
		{name: "five replicas, two late: acked by three", set: five, how: map[string]string{"a": takes, "b": late, "c": takes, "d": down, "e": takes},
			wantIn: []string{"a", "c", "e"}, wantEpoch: 2, wantMarks: []string{"b", "d"}},
		{name: "five replicas, three late: no quorum", set: five, how: map[string]string{"a": takes, "b": late, "c": down, "d": late, "e": takes},
			wantErr: datapath.ErrReplicaQuorum, wantMarks: []string{"b", "c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const deadline = 20 * time.Millisecond
			f := &fakeReplicas{how: tc.how, sends: map[string]int{}}
			commit := tc.commit
			if commit == nil {
				commit = func(s datapath.ReplicaSet, id string, m uint64) (datapath.ReplicaSet, error) {
					step, err := s.MarkOutOfSync(id, m)
					return step.Set, err
				}
			}
			cur := tc.set
			got, err := replicatedWrite(context.Background(), fanOut{
				set: tc.set, deadline: deadline, noQuorum: 10 * deadline, resend: deadline / 4,
				send: func(ctx context.Context, id string) error { return f.send(ctx, id, deadline) },
				outOfSync: func(_ context.Context, id string, m uint64) (datapath.ReplicaSet, error) {
					f.mu.Lock()
					f.marks = append(f.marks, id)
					f.mu.Unlock()
					next, err := commit(cur, id, m)
					if err == nil {
						cur = next
					}
					return next, err
				},
			})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v; want %v", err, tc.wantErr)
				}
				if errors.Is(tc.wantErr, datapath.ErrReplicaQuorum) && !strings.Contains(err.Error(), "no quorum") {
					t.Errorf("err %q does not say no quorum", err)
				}
			} else if err != nil {
				t.Fatalf("err %v; want acknowledged", err)
			} else if !reflect.DeepEqual(got.InSync, tc.wantIn) || got.MemberEpoch != tc.wantEpoch {
				t.Errorf("acknowledged under in sync %v at member epoch %d; want %v at %d", got.InSync, got.MemberEpoch, tc.wantIn, tc.wantEpoch)
			}
			if !reflect.DeepEqual(f.marks, tc.wantMarks) {
				t.Errorf("taken out of sync: %v; want %v", f.marks, tc.wantMarks)
			}
		})
	}
}

// TestReplicatedWrite_LateReplicaWaitsForTheCommit: a write that a replica
// missed is not acknowledged while the change that takes the replica out
// of sync is not committed, however long the commit takes; it is
// acknowledged once the change returned.
func TestReplicatedWrite_LateReplicaWaitsForTheCommit(t *testing.T) {
	set := datapath.ReplicaSet{VolumeID: "vol-1", Holder: "a", Replicas: []string{"a", "b", "c"}, InSync: []string{"a", "b", "c"}}
	f := &fakeReplicas{how: map[string]string{"a": takes, "b": takes, "c": late}, sends: map[string]int{}}
	asked, commit := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := replicatedWrite(context.Background(), fanOut{set: set, deadline: 10 * time.Millisecond, noQuorum: time.Second,
			send: func(ctx context.Context, id string) error { return f.send(ctx, id, 10*time.Millisecond) },
			outOfSync: func(_ context.Context, id string, m uint64) (datapath.ReplicaSet, error) {
				close(asked)
				<-commit
				step, err := set.MarkOutOfSync(id, m)
				return step.Set, err
			}})
		done <- err
	}()
	<-asked
	select {
	case err := <-done:
		t.Fatalf("the write returned (%v) before the late replica was taken out of sync", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(commit)
	if err := <-done; err != nil {
		t.Fatalf("after the commit: %v; want acknowledged", err)
	}
}
