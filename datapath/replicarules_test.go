package datapath

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestWriteQuorum(t *testing.T) {
	for r, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3} {
		if got := WriteQuorum(r); got != want {
			t.Errorf("WriteQuorum(%d) = %d, want %d", r, got, want)
		}
		// Two quorums of r always share a replica: the fence argument.
		if 2*WriteQuorum(r) <= r {
			t.Errorf("two quorums of %d need not meet", r)
		}
	}
}

func three(inSync ...string) ReplicaSet {
	return ReplicaSet{VolumeID: "vol-1", Holder: "s1", Replicas: []string{"s1", "s2", "s3"}, InSync: inSync, MemberEpoch: 4}
}

// TestReplicaSet is the specification of a replica set's changes: what each
// decides from a set, and what it refuses (the set then unchanged).
func TestReplicaSet(t *testing.T) {
	type change func(ReplicaSet) (ReplicaStep, error)
	out := func(s string, at uint64) change {
		return func(rs ReplicaSet) (ReplicaStep, error) { return rs.MarkOutOfSync(s, at) }
	}
	in := func(s string, at uint64) change {
		return func(rs ReplicaSet) (ReplicaStep, error) { return rs.MarkInSync(s, at) }
	}
	replace := func(old, with string, at uint64) change {
		return func(rs ReplicaSet) (ReplicaStep, error) { return rs.Replace(old, with, at) }
	}
	cases := []struct {
		name    string
		set     ReplicaSet
		do      change
		want    ReplicaSet // when Changed
		same    bool       // allowed, nothing changes
		wantErr error
		errText string
	}{
		{name: "out of sync", set: three("s1", "s2", "s3"), do: out("s3", 4),
			want: ReplicaSet{VolumeID: "vol-1", Holder: "s1", Replicas: []string{"s1", "s2", "s3"}, InSync: []string{"s1", "s2"}, MemberEpoch: 5}},
		{name: "out of sync again changes nothing", set: three("s1", "s2"), do: out("s3", 4), same: true},
		{name: "out of sync at a stale epoch", set: three("s1", "s2", "s3"), do: out("s3", 3),
			wantErr: ErrStaleMemberEpoch, errText: "asked at member epoch 3; the volume is at member epoch 4"},
		{name: "out of sync at a future epoch", set: three("s1", "s2", "s3"), do: out("s3", 5), wantErr: ErrStaleMemberEpoch},
		{name: "out of sync below the quorum", set: three("s1", "s2"), do: out("s2", 4),
			wantErr: ErrReplicaQuorum, errText: "1 of 3 replicas would stay in sync, and at least 2 must"},
		{name: "out of sync of the holder", set: three("s1", "s2", "s3"), do: out("s1", 4), wantErr: ErrInvalidArgument, errText: "is its holder"},
		{name: "out of sync of a stranger", set: three("s1", "s2", "s3"), do: out("s9", 4), wantErr: ErrInvalidArgument, errText: "server s9 is not one of its replicas (s1, s2, s3)"},
		{name: "the last copy of a single copy", set: SingleCopy("vol-1", "s1"), do: out("s1", 0), wantErr: ErrInvalidArgument, errText: "is its holder"},
		{name: "in sync", set: three("s1", "s2"), do: in("s3", 4),
			want: ReplicaSet{VolumeID: "vol-1", Holder: "s1", Replicas: []string{"s1", "s2", "s3"}, InSync: []string{"s1", "s2", "s3"}, MemberEpoch: 5}},
		{name: "in sync again changes nothing", set: three("s1", "s2", "s3"), do: in("s3", 4), same: true},
		{name: "in sync at a stale epoch", set: three("s1", "s2"), do: in("s3", 2), wantErr: ErrStaleMemberEpoch},
		{name: "in sync of a stranger", set: three("s1", "s2"), do: in("s4", 4), wantErr: ErrInvalidArgument, errText: "not one of its replicas"},
		{name: "replace an out-of-sync replica", set: three("s1", "s2"), do: replace("s3", "s4", 4),
			want: ReplicaSet{VolumeID: "vol-1", Holder: "s1", Replicas: []string{"s1", "s2", "s4"}, InSync: []string{"s1", "s2"}, MemberEpoch: 5}},
		{name: "replace an in-sync replica above the quorum", set: three("s1", "s2", "s3"), do: replace("s2", "s4", 4),
			want: ReplicaSet{VolumeID: "vol-1", Holder: "s1", Replicas: []string{"s1", "s4", "s3"}, InSync: []string{"s1", "s3"}, MemberEpoch: 5}},
		{name: "replace an in-sync replica at the quorum", set: three("s1", "s2"), do: replace("s2", "s4", 4),
			wantErr: ErrReplicaQuorum, errText: "1 of 3 replicas would stay in sync"},
		{name: "replace with a server that has a replica", set: three("s1", "s2"), do: replace("s3", "s2", 4),
			wantErr: ErrInvalidArgument, errText: "s2 already holds a replica (s1, s2, s3)"},
		{name: "replace the holder", set: three("s1", "s2", "s3"), do: replace("s1", "s4", 4), wantErr: ErrInvalidArgument, errText: "is its holder"},
		{name: "replace at a stale epoch", set: three("s1", "s2"), do: replace("s3", "s4", 0), wantErr: ErrStaleMemberEpoch},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := c.set
			before.InSync = append([]string(nil), c.set.InSync...)
			before.Replicas = append([]string(nil), c.set.Replicas...)
			step, err := c.do(c.set)
			if !reflect.DeepEqual(c.set, before) {
				t.Fatalf("the rule changed its input: %+v, was %+v", c.set, before)
			}
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.errText) {
					t.Fatalf("err %v, want %v containing %q", err, c.wantErr, c.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.same {
				if step.Changed || !reflect.DeepEqual(step.Set, c.set) {
					t.Fatalf("step %+v, want the set unchanged", step)
				}
				return
			}
			if !step.Changed || !reflect.DeepEqual(step.Set, c.want) {
				t.Fatalf("step %+v, want %+v", step, c.want)
			}
			if err := step.Set.Validate(func(string) error { return nil }); err != nil {
				t.Fatalf("the rule made a set Validate refuses: %v", err)
			}
		})
	}
}

func TestReplicaSet_Validate(t *testing.T) {
	ok := func(string) error { return nil }
	cases := []struct {
		name    string
		set     ReplicaSet
		wantErr error
		errText string
	}{
		{"single copy", SingleCopy("vol-1", "s1"), nil, ""},
		{"three in sync", three("s1", "s2", "s3"), nil, ""},
		{"none", ReplicaSet{VolumeID: "vol-1", Holder: "s1"}, ErrInvalidArgument, "has 0 replicas; 1 to 5 are allowed"},
		{"six", ReplicaSet{VolumeID: "vol-1", Holder: "a", Replicas: []string{"a", "b", "c", "d", "e", "f"}, InSync: []string{"a", "b", "c", "d"}}, ErrInvalidArgument, "has 6 replicas"},
		{"duplicate", ReplicaSet{VolumeID: "vol-1", Holder: "s1", Replicas: []string{"s1", "s1"}, InSync: []string{"s1"}}, ErrInvalidArgument, "lists server s1 twice"},
		{"holder not a replica", ReplicaSet{VolumeID: "vol-1", Holder: "s9", Replicas: []string{"s1"}, InSync: []string{"s1"}}, ErrInvalidArgument, "its holder s9 is not among"},
		{"in sync not a replica", three("s1", "s2", "s4"), ErrInvalidArgument, "in-sync server s4 is not a replica"},
		{"holder out of sync", three("s2", "s3"), ErrInvalidArgument, "its holder s1 is not in sync"},
		{"below quorum", three("s1"), ErrReplicaQuorum, "1 of 3 replicas in sync; at least 2 must be"},
	}
	for _, c := range cases {
		err := c.set.Validate(ok)
		if c.wantErr == nil && err != nil || c.wantErr != nil && (!errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.errText)) {
			t.Errorf("%s: err %v, want %v containing %q", c.name, err, c.wantErr, c.errText)
		}
	}
	bad := errors.New("bad id")
	if err := three("s1", "s2", "s3").Validate(func(id string) error {
		if id == "s2" {
			return bad
		}
		return nil
	}); !errors.Is(err, bad) {
		t.Errorf("a bad replica id passed: %v", err)
	}
}

// TestPlaceReplicas is placement's specification: the roomiest servers that
// can hold the volume, distinct, the roomiest first (the holder).
func TestPlaceReplicas(t *testing.T) {
	servers := []ServerSpace{{"s1", 100}, {"s2", 300}, {"s3", 200}, {"s4", 300}, {"s5", -1}}
	cases := []struct {
		name    string
		servers []ServerSpace
		r       int
		size    int64
		want    []string
		wantErr error
		errText string
	}{
		{"one", servers, 1, 10, []string{"s2"}, nil, ""},
		{"three, ties to the first listed", servers, 3, 10, []string{"s2", "s4", "s3"}, nil, ""},
		{"only those with room", servers, 2, 150, []string{"s2", "s4"}, nil, ""},
		{"four of the four that told", servers, 4, 0, []string{"s2", "s4", "s3", "s1"}, nil, ""},
		{"more than the servers", servers[:3], 4, 10, nil, ErrInvalidArgument, "4 replicas asked, but the control group records 3 servers"},
		{"more than allowed", servers, 6, 10, nil, ErrInvalidArgument, "6 replicas asked; 1 to 5 are allowed"},
		{"zero", servers, 0, 10, nil, ErrInvalidArgument, "0 replicas asked"},
		{"not enough room", servers, 3, 250, nil, ErrNoSpace, "only 2 of the 5 servers have that much free"},
		{"one that did not tell", servers, 5, 0, nil, ErrNoSpace, "only 4 of the 5"},
		{"listed twice", []ServerSpace{{"s1", 1}, {"s1", 2}}, 1, 0, nil, ErrInvalidArgument, "server s1 is listed twice"},
	}
	for _, c := range cases {
		got, err := PlaceReplicas(c.servers, c.r, c.size)
		if c.wantErr != nil {
			if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.errText) || got != nil {
				t.Errorf("%s: %v, %v; want %v containing %q", c.name, got, err, c.wantErr, c.errText)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

// TestBulkCode_StaleMemberEpochHasItsOwnCode: the refusal of a stale member
// epoch crosses the bulk channel as itself, not as another error.
func TestBulkCode_StaleMemberEpochHasItsOwnCode(t *testing.T) {
	seen := map[uint8]error{}
	for _, w := range wireErrors {
		code := bulkCode(w.err)
		if other, dup := seen[code]; dup || code == bulkCodeInternal {
			t.Fatalf("%v has bulk code %d, as %v", w.err, code, other)
		}
		seen[code] = w.err
	}
	for _, sentinel := range []error{ErrStaleMemberEpoch, ErrReplicaQuorum} {
		err := fmt.Errorf("write volume vol-1: %w", sentinel)
		if got := BulkError(bulkCode(err), err.Error()); !errors.Is(got, sentinel) {
			t.Fatalf("%v over the bulk channel became %v", sentinel, got)
		}
	}
}
