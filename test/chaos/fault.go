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
)

// AllKinds is every kind, in the order of the report.
var AllKinds = []Kind{PowerCut, ShortPartition, PartitionAPIServer, PartitionDatapath, PartitionAll, Flapping,
	ManagerKillFence, ManagerKillReap, EngineKill, DatapathRestart, APIServerRestart, ClusterAPIServerCut, DatapathPowerCut,
	PartitionHealsAfterFence, FenceUncoveredPod}

// needsLoop: the kinds whose recovery needs the manager to fence, reap and free
// attachments by itself (the closed loop); without it their covered pods never
// come back and every later cycle would be meaningless.
var needsLoop = map[Kind]bool{PowerCut: true, PartitionAPIServer: true, PartitionDatapath: true, PartitionAll: true,
	ManagerKillFence: true, ManagerKillReap: true, PartitionHealsAfterFence: true, FenceUncoveredPod: true}

// NeedsLoop reports whether k can only recover with the manager's closed loop.
func (k Kind) NeedsLoop() bool { return needsLoop[k] }

// ParseKinds reads CHAOS_FAULTS: "auto" (or empty) is every kind that can
// recover with the manager at hand (all of them when loop is true), "all" is
// every kind, otherwise a comma-separated list of kind names.
func ParseKinds(s string, loop bool) ([]Kind, error) {
	switch strings.TrimSpace(s) {
	case "", "auto":
		var out []Kind
		for _, k := range AllKinds {
			if loop || !k.NeedsLoop() {
				out = append(out, k)
			}
		}
		return out, nil
	case "all":
		return slices.Clone(AllKinds), nil
	}
	var out []Kind
	for _, name := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(name))
		if !slices.Contains(AllKinds, k) {
			names := make([]string, len(AllKinds))
			for i, a := range AllKinds {
				names[i] = string(a)
			}
			return nil, fmt.Errorf("%w: CHAOS_FAULTS: unknown fault %q: want auto, all or a comma-separated list of %s",
				ErrBadConfig, k, strings.Join(names, ", "))
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
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
	Down   time.Duration `json:"down,omitempty"`
	Expect Expect        `json:"expect"`
}

// String is the one line a cycle prints before it runs.
func (f Fault) String() string {
	s := fmt.Sprintf("cycle %d seed %d: %s", f.Cycle, f.Seed, f.Kind)
	if f.Node != "" {
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
