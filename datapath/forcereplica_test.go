package datapath

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestDecideForce is the specification of the leader's check of a force
// against the servers that answer: a volume with a majority of in-sync
// replicas on servers that answer is refused, and so is a forced replica
// whose server does not answer.
func TestDecideForce(t *testing.T) {
	three := ReplicaSet{VolumeID: "vol-1", Holder: "s1", Replicas: []string{"s1", "s2", "s3"}, InSync: []string{"s1", "s2", "s3"}, MemberEpoch: 4}
	twoIn := three
	twoIn.InSync = []string{"s1", "s2"}
	cases := []struct {
		name        string
		set         ReplicaSet
		forced      []string
		unreachable []string
		wantErr     error
		want        string
	}{
		{"every server answers", three, []string{"s1"}, nil, ErrReplicaQuorum,
			"volume vol-1 has quorum (3 of 3 in sync on servers that answer, 2 needed); force-replica is for a volume that lost it"},
		{"one of three lost", three, []string{"s1"}, []string{"s3"}, ErrReplicaQuorum, "has quorum (2 of 3 in sync"},
		{"an out-of-sync one lost", twoIn, []string{"s1"}, []string{"s3"}, ErrReplicaQuorum, "has quorum (2 of 3 in sync"},
		{"two of three lost", three, []string{"s1"}, []string{"s2", "s3"}, nil, ""},
		{"one in sync lost, the other out of sync", twoIn, []string{"s1"}, []string{"s2"}, nil, ""},
		{"forcing a server that does not answer", three, []string{"s2"}, []string{"s2", "s3"}, ErrInvalidArgument,
			"server s2 does not answer the leader (unreachable: s2, s3); force only replicas on servers that answer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := decideForce(c.set, c.forced, c.unreachable)
			if c.wantErr == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %v containing %q", err, c.wantErr, c.want)
			}
		})
	}
}

// TestUnreachableReplicas: a replica's server is unreachable when the
// leader marks it so or does not list it; the leader itself never is.
func TestUnreachableReplicas(t *testing.T) {
	set := ReplicaSet{Replicas: []string{"s1", "s2", "s3", "s4"}}
	servers := []ServerStatus{{ID: "s1", Role: RoleLeader, Self: true}, {ID: "s2", Role: RoleFollower}, {ID: "s3", Role: RoleUnreachable}}
	if got := unreachableReplicas(set, servers); !reflect.DeepEqual(got, []string{"s3", "s4"}) {
		t.Fatalf("unreachable %v, want [s3 s4]", got)
	}
}
