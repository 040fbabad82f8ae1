package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/vigil-storage/vigil/sandbox"
)

// ErrBadConfig: a CHAOS_* setting has a value that is not allowed.
var ErrBadConfig = errors.New("bad chaos config")

// Kind is a kind of fault a cycle injects.
type Kind string

// The fault kinds a chaos cycle draws from.
const (
	// PowerCut: the node's kwok, engine, kubelet stand-in and writers get SIGKILL;
	// the node starts again once its pods run elsewhere.
	PowerCut Kind = "power-cut"
	// ShortPartition: a cut shorter than the detection threshold of its target;
	// nothing may fail over.
	ShortPartition Kind = "short-partition"
	// PartitionAPIServer: a long cut from the API server only: a zombie that still
	// reaches the datapath; the fence must refuse its writes.
	PartitionAPIServer Kind = "partition-apiserver"
	// PartitionDatapath: a long cut from the datapath only: storage-isolated
	// while Kubernetes calls the node Ready.
	PartitionDatapath Kind = "partition-datapath"
	// PartitionAll: a long cut from everything.
	PartitionAll Kind = "partition-all"
	// Flapping: several cuts, each shorter than the detection threshold, with
	// short heals between them; nothing may fail over.
	Flapping Kind = "flapping"
	// ManagerKillFence: a power cut, and SIGKILL of the leading manager as soon as
	// the datapath shows the node's first fence.
	ManagerKillFence Kind = "manager-kill-mid-fence"
	// ManagerKillReap: a power cut, and SIGKILL of the leading manager as soon as
	// the first covered pod of the node is gone.
	ManagerKillReap Kind = "manager-kill-mid-reap"
	// EngineKill: SIGKILL of a node's engine, restarted shortly after (as the
	// DaemonSet would).
	EngineKill Kind = "engine-kill"
	// DatapathRestart: SIGKILL of the datapath, started again shortly after.
	// The host's page cache survives it, so it proves nothing about fsync.
	DatapathRestart Kind = "datapath-restart"
	// DatapathPowerCut: a power cut of the datapath's machine: SIGKILL of the
	// datapath and of the power-loss layer under its data directory at once,
	// so what it had not fsynced is gone; both start again shortly after.
	DatapathPowerCut Kind = "datapath-power-cut"
	// APIServerRestart: a restart (SIGTERM, start) of kube-apiserver.
	APIServerRestart Kind = "apiserver-restart"
	// ClusterAPIServerCut: every node cut off from the API server only (a load
	// balancer failing for the kubelets), for longer than Kubernetes takes to
	// call them Unknown plus the grace, while every engine still reaches the
	// datapath: a control-plane outage; nothing may fail over or be fenced.
	ClusterAPIServerCut Kind = "cluster-apiserver-cut"
	// PartitionHealsAfterFence: a node cut off from everything, healed as soon
	// as the datapath shows its first fence, before the manager reaps (the
	// node-down grace runs after an isolation fence): the fenced pods must not
	// stay stranded on their fenced volumes; the manager reaps them once the
	// node is back (decideReturned) and they run elsewhere.
	PartitionHealsAfterFence Kind = "partition-heals-after-fence"
	// FenceUncoveredPod: a pod the policy does not cover (vigil.io/reap:
	// "false", on a volume of its own) runs on a node that is then powered off
	// or cut off for long: the covered pods fail over, the opted-out pod stays,
	// and once the node is back its writes succeed again.
	FenceUncoveredPod Kind = "fence-uncovered-pod"

	// The kinds of a run with the datapath as a group of servers on nodes
	// (CHAOS_DATAPATH_SERVERS=3):

	// DatapathLeaderPowerCut: a power cut of the node of the group's leader,
	// which starts again at the cycle's end. The covered pods of the node
	// whose volume lives on another server fail over; a volume held by the
	// cut server is unavailable until it is back (ServerLoss).
	DatapathLeaderPowerCut Kind = "datapath-leader-power-cut"
	// DatapathServerPartition: one server (the leader or a follower) cut off
	// from the other two (sandbox.PartitionDatapathGroup), then healed; its
	// clients still reach it, and a fence sent to it while it is cut off must
	// fail or be forwarded, never succeed from its stale state.
	DatapathServerPartition Kind = "datapath-server-partition"
	// DatapathRollingRestart: each server in turn stopped gracefully
	// (SIGTERM: a leader hands its leadership over) and started again, the
	// next one only once it is back in the group.
	DatapathRollingRestart Kind = "datapath-rolling-restart"
)

// HostKinds are the kinds of a run with the one datapath server on the host
// (the default), in the order of the report. Their draws do not depend on
// the server kinds: a run draws from one list or the other.
var HostKinds = []Kind{PowerCut, ShortPartition, PartitionAPIServer, PartitionDatapath, PartitionAll, Flapping,
	ManagerKillFence, ManagerKillReap, EngineKill, DatapathRestart, APIServerRestart, ClusterAPIServerCut, DatapathPowerCut,
	PartitionHealsAfterFence, FenceUncoveredPod}

// ServerKinds are the kinds of a run with the datapath as a group of
// GroupServers servers on nodes. A volume's reads go to its holder alone,
// which never leaves the in-sync set, so even a volume of three copies
// waits for its holder's server: a run with servers on nodes draws only
// these, since a host kind that cuts a node would take the volumes its
// server holds with it, which its expectations (a failover within its
// bound) do not allow for.
var ServerKinds = []Kind{DatapathLeaderPowerCut, DatapathServerPartition, DatapathRollingRestart}

// AllKinds is every kind, in the order of the report.
var AllKinds = append(slices.Clone(HostKinds), ServerKinds...)

// GroupServers is the one count of datapath servers on nodes a run takes
// (CHAOS_DATAPATH_SERVERS): the smallest group that survives the loss of one.
const GroupServers = 3

// needsLoop: the kinds whose recovery needs the manager to fence, reap and free
// attachments by itself (the closed loop); without it their covered pods never
// come back and every later cycle would be meaningless.
var needsLoop = map[Kind]bool{PowerCut: true, PartitionAPIServer: true, PartitionDatapath: true, PartitionAll: true,
	ManagerKillFence: true, ManagerKillReap: true, PartitionHealsAfterFence: true, FenceUncoveredPod: true,
	DatapathLeaderPowerCut: true}

// NeedsLoop reports whether k can only recover with the manager's closed loop.
func (k Kind) NeedsLoop() bool { return needsLoop[k] }

// NeedsServers reports whether k runs only with the datapath's servers on nodes.
func (k Kind) NeedsServers() bool { return slices.Contains(ServerKinds, k) }

// ParseKinds reads CHAOS_FAULTS for a run with servers datapath servers on
// nodes (0: the one host server): "auto" (or empty) is every kind of that
// run that can recover with the manager at hand (all of them when loop is
// true), "all" is every kind of that run, otherwise a comma-separated list
// of kind names, all of that run.
func ParseKinds(s string, loop bool, servers int) ([]Kind, error) {
	pool := HostKinds
	if servers > 0 {
		pool = ServerKinds
	}
	switch strings.TrimSpace(s) {
	case "", "auto":
		var out []Kind
		for _, k := range pool {
			if loop || !k.NeedsLoop() {
				out = append(out, k)
			}
		}
		return out, nil
	case "all":
		return slices.Clone(pool), nil
	}
	var out []Kind
	for _, name := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(name))
		if !slices.Contains(AllKinds, k) {
			return nil, fmt.Errorf("%w: %s: unknown fault %q: want auto, all or a comma-separated list of %s",
				ErrBadConfig, EnvFaults, k, kindNames(AllKinds))
		}
		if k.NeedsServers() != (servers > 0) {
			return nil, fmt.Errorf("%w: %s: fault %q %s; a run draws from %s, or with %s=%d from %s",
				ErrBadConfig, EnvFaults, k, runsWhere(k, servers), kindNames(HostKinds), EnvDatapathServers, GroupServers, kindNames(ServerKinds))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// runsWhere says why k does not fit a run with servers servers on nodes.
func runsWhere(k Kind, servers int) string {
	if k.NeedsServers() {
		return fmt.Sprintf("needs the datapath as a group of servers on nodes (%s=%d)", EnvDatapathServers, GroupServers)
	}
	return fmt.Sprintf("runs with the one datapath server on the host, not with %s=%d", EnvDatapathServers, servers)
}

func kindNames(kinds []Kind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// Expect is what a fault must lead to.
type Expect string

const (
	// NoFailover: every covered pod keeps running where it is, with the same
	// UID, and its writer writes again once the fault is over.
	NoFailover Expect = "no-failover"
	// Failover: the covered pods of the node are replaced elsewhere and write again.
	Failover Expect = "failover"
	// Either: a failover may happen or not; the pods must run and write again.
	Either Expect = "either"
	// ServerLoss: a node that runs a datapath server is lost for a while.
	// Each claim's expectation follows from where its pod runs and which
	// server holds its volume's data (claimExpect): a pod of the node whose
	// volume lives on another server fails over; a pod of the node whose
	// volume lives on the node's own server may fail over or not and writes
	// again once the server is back; every other pod stays where it is,
	// stalls only if its volume lives on the lost server, and writes again
	// once it is back; no other node is fenced.
	ServerLoss Expect = "server-loss"
)

// Thresholds are the detection thresholds a fault's durations are drawn against.
type Thresholds struct {
	// NodeMonitorGrace: how long before Kubernetes calls a silent node NotReady.
	NodeMonitorGrace time.Duration
	// Connectivity: datapath-connectivity-loss-threshold, how long without a
	// heartbeat before the node is storage-isolated.
	Connectivity time.Duration
}

// of is the detection threshold of a cut from target: the shortest time after
// which something notices.
func (th Thresholds) of(target sandbox.PartitionTarget) time.Duration {
	switch target {
	case sandbox.PartitionAPIServer:
		return th.NodeMonitorGrace
	case sandbox.PartitionDatapath:
		return th.Connectivity
	}
	return min(th.NodeMonitorGrace, th.Connectivity)
}

// Env is what a draw may choose from.
type Env struct {
	// Nodes: every node; PodNodes: the nodes running covered pods; both sorted.
	Nodes, PodNodes []string
	Thresholds      Thresholds
	// Loop: the manager fences and reaps by itself.
	Loop bool
	// Servers: the nodes of the datapath's servers, sorted; none when the
	// one server runs on the host.
	Servers []string
}

// Fault is one cycle's fault, fully determined by its seed and the Env.
type Fault struct {
	Cycle int    `json:"cycle"`
	Seed  uint64 `json:"seed"`
	Kind  Kind   `json:"kind"`
	// Node is the node the fault hits ("" for the datapath and the API server).
	Node   string                  `json:"node,omitempty"`
	Target sandbox.PartitionTarget `json:"target,omitempty"`
	// Cut is a short partition's length, or each cut of a flapping node.
	Cut time.Duration `json:"cut,omitempty"`
	// Up is the healed time between two flaps; Flaps the number of cuts.
	Up    time.Duration `json:"up,omitempty"`
	Flaps int           `json:"flaps,omitempty"`
	// Down is how long a killed process (engine, datapath) stays down, or how
	// long a failed node stays off or cut after its pods run elsewhere.
	Down time.Duration `json:"down,omitempty"`
	// Role is the role of the server a datapath-server-partition cuts off
	// (RoleLeader or RoleFollower; which follower follows from the seed).
	Role   string `json:"role,omitempty"`
	Expect Expect `json:"expect"`
}

// The roles a server partition draws.
const (
	RoleLeader   = "leader"
	RoleFollower = "follower"
)

// String is the one line a cycle prints before it runs.
func (f Fault) String() string {
	s := fmt.Sprintf("cycle %d seed %d: %s", f.Cycle, f.Seed, f.Kind)
	switch {
	case f.Kind == DatapathLeaderPowerCut:
		s += " of the leader's node"
	case f.Kind == DatapathServerPartition:
		s += " of the " + f.Role + "'s server from the other two"
	case f.Kind == DatapathRollingRestart:
		s += " starting with " + f.Node
	case f.Node != "":
		s += " on " + f.Node
	}
	if f.Target != "" {
		s += " from " + string(f.Target)
	} else if f.Kind == FenceUncoveredPod {
		s += " by a power cut"
	}
	if f.Flaps > 0 {
		s += fmt.Sprintf(", %d cuts of %s with %s between", f.Flaps, f.Cut.Round(time.Millisecond), f.Up.Round(time.Millisecond))
	} else if f.Cut > 0 {
		s += fmt.Sprintf(" for %s", f.Cut.Round(time.Millisecond))
	}
	if f.Down > 0 {
		s += fmt.Sprintf(", down %s", f.Down.Round(time.Millisecond))
	}
	return s + ", expect " + string(f.Expect)
}

// CycleSeed derives the seed of cycle i from the run's seed (SplitMix64), so
// that any cycle can be replayed on its own with CHAOS_REPLAY.
func CycleSeed(runSeed uint64, i int) uint64 {
	z := runSeed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Draw picks the fault of a cycle from its seed: the kind among kinds, then the
// node and the durations. The same seed, kinds and env give the same fault.
func Draw(cycle int, seed uint64, kinds []Kind, env Env) (Fault, error) {
	if len(kinds) == 0 || len(env.Nodes) == 0 {
		return Fault{}, fmt.Errorf("%w: nothing to draw from (%d kinds, %d nodes)", ErrBadConfig, len(kinds), len(env.Nodes))
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	f := Fault{Cycle: cycle, Seed: seed, Kind: kinds[rng.IntN(len(kinds))], Expect: NoFailover}
	if f.Kind.NeedsServers() {
		return drawServerFault(f, rng, env)
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	frac := func(d time.Duration, lo, hi float64) time.Duration {
		return time.Duration(float64(d) * (lo + rng.Float64()*(hi-lo)))
	}
	pick := func(nodes []string) string {
		if len(nodes) == 0 {
			nodes = env.Nodes
		}
		return nodes[rng.IntN(len(nodes))]
	}
	targets := []sandbox.PartitionTarget{sandbox.PartitionAPIServer, sandbox.PartitionDatapath, sandbox.PartitionAll}
	switch f.Kind {
	case ShortPartition:
		f.Node, f.Target = pick(env.PodNodes), targets[rng.IntN(len(targets))]
		f.Cut = frac(env.Thresholds.of(f.Target), 0.3, 0.6)
	case Flapping:
		f.Node, f.Target = pick(env.PodNodes), sandbox.PartitionAll
		f.Flaps, f.Cut, f.Up = 3+rng.IntN(4), frac(env.Thresholds.of(f.Target), 0.3, 0.6), between(time.Second, 3*time.Second)
	case EngineKill:
		f.Node, f.Down = pick(env.Nodes), between(200*time.Millisecond, time.Second)
		if env.Loop {
			f.Expect = Either // a restart slower than the threshold is a crash the manager acts on
		}
	case DatapathRestart, DatapathPowerCut:
		f.Down = between(500*time.Millisecond, 2*time.Second)
	case APIServerRestart:
	case ClusterAPIServerCut:
		f.Target = sandbox.PartitionAPIServer
		f.Cut = env.Thresholds.NodeMonitorGrace + between(5*time.Second, 10*time.Second)
	case PowerCut, ManagerKillFence, ManagerKillReap:
		f.Node, f.Down, f.Expect = pick(env.PodNodes), between(0, 10*time.Second), Failover
	case PartitionAPIServer, PartitionDatapath, PartitionAll:
		f.Node, f.Down, f.Expect = pick(env.PodNodes), between(0, 10*time.Second), Failover
		f.Target = map[Kind]sandbox.PartitionTarget{PartitionAPIServer: sandbox.PartitionAPIServer,
			PartitionDatapath: sandbox.PartitionDatapath, PartitionAll: sandbox.PartitionAll}[f.Kind]
	case PartitionHealsAfterFence:
		// From everything: an isolation fence comes at once and the reap only
		// after node-down-grace-period, which is the window; a cut from the
		// API server only is fenced and reaped at the same moment.
		f.Node, f.Target, f.Expect = pick(env.PodNodes), sandbox.PartitionAll, Either
	case FenceUncoveredPod:
		// "" is a power cut.
		uncoveredTargets := []sandbox.PartitionTarget{"", sandbox.PartitionDatapath, sandbox.PartitionAll}
		f.Node, f.Target, f.Expect = pick(env.PodNodes), uncoveredTargets[rng.IntN(len(uncoveredTargets))], Failover
		f.Down = between(0, 10*time.Second)
	}
	return f, nil
}

// drawServerFault draws the rest of a fault of ServerKinds, whose kind f has.
func drawServerFault(f Fault, rng *rand.Rand, env Env) (Fault, error) {
	if len(env.Servers) != GroupServers {
		return f, fmt.Errorf("%w: %s needs %d datapath servers on nodes, the run has %d (%s=%d)",
			ErrBadConfig, f.Kind, GroupServers, len(env.Servers), EnvDatapathServers, GroupServers)
	}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	switch f.Kind {
	case DatapathLeaderPowerCut:
		f.Down, f.Expect = between(2*time.Second, 10*time.Second), ServerLoss
	case DatapathServerPartition:
		// Longer than an election, so that a cut leader is replaced.
		f.Role, f.Cut = []string{RoleLeader, RoleFollower}[rng.IntN(2)], between(4*time.Second, 12*time.Second)
	case DatapathRollingRestart:
		f.Node = env.Servers[rng.IntN(len(env.Servers))]
	}
	return f, nil
}
