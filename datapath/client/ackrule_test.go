package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
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
	lateOK   = "late-ok"     // answers its first send once asked out of sync, the next ones at once
	downOnce = "down-once"   // fails once, then takes it
	lateFenc = "late-fenced" // refuses as fenced once asked out of sync
)

type fakeReplicas struct {
	mu    sync.Mutex
	how   map[string]string
	sends map[string]int
	marks []string
	at    []string // every send as replica@member epoch, in order
}

// marked says whether the write asked to take id out of sync.
func (f *fakeReplicas) marked(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.marks, id)
}

func (f *fakeReplicas) send(ctx context.Context, id string, member uint64, deadline time.Duration) error {
	f.mu.Lock()
	f.sends[id]++
	f.at = append(f.at, fmt.Sprintf("%s@%d", id, member))
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
		if how == lateOK && n > 1 {
			return nil
		}
		// It answers once the write asked to take it out of sync: ordered
		// by that event, not by a timer that a loaded machine may delay.
		for !f.marked(id) {
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if how == lateFenc {
			return fmt.Errorf("%w: node n1 was fenced", datapath.ErrFenced)
		}
		return nil
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
		// wantAgain: the sends at a member epoch after the set's, sorted:
		// the write sent again to the replicas in sync after a change.
		wantAgain []string
	}{
		{name: "all take it", set: three, how: map[string]string{"a": takes, "b": takes, "c": takes}, wantIn: []string{"a", "b", "c"}, wantEpoch: 4},
		{name: "a late replica is taken out, then acked", set: three, how: map[string]string{"a": takes, "b": takes, "c": late},
			wantIn: []string{"a", "b"}, wantEpoch: 5, wantMarks: []string{"c"}, wantAgain: []string{"a@5", "b@5"}},
		{name: "a replica whose connection fails is taken out", set: three, how: map[string]string{"a": takes, "b": down, "c": takes},
			wantIn: []string{"a", "c"}, wantEpoch: 5, wantMarks: []string{"b"}, wantAgain: []string{"a@5", "c@5"}},
		{name: "acked by 1 of 3: no quorum", set: three, how: map[string]string{"a": takes, "b": down, "c": late},
			wantErr: datapath.ErrReplicaQuorum, wantMarks: []string{"b", "c"}},
		{name: "the holder late: not taken out, no ack", set: three, how: map[string]string{"a": late, "b": takes, "c": takes},
			wantErr: datapath.ErrReplicaQuorum, wantMarks: []string{"a"}},
		{name: "no quorum until the late replica answers", set: three, how: map[string]string{"a": takes, "b": down, "c": lateOK},
			wantIn: []string{"a", "c"}, wantEpoch: 5, wantMarks: []string{"b", "c"}, wantAgain: []string{"a@5", "c@5"}},
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
			wantIn: []string{"a", "c", "e"}, wantEpoch: 2, wantMarks: []string{"b", "d"}, wantAgain: []string{"a@2", "c@2", "e@2"}},
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
				set: tc.set, deadline: deadline, noQuorum: 10 * deadline, resend: deadline / 4, again: true,
				send: func(ctx context.Context, id string, m uint64) error { return f.send(ctx, id, m, deadline) },
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
			if again := sentAfter(f, tc.set.MemberEpoch); !reflect.DeepEqual(again, tc.wantAgain) {
				t.Errorf("sent again at a later member epoch before returning: %v; want %v (all sends: %v)", again, tc.wantAgain, f.at)
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
	askedOnce := sync.OnceFunc(func() { close(asked) }) // a slow "takes" may be asked out too
	done := make(chan error, 1)
	go func() {
		_, err := replicatedWrite(context.Background(), fanOut{set: set, deadline: 10 * time.Millisecond, noQuorum: time.Second,
			send: func(ctx context.Context, id string, m uint64) error { return f.send(ctx, id, m, 10*time.Millisecond) },
			outOfSync: func(_ context.Context, id string, m uint64) (datapath.ReplicaSet, error) {
				askedOnce()
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

// sentAfter is f's sends at a member epoch above member, sorted.
func sentAfter(f *fakeReplicas, member uint64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, s := range f.at {
		var id string
		var m uint64
		if _, err := fmt.Sscanf(strings.Replace(s, "@", " ", 1), "%s %d", &id, &m); err == nil && m > member {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// TestReplicatedWrite_SentAgainBeforeTheAck: once a change took a late
// replica out of sync, the write is acknowledged only after the replicas
// still in sync took it again at the new member epoch (so each marks it in
// its new dirty-region map); a replica that refuses it then fails the
// write, unacknowledged; a flush (again false) is not sent again.
func TestReplicatedWrite_SentAgainBeforeTheAck(t *testing.T) {
	set := datapath.ReplicaSet{VolumeID: "vol-1", Holder: "a", Replicas: []string{"a", "b", "c"}, InSync: []string{"a", "b", "c"}, MemberEpoch: 7}
	for _, tc := range []struct {
		name      string
		again     bool
		refuse    string // replica that refuses as fenced when sent at the new member epoch
		wantErr   error
		wantAgain []string
	}{
		{name: "a write is sent again to a and b at 8", again: true, wantAgain: []string{"a@8", "b@8"}},
		{name: "refused when sent again: not acknowledged", again: true, refuse: "b", wantErr: datapath.ErrFenced, wantAgain: []string{"a@8", "b@8"}},
		{name: "a flush is not sent again", again: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const deadline = 10 * time.Millisecond
			f := &fakeReplicas{how: map[string]string{"a": takes, "b": takes, "c": late}, sends: map[string]int{}}
			got, err := replicatedWrite(context.Background(), fanOut{set: set, deadline: deadline, noQuorum: time.Second, again: tc.again,
				send: func(ctx context.Context, id string, m uint64) error {
					if m > set.MemberEpoch && id == "c" {
						t.Errorf("sent again to c, which left")
					}
					if m > set.MemberEpoch && id == tc.refuse {
						f.mu.Lock()
						f.at = append(f.at, fmt.Sprintf("%s@%d", id, m))
						f.mu.Unlock()
						return fmt.Errorf("%w: node n1 was fenced", datapath.ErrFenced)
					}
					return f.send(ctx, id, m, deadline)
				},
				outOfSync: func(_ context.Context, id string, m uint64) (datapath.ReplicaSet, error) {
					step, err := set.MarkOutOfSync(id, m)
					return step.Set, err
				}})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v; want %v", err, tc.wantErr)
				}
			} else if err != nil || got.MemberEpoch != 8 {
				t.Fatalf("acknowledged at member epoch %d, err %v; want at 8", got.MemberEpoch, err)
			}
			if again := sentAfter(f, set.MemberEpoch); !reflect.DeepEqual(again, tc.wantAgain) {
				t.Errorf("sent again before returning: %v; want %v (all sends: %v)", again, tc.wantAgain, f.at)
			}
		})
	}
}
