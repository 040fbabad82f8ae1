package raftstate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/raft"

	"github.com/vigil-storage/vigil/datapath"
)

// The linearizability check: clients grant, fence, release and read the
// attachment tables of two volumes, and take their replicas out of sync
// and back (member epochs), through the group while servers are killed,
// restarted and cut off; porcupine checks the history against the
// sequential model below, which is the attachment table's rules
// (datapath.AttachTable) and the replica set's (datapath.ReplicaSet)
// applied one call at a time.

var linNodes = [3]string{"n1", "n2", "n3"}

// linServers are each volume's replicas: s1 holds it, s2 and s3 may fall
// out of sync and come back.
var linServers = [3]string{"s1", "s2", "s3"}

type linInput struct {
	op    string // grant, fence, release, read; out, in: replica out of sync, back in sync; force (force_lin_test.go)
	vol   int
	node  int // grant, fence, release
	use   datapath.GrantUse
	rep   int    // out, in: the replica (1 or 2)
	asked uint64 // out, in, force: the member epoch the client decided at
	// force: the replicas forced
	forced [3]bool
}

type linOutput struct {
	unknown bool // ErrNotCommitted: it may or may not have happened
	refused bool // ErrAttachedElsewhere
	stale   bool // ErrStaleMemberEpoch
	quorum  bool // ErrReplicaQuorum
	invalid bool // ErrInvalidArgument: not a replica, the holder, a force the rules refuse
	epoch   uint64
	rows    [3]datapath.AttachRow // read; Use as datapath.Attachment shows it
	// read, out, in: the volume's member epoch and in-sync replicas after it
	memberEpoch uint64
	inSync      [3]bool
}

// linState is one volume: the row of each node (zero: none), and its
// replica set (created with every replica in sync, at member epoch 1).
type linState struct {
	rows        [3]datapath.AttachRow
	outOfSync   [3]bool
	memberEpoch uint64
	// dropped: the replicas a force took out of the set; holder: the
	// index of the holder (s1 until a force moves it).
	dropped [3]bool
	holder  int
}

func (s linState) table() datapath.AttachTable {
	t := datapath.AttachTable{VolumeID: "vol-0000000000000000", Access: datapath.AccessRWO, Rows: map[string]datapath.AttachRow{}}
	for i, r := range s.rows {
		if r.State != "" {
			t.Rows[linNodes[i]] = r
			t.Epoch = max(t.Epoch, r.Epoch)
		}
	}
	return t
}

// inSync is the replicas in sync, as a read shows them.
func (s linState) inSync() [3]bool {
	var in [3]bool
	for i := range in {
		in[i] = !s.outOfSync[i] && !s.dropped[i]
	}
	return in
}

// shown is the rows as a read shows them (a row's use as GrantedUse).
func (s linState) shown() [3]datapath.AttachRow {
	rows := s.rows
	for i := range rows {
		if rows[i].State != "" {
			rows[i].Use = rows[i].GrantedUse()
		}
	}
	return rows
}

func linStep(state, input, output any) (bool, any) {
	s, in, out := state.(linState), input.(linInput), output.(linOutput)
	switch in.op {
	case "read":
		return out.rows == s.shown() && out.memberEpoch == s.memberEpoch && out.inSync == s.inSync(), s
	case "out", "in":
		return linReplicaStep(s, in, out)
	case "force":
		return linForceStep(s, in, out)
	}
	t, node := s.table(), linNodes[in.node]
	var (
		step datapath.AttachStep
		err  error
	)
	switch in.op {
	case "grant":
		step, err = t.Grant(node, in.use)
	case "fence":
		step, err = t.Fence(node)
	case "release":
		step, err = t.Release(node)
	}
	next := s
	if err == nil && step.Changed {
		next.rows[in.node] = step.Row
	}
	switch {
	case out.unknown:
		return true, next
	case out.refused:
		return errors.Is(err, datapath.ErrAttachedElsewhere), s
	case out.stale || out.quorum || out.invalid || err != nil:
		return false, s
	case in.op == "grant":
		return out.epoch == step.Row.Epoch, next
	case in.op == "fence":
		return out.epoch == step.Epoch, next
	}
	return true, next
}

// linReplicaStep is a replica's change as the specification says, written
// here apart from datapath.ReplicaSet so that a fault in those rules shows
// too: a change asked at another member epoch than the volume's is refused
// as stale; one that would leave fewer than 2 of the 3 in sync is refused
// at the floor; one that changes nothing keeps the member epoch; any other
// moves it on by one.
func linReplicaStep(s linState, in linInput, out linOutput) (bool, any) {
	next, inSync, r := s, 0, s.replicas()
	for _, ok := range s.inSync() {
		if ok {
			inSync++
		}
	}
	var wantErr error
	switch {
	case in.asked != s.memberEpoch:
		wantErr = datapath.ErrStaleMemberEpoch
	case s.dropped[in.rep] || in.op == "out" && in.rep == s.holder:
		wantErr = datapath.ErrInvalidArgument
	case s.outOfSync[in.rep] == (in.op == "out"): // nothing to change
	case in.op == "out" && inSync-1 < r/2+1:
		wantErr = datapath.ErrReplicaQuorum
	default:
		next.outOfSync[in.rep] = in.op == "out"
		next.memberEpoch++
	}
	switch {
	case out.unknown:
		return true, next
	case out.stale:
		return wantErr == datapath.ErrStaleMemberEpoch, s
	case out.quorum:
		return wantErr == datapath.ErrReplicaQuorum, s
	case out.invalid:
		return wantErr == datapath.ErrInvalidArgument, s
	case wantErr != nil || out.refused:
		return false, s
	}
	return out.memberEpoch == next.memberEpoch && out.inSync == next.inSync(), next
}

var linModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		var parts [3][]porcupine.Operation
		for _, op := range h {
			v := op.Input.(linInput).vol
			parts[v] = append(parts[v], op)
		}
		return parts[:]
	},
	Init:  func() any { return linState{memberEpoch: 1} }, // created replicated, at member epoch 1
	Step:  linStep,
	Equal: func(a, b any) bool { return a.(linState) == b.(linState) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		switch {
		case out.unknown:
			return fmt.Sprintf("%s(v%d, %s) -> unknown", in.op, in.vol, linNodes[in.node])
		case out.refused:
			return fmt.Sprintf("%s(v%d, %s) -> refused", in.op, in.vol, linNodes[in.node])
		case in.op == "read":
			return fmt.Sprintf("read(v%d) -> %v m%d %v", in.vol, out.rows, out.memberEpoch, out.inSync)
		case in.op == "force":
			return fmt.Sprintf("force(v%d, %v at m%d) -> stale %t invalid %t m%d %v", in.vol, in.forced, in.asked, out.stale, out.invalid, out.memberEpoch, out.inSync)
		case in.op == "out" || in.op == "in":
			return fmt.Sprintf("%s(v%d, %s at m%d) -> stale %t quorum %t m%d %v", in.op, in.vol, linServers[in.rep], in.asked, out.stale, out.quorum, out.memberEpoch, out.inSync)
		}
		return fmt.Sprintf("%s(v%d, %s) -> %d", in.op, in.vol, linNodes[in.node], out.epoch)
	},
	DescribeState: func(s any) string {
		st := s.(linState)
		return fmt.Sprintf("%v m%d %v dropped %v holder %d", st.shown(), st.memberEpoch, st.inSync(), st.dropped, st.holder)
	},
}

// linHistory collects operations from concurrent clients.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

// Least operations of each kind for a history worth checking.
const linMinChanges, linMinReads = 50, 20

// count returns the acknowledged changes and reads recorded so far.
func (h *linHistory) count() (changes, reads, unknown int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range h.ops {
		switch {
		case op.Output.(linOutput).unknown:
			unknown++
		case op.Input.(linInput).op == "read":
			reads++
		default:
			changes++
		}
	}
	return changes, reads, unknown
}

// linMinMembers is the least member epoch changes a history worth
// checking has.
const linMinMembers = 10

// memberCounts returns the replica changes that moved a member epoch, and
// those refused as stale and at the quorum floor.
func memberCounts(ops []porcupine.Operation) (moved, stale, floor int) {
	for _, op := range ops {
		in, out := op.Input.(linInput), op.Output.(linOutput)
		switch {
		case in.op != "out" && in.op != "in" && in.op != "force" || out.unknown:
		case out.stale:
			stale++
		case out.quorum:
			floor++
		case out.memberEpoch > in.asked:
			moved++
		}
	}
	return moved, stale, floor
}

func (h *linHistory) enough() bool {
	c, r, _ := h.count()
	h.mu.Lock()
	m, stale, _ := memberCounts(h.ops)
	forced := forcesDone(h.ops)
	h.mu.Unlock()
	return c >= linMinChanges && r >= linMinReads && m >= linMinMembers && stale > 0 && forced > 0
}

func (h *linHistory) add(client int, in linInput, out linOutput, call, ret int64) {
	if out.unknown {
		ret = math.MaxInt64 // it may take effect at any later time
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	h.mu.Unlock()
}

// linCall runs one operation: first at a random server that is up (as a
// client that does not know the leader), then, while the answer is
// ErrNotLeader, at the leader. It returns false when no server took it (so
// it certainly did not happen).
func linCall(c *testCluster, ids []string, in linInput, rng *rand.Rand) (linOutput, bool) {
	deadline := time.Now().Add(2 * time.Second)
	target := rng.IntN(len(c.ids))
	for time.Now().Before(deadline) {
		g := c.group(target)
		if g == nil {
			target = max(c.leader(), 0)
			time.Sleep(5 * time.Millisecond)
			continue
		}
		out, err := linDo(g, ids[in.vol], in)
		switch {
		case err == nil:
			return out, true
		case errors.Is(err, datapath.ErrAttachedElsewhere):
			return linOutput{refused: true}, true
		case errors.Is(err, datapath.ErrStaleMemberEpoch):
			return linOutput{stale: true}, true
		case errors.Is(err, datapath.ErrReplicaQuorum):
			return linOutput{quorum: true}, true
		case errors.Is(err, datapath.ErrInvalidArgument):
			return linOutput{invalid: true}, true
		case errors.Is(err, ErrNotLeader):
			target = max(c.leader(), 0)
			time.Sleep(5 * time.Millisecond)
		case in.op == "read":
			return linOutput{}, false // a read that failed changed nothing
		default:
			return linOutput{unknown: true}, true
		}
	}
	return linOutput{}, false
}

func linDo(g *Group, id string, in linInput) (linOutput, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	node := linNodes[in.node]
	var (
		out linOutput
		err error
	)
	switch in.op {
	case "grant":
		out.epoch, err = g.Grant(ctx, id, node, in.use)
	case "fence":
		out.epoch, err = g.Fence(ctx, id, node)
	case "release":
		err = g.Release(ctx, id, node)
	case "out", "in":
		var v Volume
		if in.op == "out" {
			v, err = g.MarkReplicaOutOfSync(ctx, id, linServers[in.rep], in.asked, "", 0)
		} else {
			v, err = g.MarkReplicaInSync(ctx, id, linServers[in.rep], in.asked)
		}
		out.memberEpoch, out.inSync = linReplicas(v)
	case "force":
		var v Volume
		v, err = g.ForceReplicas(ctx, id, in.forcedIDs(), in.asked, "the controller (lin)", "linearizability check")
		out.memberEpoch, out.inSync = linReplicas(v)
	case "read":
		// The table and the replica set read together, after a barrier.
		if err = g.current(ctx); err != nil {
			break
		}
		v, rows, ok := g.fsm.VolumeTable(id)
		if !ok {
			return out, fmt.Errorf("%w: volume %s", datapath.ErrNotFound, id)
		}
		out.memberEpoch, out.inSync = linReplicas(v)
		for _, a := range rows {
			for i, n := range linNodes {
				if a.Node == n {
					out.rows[i] = datapath.AttachRow{Epoch: a.Epoch, State: a.State, Use: a.Use}
				}
			}
		}
	}
	return out, err
}

// linReplicas is a volume's member epoch and which of linServers are in
// sync.
func linReplicas(v Volume) (uint64, [3]bool) {
	set := v.ReplicaSet()
	var in [3]bool
	for i, id := range linServers {
		in[i] = slices.Contains(set.InSync, id)
	}
	return set.MemberEpoch, in
}

func linClient(c *testCluster, ids []string, h *linHistory, client int, until time.Time) {
	rng := rand.New(rand.NewPCG(uint64(client), 7))
	ops := []string{"grant", "grant", "fence", "release", "read", "read", "out", "in", "force"}
	uses := []datapath.GrantUse{datapath.UseReadWrite, datapath.UseReadOnly}
	seen := [3]uint64{1, 1, 1} // the member epoch this client last learned of each volume (a replicated one is created at 1)
	// Past until, go on (faults over) until the history is long enough to
	// mean something, for at most as long again: a loaded machine is slow.
	for now := time.Now(); now.Before(until) || !h.enough() && now.Before(until.Add(until.Sub(h.start))); now = time.Now() {
		in := linInput{op: ops[rng.IntN(len(ops))], vol: rng.IntN(3), node: rng.IntN(3), use: uses[rng.IntN(2)], rep: 1 + rng.IntN(2)}
		if in.op == "force" {
			in.vol, in.forced = 2, linForced[rng.IntN(len(linForced))] // the third volume only: a force shrinks it for good
		}
		in.asked = seen[in.vol]
		call := h.now()
		out, ok := linCall(c, ids, in, rng)
		ret := h.now()
		if ok {
			h.add(client, in, out, call, ret)
		}
		switch {
		case out.stale || out.unknown:
			seen[in.vol]++ // a guess; a wrong one is refused as stale, which the check wants too
		case ok && (in.op == "read" || in.op == "out" || in.op == "in" || in.op == "force") && !out.quorum && !out.invalid:
			seen[in.vol] = out.memberEpoch
		}
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
}

// nemesis disturbs one server at a time, in turn: kills the leader and
// restarts it, cuts the leader off and heals it, cuts a follower off and
// heals it, restarts a follower.
func nemesis(c *testCluster, until time.Time, log func(string, ...any)) {
	for k := 0; time.Now().Before(until); k++ {
		time.Sleep(150 * time.Millisecond)
		l := c.leader()
		if l < 0 {
			continue
		}
		f := (l + 1 + k%2) % len(c.ids)
		switch k % 4 {
		case 0:
			log("kill leader %s", c.ids[l])
			c.kill(l)
			time.Sleep(250 * time.Millisecond)
			c.start(l)
		case 1:
			log("cut off leader %s", c.ids[l])
			c.setCut(l, true)
			time.Sleep(300 * time.Millisecond)
			c.setCut(l, false)
		case 2:
			log("cut off follower %s", c.ids[f])
			c.setCut(f, true)
			time.Sleep(300 * time.Millisecond)
			c.setCut(f, false)
		case 3:
			log("restart follower %s", c.ids[f])
			c.kill(f)
			time.Sleep(100 * time.Millisecond)
			c.start(f)
		}
	}
}

// dumpLogs writes every server's log (index, term, command) to a file
// next to the drawn history, to see where the servers disagree.
func dumpLogs(t *testing.T, c *testCluster) {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("raftstate-%s-logs.txt", t.Name()))
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	for i := range c.ids {
		g := c.group(i)
		if g == nil {
			continue
		}
		first, _ := g.logs.FirstIndex()
		last, _ := g.logs.LastIndex()
		fmt.Fprintf(f, "== %s first %d last %d commit %d applied %d\n", c.ids[i], first, last, g.raft.CommitIndex(), g.raft.AppliedIndex())
		for idx := first; idx <= last && idx > 0; idx++ {
			var l raft.Log
			if err := g.logs.GetLog(idx, &l); err != nil {
				fmt.Fprintf(f, "%d: %v\n", idx, err)
				continue
			}
			cmd, _ := decodeCommand(l.Data)
			fmt.Fprintf(f, "%d t%d %s %s %s %s %s\n", l.Index, l.Term, l.Type, cmd.Op, cmd.VolumeID, cmd.Node, cmd.Use)
		}
	}
	t.Logf("server logs in %s", path)
}

// runLinearizability runs clients and the nemesis for d and returns the
// history.
func runLinearizability(t *testing.T, d time.Duration) []porcupine.Operation {
	c := newTestCluster(t, 3)
	var ids []string
	for _, name := range []string{"pv-a", "pv-b", "pv-c"} {
		var id string
		err := c.retry(3*time.Second, func(g *Group) error {
			v, err := g.CreateReplicatedVolume(bg, newVolumeID(), name, 1<<20, datapath.AccessRWO, linServers[:])
			id = v.ID
			return err
		})
		ids = append(ids, id)
		if err != nil {
			t.Fatal(err)
		}
	}
	h := &linHistory{start: time.Now()}
	until := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); linClient(c, ids, h, i, until) }(i)
	}
	nemesis(c, until, t.Logf)
	wg.Wait()
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, c)
		}
	})
	return h.ops
}

func checkHistory(t *testing.T, ops []porcupine.Operation) porcupine.CheckResult {
	res, info := porcupine.CheckOperationsVerbose(linModel, ops, 20*time.Second)
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("raftstate-%s.html", t.Name()))
		if err := porcupine.VisualizePath(linModel, info, path); err == nil {
			t.Logf("history drawn in %s", path)
		}
	}
	return res
}

// TestLinearizability_GrantsFencesReleasesUnderFaults: every answer the
// group gave, while its leader was killed and cut off and its followers cut
// off and restarted, fits one sequential order of the attachment rules; so
// no acknowledged epoch was lost or went back, and no read was stale.
func TestLinearizability_GrantsFencesReleasesUnderFaults(t *testing.T) {
	ops := runLinearizability(t, 3*time.Second)
	writes, reads, unknown := (&linHistory{ops: ops}).count()
	members, stale, floor := memberCounts(ops)
	forced := forcesDone(ops)
	t.Logf("history: %d acknowledged changes (%d of them member epochs, %d forces), %d reads, %d of unknown outcome; refused: %d at a stale member epoch, %d at the quorum floor",
		writes, members, forced, reads, unknown, stale, floor)
	if writes < linMinChanges || reads < linMinReads || members < linMinMembers || stale == 0 || forced == 0 {
		t.Fatalf("too few operations to check: %d changes, %d member epochs, %d forces, %d reads, %d stale", writes, members, forced, reads, stale)
	}
	if res := checkHistory(t, ops); res != porcupine.Ok {
		t.Fatalf("porcupine: the history is not linearizable (%s)", res)
	}
}

// TestLinearizability_CheckerCatchesAStaleRead breaks reads on purpose: a
// server answers from its own state, as a follower cut off from the leader
// would, and the checker must call the history illegal. It proves the
// check above can fail.
func TestLinearizability_CheckerCatchesAStaleRead(t *testing.T) {
	c := newTestCluster(t, 3)
	v := createAndGrant(t, c)
	l := c.waitLeader(time.Second)
	f := (l + 1) % 3
	c.waitLocal(f, v.ID, 3*time.Second, func(_ Volume, rows []datapath.Attachment) bool { return len(rows) == 1 })
	c.setCut(f, true)
	h := &linHistory{start: time.Now()}
	call := h.now()
	e := fence(t, c, v.ID, "n1", 1)
	h.add(0, linInput{op: "fence", node: 0}, linOutput{epoch: e}, call, h.now())
	call = h.now()
	stale, err := c.group(f).Local().Attachments(v.ID) // the broken read
	if err != nil {
		t.Fatal(err)
	}
	readOf := func(rows []datapath.Attachment) linOutput {
		out := linOutput{memberEpoch: 1, inSync: [3]bool{true, true, true}} // the model's volumes start with every replica in sync, at member epoch 1
		out.rows[0] = datapath.AttachRow{Epoch: rows[0].Epoch, State: rows[0].State, Use: rows[0].Use}
		return out
	}
	granted := porcupine.Operation{ClientId: 2, Input: linInput{op: "grant", node: 0, use: datapath.UseReadWrite}, Output: linOutput{epoch: 1}, Call: -2, Return: -1}
	fresh, err := c.group(c.waitLeader(time.Second)).Attachments(bg, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	ok := append([]porcupine.Operation{granted}, h.ops...)
	ok = append(ok, porcupine.Operation{ClientId: 1, Input: linInput{op: "read"}, Output: readOf(fresh), Call: call, Return: h.now()})
	if res := checkHistory(t, ok); res != porcupine.Ok {
		t.Fatalf("the history with a current read %+v failed the check (%s): the model is wrong, not the read", fresh, res)
	}
	h.add(1, linInput{op: "read", node: 0}, readOf(stale), call, h.now())
	ops := append([]porcupine.Operation{granted}, h.ops...)
	if res := checkHistory(t, ops); res != porcupine.Illegal {
		t.Fatalf("a read of %+v after a fence to epoch %d passed the check (%s)", stale, e, res)
	}
}
