package chaos

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/datapath"
)

// groupPoll is one poll of the datapath's control group, as `vigil-datapath
// status -o json` shows it: each server's role as it reports itself, and
// the group's volumes (their epoch and replica set) as the leader answered
// them, current through a barrier.
type groupPoll struct {
	At time.Time
	// Roles is each server's role by its node: leader, follower, candidate,
	// or unreachable.
	Roles map[string]string
	// Leader is the node of the server that answered the volumes as the
	// leader; "" when none did (an election, no majority): then Epochs
	// and Sets are empty.
	Leader string
	// Epochs and Sets, by volume id: its epoch, and its replica set (the
	// servers, by their nodes' names, holding its copies and which of them
	// are in sync; datapath.SingleCopy for a volume of one copy).
	Epochs map[string]uint64
	Sets   map[string]datapath.ReplicaSet
}

// epochSeen is the highest epoch seen of a volume, and when and from which
// leader it was first seen.
type epochSeen struct {
	Epoch  uint64
	Leader string
	At     time.Time
}

// epochWatch checks that the epochs the group reports never go back, across
// polls, leaders and cycles: a committed epoch is in every later leader's
// log, so a lower one means a leader answered from a log that lost entries
// (or a server answered as leader from stale state).
type epochWatch struct {
	mu         sync.Mutex
	high       map[string]epochSeen
	violations []string
	polls      int
}

func newEpochWatch() *epochWatch { return &epochWatch{high: map[string]epochSeen{}} }

// observe records one poll; a volume whose epoch is lower than the highest
// seen before is a violation naming both epochs and their leaders.
func (w *epochWatch) observe(p groupPoll) {
	if p.Leader == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	vols := make([]string, 0, len(p.Epochs))
	for v := range p.Epochs {
		vols = append(vols, v)
	}
	sort.Strings(vols)
	for _, v := range vols {
		e := p.Epochs[v]
		prev, ok := w.high[v]
		switch {
		case ok && e < prev.Epoch:
			w.violations = append(w.violations, fmt.Sprintf("epoch of volume %s went back from %d (leader %s, %s) to %d (leader %s, %s)",
				v, prev.Epoch, prev.Leader, prev.At.UTC().Format(time.RFC3339Nano), e, p.Leader, p.At.UTC().Format(time.RFC3339Nano)))
		case !ok || e > prev.Epoch:
			w.high[v] = epochSeen{Epoch: e, Leader: p.Leader, At: p.At}
		}
	}
}

// takeViolations returns the violations seen since the last call.
func (w *epochWatch) takeViolations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.violations
	w.violations = nil
	return v
}

// pollCount is how many polls with a leader were checked.
func (w *epochWatch) pollCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls
}

// claimFate is what a ServerLoss fault must do to one claim.
type claimFate string

const (
	// mustMove: its pod runs on the lost node and its volume is served
	// without the lost server (its holder elsewhere, and a write quorum of
	// its in-sync replicas elsewhere): the pod fails over within
	// failoverBound.
	mustMove claimFate = "must fail over"
	// mayMove: its pod runs on the lost node and its volume is not served
	// without the lost server (or its replica set is not known): the pod
	// may be replaced or not, and writes again once the server is back.
	mayMove claimFate = "may fail over"
	// stallsInPlace: its pod runs elsewhere and its volume is not served
	// without the lost server: the pod stays, its writes stall until the
	// server is back.
	stallsInPlace claimFate = "stays, stalls until its server is back"
	// staysWriting: its pod is not on the lost node, and its volume is
	// served without the lost server (or its replica set is not known).
	staysWriting claimFate = "stays"
)

// claimExpect is the fate of a claim whose pod runs on podNode and whose
// volume has replica set set (known false when not known), when node lost
// is lost. Without the lost server a volume is served when its holder is
// elsewhere (reads go to the holder alone, and the holder never leaves the
// in-sync set) and a write quorum of its in-sync replicas is elsewhere
// (datapath.JudgeQuorum): a volume of three copies whose replica on the
// lost node is not its holder goes on, one already down to two in sync with
// the other on the lost node does not.
func claimExpect(podNode string, set datapath.ReplicaSet, known bool, lost string) claimFate {
	served := false
	if known {
		q := datapath.JudgeQuorum(set, func(server string) bool { return server != lost })
		served = q.State == datapath.VolumeOK || q.State == datapath.VolumeDegraded
	}
	switch {
	case podNode == lost && served:
		return mustMove
	case podNode == lost:
		return mayMove
	case known && !served:
		return stallsInPlace
	}
	return staysWriting
}
