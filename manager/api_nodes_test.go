package manager

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/controller"
	"github.com/vigil-storage/vigil/fenceapi"
	"github.com/vigil-storage/vigil/fenceapi/fenceapitest"
	"github.com/vigil-storage/vigil/httpapi"
)

// fixedVerdicts is nodeVerdicts with statuses the test sets.
type fixedVerdicts struct {
	mu sync.Mutex
	st []controller.NodeStatus
}

func (f *fixedVerdicts) NodeStatuses() []controller.NodeStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]controller.NodeStatus(nil), f.st...)
}

func (f *fixedVerdicts) set(st ...controller.NodeStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
}

type nodesFixture struct {
	nodes    *loopNodes
	fake     *fenceapitest.Fake
	verdicts *fixedVerdicts
	client   *fake.Clientset
}

// newNodesFixture runs a Node and PV informer over a fake API server holding
// node-1 and node-2 and a PV of Vigil's driver, with the datapath fake as the
// storage (nil storage: none).
func newNodesFixture(t *testing.T, withStorage bool) *nodesFixture {
	t.Helper()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: vigil.DriverName, VolumeHandle: "vol-a"}}}}
	client := fake.NewClientset(testNode("node-1", corev1.ConditionTrue), testNode("node-2", corev1.ConditionTrue), pv)
	factory := informers.NewSharedInformerFactory(client, 0)
	f := &nodesFixture{fake: fenceapitest.NewFake(reportNow), verdicts: &fixedVerdicts{}, client: client}
	src := nodeSources{verdicts: f.verdicts, leading: func() bool { return true }}
	if withStorage {
		src.storage = f.fake
	}
	f.nodes = newLoopNodes(factory, src)
	f.nodes.now = f.fake.Now // the manager's clock and the fake datapath's agree here
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	return f
}

func (f *nodesFixture) report(t *testing.T) httpapi.NodesReport {
	t.Helper()
	rep, err := f.nodes.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The view reads the datapath through the fencing contract: heartbeats, a
// graceful stop and grants with their epochs and PVs.
func TestLoopNodes_Poll_ReadsTheDatapath(t *testing.T) {
	f := newNodesFixture(t, true)
	ctx := context.Background()
	if rep := f.report(t); rep.Datapath != httpapi.DatapathUnavailable || len(rep.Notes) != 1 {
		t.Fatalf("before the first poll: %+v", rep)
	}
	_, _ = f.fake.NewVolume(ctx, "vol-a")
	if _, err := f.fake.Grant(ctx, "vol-a", "node-1"); err != nil {
		t.Fatal(err)
	}
	must(t, f.fake.Heartbeat(ctx, "node-1"))
	must(t, f.fake.Heartbeat(ctx, "node-2"))
	f.fake.Advance(1500 * time.Millisecond)
	must(t, f.fake.Heartbeat(ctx, "node-2"))
	must(t, f.fake.Leave(ctx, "node-2", time.Minute))
	f.nodes.poll(ctx)
	f.fake.Advance(500 * time.Millisecond) // the page asks half a second after the poll
	got := byNodeName(f.report(t))
	if v := got["node-1"]; hbAge(v) != "2s" || volumes(v) != "vol-a(pv-a)@1:granted" || v.Verdict != httpapi.VerdictUp {
		t.Errorf("node-1: %+v age %s volumes %s", v, hbAge(v), volumes(v))
	}
	if v := got["node-2"]; hbAge(v) != "500ms" || !v.Leaving || v.Verdict != httpapi.VerdictLeaving {
		t.Errorf("node-2: %+v age %s", v, hbAge(v))
	}
	if n := f.fake.Calls(fenceapitest.MethodGrants); n != 2 {
		t.Errorf("%d Grants calls in one poll, want one per node (2)", n)
	}
}

// A datapath that cannot be reached: the view says so and shows no stale rows.
func TestLoopNodes_Poll_DatapathUnavailable(t *testing.T) {
	f := newNodesFixture(t, true)
	ctx := context.Background()
	_, _ = f.fake.NewVolume(ctx, "vol-a")
	_, _ = f.fake.Grant(ctx, "vol-a", "node-1")
	f.nodes.poll(ctx)
	if v := byNodeName(f.report(t))["node-1"]; len(v.Volumes) != 1 {
		t.Fatalf("node-1 %+v", v)
	}
	f.fake.SetUnavailable(true)
	f.nodes.poll(ctx)
	rep := f.report(t)
	if rep.Datapath != httpapi.DatapathUnavailable || len(rep.Notes) != 1 || len(byNodeName(rep)["node-1"].Volumes) != 0 {
		t.Fatalf("cut off: %+v", rep)
	}
	f.fake.SetUnavailable(false)
	f.fake.FailWith(fenceapitest.MethodGrants, errors.New("grants: boom"))
	f.nodes.poll(ctx)
	if rep := f.report(t); rep.Datapath != httpapi.DatapathUnavailable {
		t.Fatalf("grants failing: %+v", rep)
	}
}

// Without a datapath the view is the verdicts and the Node objects, and
// polling calls nothing.
func TestLoopNodes_NoDatapath(t *testing.T) {
	f := newNodesFixture(t, false)
	f.nodes.poll(context.Background())
	rep := f.report(t)
	if rep.Datapath != httpapi.DatapathNone || len(rep.Nodes) != 2 || rep.Nodes[0].HeartbeatAgeSeconds != nil {
		t.Fatalf("%+v", rep)
	}
	if n := f.fake.Calls(fenceapitest.MethodConnectivity); n != 0 {
		t.Errorf("%d datapath calls without a datapath", n)
	}
}

// The poller tells the API only when what the view shows changed: a heartbeat
// alone does not, a verdict and a fence do.
func TestLoopNodes_Key_ChangesOnlyWithWhatIsShown(t *testing.T) {
	f := newNodesFixture(t, true)
	ctx := context.Background()
	_, _ = f.fake.NewVolume(ctx, "vol-a")
	_, _ = f.fake.Grant(ctx, "vol-a", "node-1")
	must(t, f.fake.Heartbeat(ctx, "node-1"))
	step := func() string {
		f.nodes.poll(ctx)
		k, ok := f.nodes.key()
		if !ok {
			t.Fatal("no key")
		}
		return k
	}
	k0 := step()
	f.fake.Advance(time.Second)
	must(t, f.fake.Heartbeat(ctx, "node-1"))
	if step() != k0 {
		t.Error("a heartbeat alone changed the view's key")
	}
	f.verdicts.set(controller.NodeStatus{Name: "node-1", State: controller.NodeDownUnknown, Down: true, Since: f.fake.Now()})
	k1 := step()
	if k1 == k0 {
		t.Error("a verdict did not change the key")
	}
	if _, err := f.fake.FenceNode(ctx, "node-1"); err != nil {
		t.Fatal(err)
	}
	if step() == k1 {
		t.Error("a fence at the datapath did not change the key")
	}
}

// run polls at once and tells the API of the first view.
func TestLoopNodes_Run_NotifiesTheFirstView(t *testing.T) {
	f := newNodesFixture(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	changed := make(chan struct{}, 1)
	go func() {
		f.nodes.run(ctx, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
		close(done)
	}()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no change reported for the first view")
	}
	cancel()
	<-done
	if f.fake.Calls(fenceapitest.MethodConnectivity) < 1 {
		t.Error("run did not poll the datapath")
	}
}

// The datapath's fence back end satisfies what the view reads.
var _ storageView = controller.FenceBackend(nil)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// placementStorage is the datapath fake with a group's servers.
type placementStorage struct {
	*fenceapitest.Fake
	servers []fenceapi.Server
	err     error
}

func (p placementStorage) Servers(context.Context) ([]fenceapi.Server, error) {
	return p.servers, p.err
}

// The poll reads the datapath's servers when the storage reports them; a
// follower's last contact, which moves at every poll, is not a change of
// the view.
func TestLoopNodes_Poll_ReadsTheServers(t *testing.T) {
	f := newNodesFixture(t, false)
	ctx := context.Background()
	st := placementStorage{Fake: f.fake, servers: []fenceapi.Server{
		{ID: "s1", Node: "node-1", Address: "a1", Role: fenceapi.RoleLeader},
		{ID: "s2", Node: "node-2", Address: "a2", Role: fenceapi.RoleFollower, LastContact: reportNow},
	}}
	f.nodes.src.storage = st
	f.nodes.poll(ctx)
	got := byNodeName(f.report(t))
	if s := got["node-1"].DatapathServer; s == nil || s.Role != fenceapi.RoleLeader {
		t.Errorf("node-1 server %+v; want the leader", s)
	}
	if s := got["node-2"].DatapathServer; s == nil || s.Role != fenceapi.RoleFollower || s.LastContact == nil {
		t.Errorf("node-2 server %+v; want a follower with its last contact", s)
	}
	key, _ := f.nodes.key()
	st.servers[1].LastContact = reportNow.Add(time.Second)
	f.nodes.poll(ctx)
	if again, _ := f.nodes.key(); again != key {
		t.Errorf("a new last contact changed the view's key:\n%s\n%s", key, again)
	}
	st.servers[1].Role = fenceapi.RoleUnreachable
	f.nodes.poll(ctx)
	if again, _ := f.nodes.key(); again == key {
		t.Error("a server gone unreachable did not change the view's key")
	}
	f.nodes.src.storage = placementStorage{Fake: f.fake, err: errors.New("no server answered")}
	f.nodes.poll(ctx)
	if s := byNodeName(f.report(t))["node-1"].DatapathServer; s != nil {
		t.Errorf("node-1 server %+v when the placement could not be read; want none", s)
	}
}
