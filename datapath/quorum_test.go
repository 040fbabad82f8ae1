package datapath_test

import (
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
)

// TestQuorum_JudgeQuorum is the specification of a volume's state: its
// replica set × which servers answer → ok, degraded, no-quorum,
// server-down (its holder's server does not answer) or invalid.
func TestQuorum_JudgeQuorum(t *testing.T) {
	set := func(replicas, inSync string) datapath.ReplicaSet {
		s := datapath.ReplicaSet{VolumeID: "v1", Replicas: strings.Fields(replicas), InSync: strings.Fields(inSync), MemberEpoch: 1}
		if len(s.Replicas) > 0 {
			s.Holder = s.Replicas[0]
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		set     datapath.ReplicaSet
		down    string // servers that do not answer
		state   string
		live    int
		problem string // in the Problem of an invalid set
	}{
		{"R=1 answers", datapath.SingleCopy("v1", "a"), "", datapath.VolumeOK, 1, ""},
		{"R=1 its server down: the server-down outage, not a new state", datapath.SingleCopy("v1", "a"), "a", datapath.VolumeServerDown, 0, ""},
		{"R=1 another server down", datapath.SingleCopy("v1", "a"), "b", datapath.VolumeOK, 1, ""},
		{"R=3 all answer", set("a b c", "a b c"), "", datapath.VolumeOK, 3, ""},
		{"R=3 one down: quorum", set("a b c", "a b c"), "c", datapath.VolumeDegraded, 2, ""},
		{"R=3 the holder down: quorum, but its reads wait for the holder", set("a b c", "a b c"), "a", datapath.VolumeServerDown, 2, ""},
		{"R=3 the holder and another down: no quorum first", set("a b c", "a b c"), "a b", datapath.VolumeNoQuorum, 1, ""},
		{"R=3 two down: no quorum", set("a b c", "a b c"), "b c", datapath.VolumeNoQuorum, 1, ""},
		{"R=3 all down", set("a b c", "a b c"), "a b c", datapath.VolumeNoQuorum, 0, ""},
		{"R=3 one out of sync, all answer", set("a b c", "a b"), "", datapath.VolumeDegraded, 2, ""},
		{"R=3 one out of sync, an in-sync one down: the out-of-sync one does not count", set("a b c", "a b"), "b", datapath.VolumeNoQuorum, 1, ""},
		{"R=3 one out of sync and its server down", set("a b c", "a b"), "c", datapath.VolumeDegraded, 2, ""},
		{"R=5 two down: quorum", set("a b c d e", "a b c d e"), "d e", datapath.VolumeDegraded, 3, ""},
		{"R=5 three down: no quorum", set("a b c d e", "a b c d e"), "c d e", datapath.VolumeNoQuorum, 2, ""},
		{"R=5 two out of sync, one in-sync down", set("a b c d e", "a b c"), "c", datapath.VolumeNoQuorum, 2, ""},
		{"R=5 two out of sync, both down", set("a b c d e", "a b c"), "d e", datapath.VolumeDegraded, 3, ""},
		{"R=2 one down: no quorum (2 of 2 needed)", set("a b", "a b"), "b", datapath.VolumeNoQuorum, 1, ""},
		{"in sync below the floor as reported: judged, not refused", set("a b c", "a"), "", datapath.VolumeNoQuorum, 1, ""},
		{"a replica listed twice", set("a b b", "a b"), "", datapath.VolumeInvalid, 0, "lists server b twice"},
		{"an in-sync server that is not a replica", set("a b c", "a d"), "", datapath.VolumeInvalid, 0, "in-sync server d is not a replica"},
		{"an in-sync server listed twice", set("a b c", "a b b"), "", datapath.VolumeInvalid, 0, "in-sync server b is not a replica or is listed twice"},
		{"no replicas", set("", ""), "", datapath.VolumeInvalid, 0, "has 0 replicas; 1 to 5 are allowed"},
		{"six replicas", set("a b c d e f", "a b c d e f"), "", datapath.VolumeInvalid, 0, "has 6 replicas"},
		{"holder not a replica", datapath.ReplicaSet{VolumeID: "v1", Holder: "z", Replicas: []string{"a", "b", "c"}, InSync: []string{"a", "b"}}, "", datapath.VolumeInvalid, 0, "holder z is not among its replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			down := strings.Fields(tc.down)
			reachable := func(id string) bool {
				for _, d := range down {
					if d == id {
						return false
					}
				}
				return true
			}
			q := datapath.JudgeQuorum(tc.set, reachable)
			if q.State != tc.state || q.Live != tc.live {
				t.Fatalf("JudgeQuorum = %+v; want state %s with %d live", q, tc.state, tc.live)
			}
			if q.Need != datapath.WriteQuorum(len(tc.set.Replicas)) {
				t.Errorf("Need = %d; want WriteQuorum(%d) = %d", q.Need, len(tc.set.Replicas), datapath.WriteQuorum(len(tc.set.Replicas)))
			}
			if (tc.problem == "") != (q.Problem == "") || !strings.Contains(q.Problem, tc.problem) {
				t.Errorf("Problem = %q; want it to hold %q", q.Problem, tc.problem)
			}
		})
	}
}

// TestQuorum_UnknownServerDoesNotAnswer: a replica on a server the caller
// does not know counts as one that does not answer.
func TestQuorum_UnknownServerDoesNotAnswer(t *testing.T) {
	known := map[string]bool{"a": true, "b": true}
	s := datapath.ReplicaSet{VolumeID: "v1", Holder: "a", Replicas: []string{"a", "x", "y"}, InSync: []string{"a", "x", "y"}}
	if q := datapath.JudgeQuorum(s, func(id string) bool { return known[id] }); q.State != datapath.VolumeNoQuorum || q.Live != 1 {
		t.Fatalf("JudgeQuorum = %+v; want no-quorum with 1 live", q)
	}
	if got := (datapath.Quorum{State: datapath.VolumeNoQuorum, Live: 1, Need: 2}).String(); got != "no-quorum: 1 in-sync replicas answer, 2 needed" {
		t.Errorf("String = %q", got)
	}
}
