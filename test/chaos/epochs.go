package chaos

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// groupPoll is one poll of the datapath's control group, as `vigil-datapath
// status -o json` shows it: each server's role as it reports itself, and
// the group's volumes (their epoch and the server holding their data) as
// the leader answered them, current through a barrier.
type groupPoll struct {
	At time.Time
	// Roles is each server's role by its node: leader, follower, candidate,
	// or unreachable.
	Roles map[string]string
	// Leader is the node of the server that answered the volumes as the
	// leader; "" when none did (an election, no majority): then Epochs
	// and Holders are empty.
	Leader string
	// Epochs and Holders, by volume id: its epoch, and the node of the
	// server holding its data.
	Epochs  map[string]uint64
	Holders map[string]string
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
	// mustMove: its pod runs on the lost node and its data on another
	// server: the pod fails over within failoverBound.
	mustMove claimFate = "must fail over"
	// mayMove: its pod runs on the lost node and its data on the lost
	// server (or where its data lives is not known): the pod may be
	// replaced or not, and writes again once the server is back.
	mayMove claimFate = "may fail over"
	// stallsInPlace: its pod runs elsewhere and its data on the lost
	// server: the pod stays, its writes stall until the server is back.
	stallsInPlace claimFate = "stays, stalls until its server is back"
	// staysWriting: neither its pod nor its data is on the lost node.
	staysWriting claimFate = "stays"
)

// claimExpect is the fate of a claim whose pod runs on podNode and whose
// data the server on holder holds ("" unknown), when node lost is lost.
func claimExpect(podNode, holder, lost string) claimFate {
	switch {
	case podNode == lost && holder != "" && holder != lost:
		return mustMove
	case podNode == lost:
		return mayMove
	case holder == lost:
		return stallsInPlace
	}
	return staysWriting
}
