package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	dpclient "github.com/vigil-storage/vigil/datapath/client"
	"github.com/vigil-storage/vigil/datapath/csi"
	"github.com/vigil-storage/vigil/sandbox"
)

// The sandbox of TestDatapathServers: 4 nodes, 3 datapath servers on the
// first 3.
var serversSandbox = serversSpec{name: "e2e-servers", subnet: "10.213.160.0/24", workDir: "vigil-e2e-servers"}

// serversNS is the namespace of TestDatapathServers/LeaderPowerCut's pod.
const serversNS = "servers"

// serversSpec names a sandbox of datapath servers on nodes: a name, subnet
// and work directory of its own, so that it never meets another's leftovers.
type serversSpec struct {
	name, subnet, workDir string
}

// serversEnv is a sandbox of 4 kwok nodes whose datapath is 3 servers in one
// control group on the first 3, and a client of the group as the manager.
type serversEnv struct {
	s   *sandbox.Sandbox
	stk *sandbox.Stack
	ctl *dpclient.Client
	// replicated is what ReplicaPowerCut leaves to the cases after it.
	replicated *replicatedRun
	// dir outlives the cases: where a writer's ledger that one case leaves
	// to the next is kept.
	dir string
}

// TestDatapathServers: the datapath as three servers in one control group,
// each a process of its node (node-1 to node-3 of four kwok nodes, each with
// its engine and the kubelet stand-in), one sandbox for its cases, in order:
// LeaderPowerCut (the client's fence through the new leader),
// PodOnLeaderNode (a pod on the leader's node, recovered by the closed loop)
// and ReplicaPowerCut (a replica's node cut under a writer of a volume of
// three copies).
func TestDatapathServers(t *testing.T) {
	e := upServers(t, serversSandbox)
	runLoopCases(t, []loopCase{
		{"LeaderPowerCut", e.testLeaderPowerCut},
		{"PodOnLeaderNode", e.testPodOnLeaderNode},
		{"ReplicaPowerCut", e.testReplicaPowerCut},
		{"ReplicaQuorumLoss", e.testReplicaQuorumLoss},
	})
}

// testLeaderPowerCut: the leader's node is powered off; nothing but the
// datapath's group and the test's client acts.
//
//  1. Every server answers and one leads. A volume per other server's node
//     is created with its data on the leader and granted to the node, which
//     writes at its epoch.
//  2. The first leader's server is restarted (SIGTERM: it hands the
//     leadership over first), so the leader is now a server that does not
//     hold the volumes.
//  3. The new leader's node is powered off. Measured: the time to a new
//     leader, and to the first committed fence of the cut node on its
//     volume (held by a server that is not cut).
//  4. A new claim is provisioned, attached and mounted on node-4 and
//     written through.
//  5. The cut node is powered on: its write at its old epoch is refused.
func (e *serversEnv) testLeaderPowerCut(t *testing.T) {
	s, stk, ctl := e.s, e.stk, e.ctl
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	first := waitDatapathLeader(t, ctx, s, "")
	// A create places the data on the roomiest server, the first a client
	// lists among equals (one disk here): this one lists the first leader
	// first.
	creator := dialServers(t, ctx, stk, stk.TokenFile, first.Address)
	defer creator.Close()
	vols := map[string]grantedVolume{}
	for _, srv := range stk.DatapathServers {
		if srv.Node != first.Node {
			vols[srv.Node] = grantAndWrite(t, ctx, s, stk, creator, first.Address, srv.Node)
		}
	}
	if _, err := s.RestartProcess(first.Node, sandbox.StackDatapath, 10*time.Second); err != nil {
		t.Fatalf("restart the leader's server on %s: %v", first.Node, err)
	}
	victim := waitDatapathLeader(t, ctx, s, first.Node)
	v, ok := vols[victim.Node]
	if !ok {
		t.Fatalf("the leader after the handover is %s, which runs no server of the group", victim.Node)
	}
	holder := groupHolder(t, ctx, ctl, v.id)
	if holder == victim.Node {
		t.Fatalf("%s's volume %s is held by %s itself: its power cut would take the volume with it", victim.Node, v.id, holder)
	}
	t.Logf("leader %s handed over to %s; %s's volume %s is held by %s at epoch %d", first.Node, victim.Node, victim.Node, v.id, holder, v.epoch)

	cut := cutLeader(t, ctx, s, ctl, victim, v)
	t.Logf("FIGURE power cut of the leader's node %s: new leader %s after %.2fs; first committed fence (volume %s of %s, held by %s, epoch %d) after %.2fs",
		victim.Node, cut.next.Node, cut.leader.Seconds(), v.id, victim.Node, holder, cut.epoch, cut.fence.Seconds())
	if cut.leader > 3*time.Second {
		t.Logf("the new leader took %.2fs, past the 3 s target", cut.leader.Seconds())
	}

	mountNewClaim(t, ctx, s, sandbox.NodeName(3))

	must(t, s.Start(victim.Node))
	zombie := dialServers(t, ctx, stk, sandbox.NodeTokenFile(s.NodeDir(victim.Node)), first.Address)
	defer zombie.Close()
	err := zombie.WriteAt(ctx, v.id, victim.Node, v.epoch, 0, []byte("zombie"))
	if !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("the returning node's write at its old epoch %d: %v, want ErrFenced", v.epoch, err)
	}
	e.deleteLeaderCutVolumes(t, ctx, vols)
}

// deleteLeaderCutVolumes deletes what testLeaderPowerCut made, so that the
// next case starts on a group that holds no volume: its volumes (each
// node's row released first) and the new claim with its pod.
func (e *serversEnv) deleteLeaderCutVolumes(t *testing.T, ctx context.Context, vols map[string]grantedVolume) {
	t.Helper()
	c := e.s.Client()
	for node, v := range vols {
		if err := e.ctl.Release(ctx, v.id, node); err != nil && !errors.Is(err, datapath.ErrFenced) {
			t.Fatalf("release %s on %s: %v", node, v.id, err)
		}
		must(t, e.ctl.DeleteVolume(ctx, v.id))
	}
	zero := int64(0)
	must(t, c.CoreV1().Pods(serversNS).Delete(ctx, newClaimName, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	must(t, c.CoreV1().PersistentVolumeClaims(serversNS).Delete(ctx, newClaimName, metav1.DeleteOptions{}))
	must(t, sandbox.Poll(ctx, 90*time.Second, "every volume of the group deleted", func(ctx context.Context) (bool, string, error) {
		vs, err := e.ctl.GroupVolumes(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return len(vs) == 0, fmt.Sprintf("%d left: %+v", len(vs), vs), nil
	}, describeStack(e.s)))
}

// leaderCut is what cutLeader measured.
type leaderCut struct {
	next   sandbox.DatapathServerStatus // the new leader
	leader time.Duration                // power cut → a new leader
	fence  time.Duration                // power cut → the first committed fence
	epoch  uint64                       // the fence's epoch
}

// cutLeader powers off the node of the leading server victim, waits for a
// new leader and fences the node on v (granted to it, held by another
// server) until a fence is committed; it returns the times from the cut.
func cutLeader(t *testing.T, ctx context.Context, s *sandbox.Sandbox, ctl *dpclient.Client, victim sandbox.DatapathServerStatus, v grantedVolume) leaderCut {
	t.Helper()
	t0 := time.Now()
	must(t, s.Stop(victim.Node))
	var c leaderCut
	c.next = waitDatapathLeader(t, ctx, s, victim.Node)
	c.leader = time.Since(t0)
	c.epoch = fenceUntilCommitted(t, ctx, ctl, v, victim.Node, c.next)
	c.fence = time.Since(t0)
	return c
}

// upServers starts the sandbox of spec, the stack with 3 servers on nodes,
// and a client of the group as the manager.
func upServers(t *testing.T, spec serversSpec) *serversEnv {
	t.Helper()
	workDir := filepath.Join(os.TempDir(), spec.workDir)
	must(t, sandbox.DownWorkDir(workDir))
	downAtEnd(t, workDir)
	cfg := sandbox.Config{Name: spec.name, WorkDir: workDir, Nodes: 4, NodeMonitorGracePeriod: nodeMonitorGrace,
		DefaultTolerationSeconds: tolerationSeconds, Subnet: spec.subnet}
	cfg.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := sandbox.Up(ctx, cfg)
	if err != nil {
		t.Fatalf("sandbox up: %v", err)
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin"))
	must(t, err)
	stk, err := s.StartStack(ctx, sandbox.StackConfig{VigilBinDir: bin, DatapathServers: 3})
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	if len(stk.DatapathServers) != 3 || !strings.Contains(stk.DatapathAddr, ",") {
		t.Fatalf("stack.json lists servers %+v, datapath %q: want 3 servers, every client given all of them", stk.DatapathServers, stk.DatapathAddr)
	}
	for i, srv := range stk.DatapathServers {
		if srv.Node != sandbox.NodeName(i) {
			t.Fatalf("server %d on %s, want %s", i, srv.Node, sandbox.NodeName(i))
		}
	}
	for _, ns := range []string{vigil.Namespace, serversNS} {
		must(t, sandbox.EnsureNamespace(ctx, s.Client(), ns))
	}
	ctl := dialServers(t, ctx, stk, stk.TokenFile, "")
	t.Cleanup(func() { _ = ctl.Close() })
	return &serversEnv{s: s, stk: stk, ctl: ctl, dir: t.TempDir()}
}

// dialServers is a client of the stack's servers with the token in
// tokenFile: it dials first (default the first server) and finds the
// leader among all of them.
func dialServers(t *testing.T, ctx context.Context, stk *sandbox.Stack, tokenFile, first string) *dpclient.Client {
	t.Helper()
	addrs := stk.DatapathAddrs()
	if first == "" {
		first = addrs[0]
	}
	var others []string
	for _, a := range addrs {
		if a != first {
			others = append(others, a)
		}
	}
	c, err := dpclient.Dial(ctx, first, "", dpclient.WithTokenFile(tokenFile), dpclient.WithCAFile(stk.CAFile),
		dpclient.WithServers(others...), dpclient.WithTimeout(time.Second), dpclient.WithRetries(2))
	must(t, err)
	return c
}

// waitDatapathLeader waits up to 20 s for a server other than the one on
// node not to say it leads.
func waitDatapathLeader(t *testing.T, ctx context.Context, s *sandbox.Sandbox, not string) sandbox.DatapathServerStatus {
	t.Helper()
	var leader sandbox.DatapathServerStatus
	must(t, sandbox.Poll(ctx, 20*time.Second, "a datapath leader not on "+not, func(ctx context.Context) (bool, string, error) {
		l, err := s.DatapathLeader(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		leader = l
		return l.Node != not, "the leader is " + l.Node, nil
	}, nil))
	return leader
}

// waitRejoined waits up to 60 s until node's server is a follower that has
// applied as far as the leader has, or the leader itself.
func waitRejoined(t *testing.T, ctx context.Context, s *sandbox.Sandbox, node string) {
	t.Helper()
	must(t, sandbox.Poll(ctx, 60*time.Second, node+"'s datapath server caught up with the leader, or leading", func(ctx context.Context) (bool, string, error) {
		all, err := s.DatapathServers(ctx, 2*time.Second)
		if err != nil {
			return false, err.Error(), nil
		}
		var self, leader *sandbox.DatapathServerStatus
		var roles []string
		for i := range all {
			switch {
			case all[i].Node == node:
				self = &all[i]
			case all[i].Role == datapath.RoleLeader:
				leader = &all[i]
			}
			roles = append(roles, fmt.Sprintf("%s %s@%d", all[i].Node, all[i].Role, all[i].AppliedIndex))
		}
		// A server that won an election since it came back is caught up
		// too: Raft elects only a server whose log holds every committed
		// entry.
		ok := self != nil && (self.Role == datapath.RoleLeader ||
			leader != nil && self.Role == datapath.RoleFollower && self.AppliedIndex >= leader.AppliedIndex)
		return ok, strings.Join(roles, ", "), nil
	}, nil))
}

// grantedVolume is a volume granted to a node, at the grant's epoch.
type grantedVolume struct {
	id    string
	epoch uint64
}

// grantAndWrite creates a volume (on the roomiest server), grants it to
// node and writes to it as node at the grant's epoch (the node's client
// dials first first).
func grantAndWrite(t *testing.T, ctx context.Context, s *sandbox.Sandbox, stk *sandbox.Stack, ctl *dpclient.Client, first, node string) grantedVolume {
	t.Helper()
	v, err := ctl.CreateVolume(ctx, "servers-"+node, 1<<20, datapath.AccessRWO)
	must(t, err)
	return grantWrite(t, ctx, s, stk, ctl, v.ID, first, node)
}

// grantWrite grants volume id to node and writes to it as node at the
// grant's epoch (the node's client dials first first).
func grantWrite(t *testing.T, ctx context.Context, s *sandbox.Sandbox, stk *sandbox.Stack, ctl *dpclient.Client, id, first, node string) grantedVolume {
	t.Helper()
	epoch, err := ctl.Grant(ctx, id, node)
	must(t, err)
	w := dialServers(t, ctx, stk, sandbox.NodeTokenFile(s.NodeDir(node)), first)
	defer w.Close()
	if err := w.WriteAt(ctx, id, node, epoch, 0, []byte("before")); err != nil {
		t.Fatalf("%s's write to %s at epoch %d: %v", node, id, epoch, err)
	}
	return grantedVolume{id: id, epoch: epoch}
}

// fenceUntilCommitted fences node on v, again until a fence is committed
// (the group elects its new leader meanwhile), within 20 s, and returns
// its epoch.
func fenceUntilCommitted(t *testing.T, ctx context.Context, ctl *dpclient.Client, v grantedVolume, node string, leader sandbox.DatapathServerStatus) uint64 {
	t.Helper()
	var epoch uint64
	must(t, sandbox.Poll(ctx, 20*time.Second, fmt.Sprintf("a committed fence of %s on %s", node, v.id), func(ctx context.Context) (bool, string, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		e, err := ctl.Fence(cctx, v.id, node)
		if err != nil {
			return false, fmt.Sprintf("%v (leader %s)", err, leader.Node), nil
		}
		epoch = e
		return true, "", nil
	}, nil))
	if epoch <= v.epoch {
		t.Fatalf("fence of %s on %s at epoch %d, not above the grant's %d", node, v.id, epoch, v.epoch)
	}
	return epoch
}

// newClaimName names the claim and pod of mountNewClaim.
const newClaimName = "after-cut"

// oneCopyClass is the StorageClass of mountNewClaim's claim: the stack's,
// with StorageClass parameter replicas "1".
const oneCopyClass = "vigil-one-copy"

// mountNewClaim provisions a claim, runs a pod with it on node and waits
// until the volume is attached and published there, then writes through
// the mount. The claim is of one copy (oneCopyClass): it is provisioned
// while a server's node is powered off, and a volume of the stack's default
// three copies needs three servers that answer, so its claim would stay
// Pending until the node is back.
func mountNewClaim(t *testing.T, ctx context.Context, s *sandbox.Sandbox, node string) {
	t.Helper()
	c := s.Client()
	const claim = newClaimName
	t0 := time.Now()
	createOneCopyClass(t, ctx, s)
	must(t, sandbox.CreateClaim(ctx, c, serversNS, claim, oneCopyClass, "64Mi"))
	must(t, sandbox.WaitPVCsBound(ctx, c, serversNS, []string{claim}, 60*time.Second))
	pvc, err := c.CoreV1().PersistentVolumeClaims(serversNS).Get(ctx, claim, metav1.GetOptions{})
	must(t, err)
	w := sandbox.Workload{Namespace: serversNS, Name: claim, Nodes: []string{node}, Claims: []string{claim}}
	_, err = c.CoreV1().Pods(serversNS).Create(ctx, w.Pod(), metav1.CreateOptions{})
	must(t, err)
	pods, err := sandbox.WaitPodsRunning(ctx, c, serversNS, w.Selector(), 1, 60*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, describeStack(s)(ctx))
	}
	waitAttached(t, ctx, s, pvc.Spec.VolumeName, node)
	target := waitPublished(t, ctx, s, node, pods[0], pvc.Spec.VolumeName)
	writePayload(t, target)
	t.Logf("FIGURE a new claim provisioned, attached, mounted on %s and written through in %.2fs", node, time.Since(t0).Seconds())
}

// createOneCopyClass creates oneCopyClass, the stack's StorageClass with
// parameter replicas "1", unless it exists.
func createOneCopyClass(t *testing.T, ctx context.Context, s *sandbox.Sandbox) {
	t.Helper()
	del := corev1.PersistentVolumeReclaimDelete
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: oneCopyClass},
		Provisioner: vigil.DriverName, ReclaimPolicy: &del, VolumeBindingMode: &immediate,
		Parameters: map[string]string{"csi.storage.k8s.io/fstype": "ext4", csi.ParameterReplicas: "1"}}
	if _, err := s.Client().StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create StorageClass %s: %v", oneCopyClass, err)
	}
}
