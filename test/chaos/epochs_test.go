package chaos

import (
	"strings"
	"testing"

	"github.com/vigil-storage/vigil/datapath"
)

func poll(sec int64, leader string, epochs map[string]uint64) groupPoll {
	return groupPoll{At: at(sec), Leader: leader, Epochs: epochs}
}

// Epochs that rise or stay, across leaders, are no violation; one lower than
// the highest seen before is, naming the volume, both epochs and both leaders,
// even when an equal epoch was seen in between.
func TestEpochWatch_NeverBack(t *testing.T) {
	w := newEpochWatch()
	w.observe(poll(1, "node-1", map[string]uint64{"v1": 3, "v2": 1}))
	w.observe(poll(2, "node-1", map[string]uint64{"v1": 3, "v2": 2}))
	w.observe(poll(3, "node-2", map[string]uint64{"v1": 5, "v2": 2, "v3": 1})) // a new leader, a new volume
	w.observe(poll(4, "", nil))                                                // an election: nothing answered
	if v := w.takeViolations(); len(v) != 0 || w.pollCount() != 3 {
		t.Fatalf("rising epochs: violations %q, %d polls checked; want none and 3", v, w.pollCount())
	}
	w.observe(poll(5, "node-3", map[string]uint64{"v1": 4, "v2": 2, "v3": 1}))
	v := w.takeViolations()
	want := "epoch of volume v1 went back from 5 (leader node-2, 1970-01-01T00:00:03Z) to 4 (leader node-3, 1970-01-01T00:00:05Z)"
	if len(v) != 1 || v[0] != want {
		t.Fatalf("violations = %q; want exactly %q", v, want)
	}
	// The highest stays the reference: a later 4 is still a step back from 5.
	w.observe(poll(6, "node-3", map[string]uint64{"v1": 4}))
	if v := w.takeViolations(); len(v) != 1 || !strings.Contains(v[0], "from 5 (leader node-2") {
		t.Errorf("a second poll at 4 after 5: %q; want it named again against 5", v)
	}
	w.observe(poll(7, "node-3", map[string]uint64{"v1": 6}))
	if v := w.takeViolations(); len(v) != 0 {
		t.Errorf("back above the highest: %q; want no violation", v)
	}
}

// Across cycles: the watch keeps what it saw, so a leader elected in a later
// cycle that reports an older epoch is caught.
func TestEpochWatch_AcrossCycles(t *testing.T) {
	w := newEpochWatch()
	w.observe(poll(10, "node-1", map[string]uint64{"v": 7}))
	_ = w.takeViolations() // the end of cycle 1
	w.observe(poll(90, "node-2", map[string]uint64{"v": 2}))
	if v := w.takeViolations(); len(v) != 1 || !strings.Contains(v[0], "went back from 7 (leader node-1") {
		t.Errorf("cycle 2: %q; want v's epoch back from cycle 1's 7", v)
	}
}

// The table is the specification of what a lost server's node means for
// each claim: node-1 is lost.
func TestClaimExpect(t *testing.T) {
	one := func(holder string) datapath.ReplicaSet { return datapath.SingleCopy("v", holder) }
	three := func(holder string, inSync ...string) datapath.ReplicaSet {
		return datapath.ReplicaSet{VolumeID: "v", Holder: holder, Replicas: []string{"node-1", "node-2", "node-3"}, InSync: inSync, MemberEpoch: 1}
	}
	for _, c := range []struct {
		name  string
		pod   string
		set   datapath.ReplicaSet
		known bool
		want  claimFate
	}{
		{"pod on the lost node, its one copy elsewhere", "node-1", one("node-2"), true, mustMove},
		{"pod and its one copy on the lost node", "node-1", one("node-1"), true, mayMove},
		{"pod on the lost node, its copies not known", "node-1", datapath.ReplicaSet{}, false, mayMove},
		{"its one copy on the lost server", "node-4", one("node-1"), true, stallsInPlace},
		{"its one copy elsewhere", "node-4", one("node-2"), true, staysWriting},
		{"pod and its one copy on another node", "node-2", one("node-2"), true, staysWriting},
		{"its copies not known", "node-4", datapath.ReplicaSet{}, false, staysWriting},
		{"three in sync, holder elsewhere, pod on the lost node", "node-1", three("node-2", "node-1", "node-2", "node-3"), true, mustMove},
		{"three in sync, holder elsewhere", "node-4", three("node-2", "node-1", "node-2", "node-3"), true, staysWriting},
		{"three in sync, holder on the lost node", "node-4", three("node-1", "node-1", "node-2", "node-3"), true, stallsInPlace},
		{"three in sync, holder on the lost node, pod too", "node-1", three("node-1", "node-1", "node-2", "node-3"), true, mayMove},
		{"two in sync, the other one on the lost node", "node-4", three("node-2", "node-1", "node-2"), true, stallsInPlace},
		{"two in sync, the other one on the lost node, pod too", "node-1", three("node-2", "node-1", "node-2"), true, mayMove},
		{"two in sync, the lost node's replica out of sync", "node-1", three("node-2", "node-2", "node-3"), true, mustMove},
	} {
		if got := claimExpect(c.pod, c.set, c.known, "node-1"); got != c.want {
			t.Errorf("%s (pod on %s, set %+v): %q; want %q", c.name, c.pod, c.set, got, c.want)
		}
	}
}

// A cut-off server's answers to the probe: a refusal is fine; an answer is
// fine only if the group recorded it after the heal; a grant answered with an
// epoch at or below the majority's fence came from stale state.
func TestProbeStale(t *testing.T) {
	row := func(st datapath.AttachmentState, e uint64) datapath.Attachment {
		return datapath.Attachment{Node: probeNode, State: st, Epoch: e}
	}
	base := probe{vol: "p", target: "node-2", granted: 4}
	for _, c := range []struct {
		name string
		pr   func(probe) probe
		row  datapath.Attachment
		want string
	}{
		{"both refused", func(p probe) probe { p.majority = 5; return p }, row(datapath.StateFenced, 5), ""},
		{"a fence the group committed", func(p probe) probe { p.fenced = 5; return p }, row(datapath.StateFenced, 5), ""},
		{"a fence the group does not have", func(p probe) probe { p.fenced = 5; return p }, row(datapath.StateGranted, 4), "answered a fence of chaos-probe on the probe p with epoch 5"},
		{"a fence at the old grant's epoch", func(p probe) probe { p.fenced = 4; return p }, row(datapath.StateGranted, 4), "granted at 4 before the cut"},
		{"the old grant's epoch after the majority's fence", func(p probe) probe { p.majority, p.regranted = 5, 4; return p },
			row(datapath.StateFenced, 5), "answered a grant of the probe p to chaos-probe with epoch 4, while the rest of the group had fenced it at epoch 5"},
		{"a grant the group committed", func(p probe) probe { p.majority, p.regranted = 5, 6; return p }, row(datapath.StateGranted, 6), ""},
	} {
		v := probeStale(c.pr(base), c.row)
		if c.want == "" && len(v) != 0 || c.want != "" && (len(v) != 1 || !strings.Contains(v[0], c.want)) {
			t.Errorf("%s: %q; want %q", c.name, v, c.want)
		}
	}
}
