package controller

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/runtime"
	core "k8s.io/client-go/testing"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vigil-storage/vigil"
	v1alpha1 "github.com/vigil-storage/vigil/api/v1alpha1"
	"github.com/vigil-storage/vigil/fenceapi"
)

// fakeRecoveryClient keeps NodeRecoveries in memory, with resourceVersions.
type fakeRecoveryClient struct {
	mu        sync.Mutex
	objs      map[string]*v1alpha1.NodeRecovery
	rv        int
	writes    int
	conflicts int
	failing   bool
}

func newFakeRecoveryClient() *fakeRecoveryClient {
	return &fakeRecoveryClient{objs: map[string]*v1alpha1.NodeRecovery{}}
}

func (c *fakeRecoveryClient) List(context.Context, metav1.ListOptions) (*v1alpha1.NodeRecoveryList, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := &v1alpha1.NodeRecoveryList{}
	for _, o := range c.objs {
		l.Items = append(l.Items, *o.DeepCopy())
	}
	return l, nil
}

func (c *fakeRecoveryClient) Get(_ context.Context, name string, _ metav1.GetOptions) (*v1alpha1.NodeRecovery, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.objs[name]
	if !ok {
		return nil, apierrors.NewNotFound(v1alpha1.GroupVersionResource.GroupResource(), name)
	}
	return o.DeepCopy(), nil
}

func (c *fakeRecoveryClient) Create(_ context.Context, r *v1alpha1.NodeRecovery, _ metav1.CreateOptions) (*v1alpha1.NodeRecovery, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failing {
		return nil, apierrors.NewServiceUnavailable("down")
	}
	if _, ok := c.objs[r.Name]; ok {
		return nil, apierrors.NewAlreadyExists(v1alpha1.GroupVersionResource.GroupResource(), r.Name)
	}
	c.rv++
	o := r.DeepCopy()
	o.Status = v1alpha1.NodeRecoveryStatus{} // the status subresource ignores it on create
	o.ResourceVersion, o.UID = fmt.Sprint(c.rv), types.UID("uid-"+r.Name)
	c.objs[r.Name] = o
	c.writes++
	return o.DeepCopy(), nil
}

func (c *fakeRecoveryClient) UpdateStatus(_ context.Context, r *v1alpha1.NodeRecovery, _ metav1.UpdateOptions) (*v1alpha1.NodeRecovery, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, ok := c.objs[r.Name]
	switch {
	case c.failing:
		return nil, apierrors.NewServiceUnavailable("down")
	case !ok:
		return nil, apierrors.NewNotFound(v1alpha1.GroupVersionResource.GroupResource(), r.Name)
	case r.UID != "" && r.UID != cur.UID: // the API server's UID precondition
		c.conflicts++
		return nil, apierrors.NewConflict(v1alpha1.GroupVersionResource.GroupResource(), r.Name, fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", r.UID, cur.UID))
	case cur.ResourceVersion != r.ResourceVersion:
		c.conflicts++
		return nil, apierrors.NewConflict(v1alpha1.GroupVersionResource.GroupResource(), r.Name, fmt.Errorf("rv %s != %s", r.ResourceVersion, cur.ResourceVersion))
	}
	c.rv++
	cur.Status = *r.Status.DeepCopy()
	cur.ResourceVersion = fmt.Sprint(c.rv)
	c.writes++
	return cur.DeepCopy(), nil
}

func (c *fakeRecoveryClient) only(t *testing.T) *v1alpha1.NodeRecovery {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.objs) != 1 {
		t.Fatalf("%d NodeRecoveries, want 1", len(c.objs))
	}
	for _, o := range c.objs {
		return o.DeepCopy()
	}
	return nil
}

func cached(ns, name, node string, uid types.UID, owner []metav1.OwnerReference, phase corev1.PodPhase) *cachedPod {
	p := newPod(ns, name, node, owner)
	p.UID, p.Status.Phase = uid, phase
	return toCachedPod(p)
}

func TestRecoveries_TimelineFromDetectionToNodeReturn(t *testing.T) {
	client := newFakeRecoveryClient()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sts := controllerRef("apps/v1", "StatefulSet", "db", "uid-sts")
	owners := map[string][]types.UID{"app/StatefulSet/db": {"uid-db-0", "uid-db-1"}}
	rs := newRecoveries(client, m, func(k string) []types.UID { return owners[k] })
	ctx := context.Background()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

	rs.detected("node-1", "uid-node-1", "storage-isolated", at(0))
	rs.detected("node-1", "uid-node-1", "ready-unknown", at(0.1)) // idempotent while open
	rs.fenced("node-1", []fenceapi.Fenced{{Handle: "vol-a", Epoch: 4}}, at(0.2))
	rs.fenced("node-1", []fenceapi.Fenced{{Handle: "vol-a", Epoch: 4}}, at(0.3)) // a new leader's repeat adds nothing
	rs.tainted("node-1", at(0.25))
	pod := newPod("app", "db-0", "node-1", sts)
	pod.UID = "uid-db-0"
	rs.podReaped("node-1", pod, OwnerStatefulSet, "app/StatefulSet/db", rs.ownerPods("app/StatefulSet/db"), string(ReasonProvenFenced), at(0.4))
	rs.attachmentFreed("node-1", "csi-abc", "pv-a", actionLabelDeleteAttachment, at(0.45))
	rs.flush(ctx)
	got := client.only(t)
	if got.Spec.NodeName != "node-1" || got.Status.Phase != v1alpha1.PhaseReaping || len(got.Status.Volumes) != 1 ||
		got.Status.Volumes[0].Epoch != 4 || got.Status.PodCount != 1 || got.Labels[vigil.NodeLabel] != "node-1" {
		t.Fatalf("after the reap: %+v", got)
	}
	if !strings.HasPrefix(got.Name, "node-1-20261120-120000") {
		t.Errorf("name %q", got.Name)
	}

	// The other replica on node-2 existed before: not a replacement. The new
	// db-0 (new UID) is scheduled, then Running.
	rs.observePod(cached("app", "db-1", "node-2", "uid-db-1", sts, corev1.PodRunning), "app/StatefulSet/db", at(1))
	// A first db-0 is scheduled but goes away before it runs (terminating,
	// then gone); the StatefulSet makes another, which is the replacement.
	rs.observePod(cached("app", "db-0", "node-3", "uid-gone", sts, corev1.PodPending), "app/StatefulSet/db", at(0.9))
	gone := cached("app", "db-0", "node-3", "uid-gone", sts, corev1.PodPending)
	gone.DeletionTimestamp = &metav1.Time{Time: at(0.95)}
	rs.observePod(gone, "app/StatefulSet/db", at(0.95))
	rs.observePod(cached("app", "db-0", "", "uid-new", sts, corev1.PodPending), "app/StatefulSet/db", at(1.1))
	// The gone pod's last word (its delete) does not take the slot back.
	rs.observePod(gone, "app/StatefulSet/db", at(1.15))
	rs.observePod(cached("app", "db-0", "node-2", "uid-new", sts, corev1.PodPending), "app/StatefulSet/db", at(1.2))
	rs.observePod(cached("app", "db-0", "node-2", "uid-new", sts, corev1.PodRunning), "app/StatefulSet/db", at(2.5))
	rs.flush(ctx)
	got = client.only(t)
	s := got.Status
	if len(s.Replacements) != 1 || s.Replacements[0].UID != "uid-new" || s.Replacements[0].Replaces != "uid-db-0" ||
		s.Replacements[0].NodeName != "node-2" || !s.Replacements[0].ScheduledAt.Time.Equal(at(1.2)) {
		t.Fatalf("replacements %+v", s.Replacements)
	}
	if s.Phase != v1alpha1.PhaseRecovered || s.RecoverySeconds == nil || *s.RecoverySeconds != 2.5 || s.TimeToRecover != "2.50s" {
		t.Fatalf("not recovered: phase %s seconds %v %q", s.Phase, s.RecoverySeconds, s.TimeToRecover)
	}
	if n := testutil.CollectAndCount(m.RecoveryDuration); n != 1 {
		t.Errorf("recovery duration observed in %d series", n)
	}

	// The node comes back Ready but still tainted, then its engine untaints it.
	tainted := newNode("node-1", corev1.ConditionTrue, 0, corev1.Taint{Key: vigil.FencedTaintKey, Effect: corev1.TaintEffectNoSchedule})
	rs.nodeUp("node-1", tainted, at(30))
	rs.flush(ctx)
	if got = client.only(t); got.Status.Phase != v1alpha1.PhaseRecovered || got.Status.Return == nil || got.Status.Return.ReadyAt == nil {
		t.Fatalf("ready but tainted: %+v", got.Status)
	}
	rs.nodeUp("node-1", newNode("node-1", corev1.ConditionTrue, 0), at(31))
	rs.flush(ctx)
	if got = client.only(t); got.Status.Phase != v1alpha1.PhaseNodeReturned || got.Status.Return.UntaintedAt == nil {
		t.Fatalf("untainted: %+v", got.Status)
	}
	if rs.open("node-1") {
		t.Error("closed recovery still open in memory")
	}
	// A closed record takes no more steps; a new failure opens a new one.
	rs.fenced("node-1", []fenceapi.Fenced{{Handle: "vol-b", Epoch: 9}}, at(40))
	rs.detected("node-1", "uid-node-1", "ready-unknown", at(50))
	rs.flush(ctx)
	if n := len(client.objs); n != 2 {
		t.Fatalf("%d records after a second failure, want 2", n)
	}
}

func TestRecoveries_ShortBlipIsAbandoned(t *testing.T) {
	client := newFakeRecoveryClient()
	rs := newRecoveries(client, nil, nil)
	rs.detected("node-1", "", "ready-unknown", t0)
	rs.nodeUp("node-1", newNode("node-1", corev1.ConditionTrue, 0), t0.Add(time.Second))
	rs.flush(context.Background())
	if got := client.only(t); got.Status.Phase != v1alpha1.PhaseAbandoned {
		t.Fatalf("phase %s, want Abandoned", got.Status.Phase)
	}
}

// A node that goes down again within the second its last episode closed gets
// a record of its own; the earlier one is never overwritten.
func TestRecoveries_SecondEpisodeInTheSameSecond(t *testing.T) {
	client := newFakeRecoveryClient()
	rs := newRecoveries(client, nil, nil)
	ctx := context.Background()
	rs.detected("node-1", "", "ready-unknown", t0)
	rs.nodeUp("node-1", newNode("node-1", corev1.ConditionTrue, 0), t0.Add(200*time.Millisecond))
	rs.flush(ctx)
	rs.detected("node-1", "", "storage-isolated", t0.Add(500*time.Millisecond))
	rs.fenced("node-1", []fenceapi.Fenced{{Handle: "vol-a", Epoch: 2}}, t0.Add(600*time.Millisecond))
	rs.flush(ctx)
	if len(client.objs) != 2 {
		t.Fatalf("%d records, want 2: %v", len(client.objs), client.objs)
	}
	first, second := client.objs["node-1-20261120-120000"], client.objs["node-1-20261120-120000-2"]
	if first == nil || first.Status.Phase != v1alpha1.PhaseAbandoned || len(first.Status.Volumes) != 0 {
		t.Errorf("first episode %+v", first)
	}
	if second == nil || second.Status.Phase != v1alpha1.PhaseFenced || second.Status.Reason != "storage-isolated" {
		t.Errorf("second episode %+v", second)
	}
	// It goes on under its name.
	rs.tainted("node-1", t0.Add(700*time.Millisecond))
	rs.flush(ctx)
	if len(client.objs) != 2 || client.objs["node-1-20261120-120000-2"].Status.TaintedAt == nil {
		t.Errorf("after the taint: %v", client.objs)
	}
}

func TestRecoveries_FailedWritesAreRetriedAndANewLeaderContinues(t *testing.T) {
	client := newFakeRecoveryClient()
	rs := newRecoveries(client, nil, nil)
	ctx := context.Background()
	client.failing = true
	rs.detected("node-1", "", "ready-unknown", t0)
	rs.flush(ctx)
	if len(client.objs) != 0 {
		t.Fatal("written while the API fails")
	}
	client.failing = false
	rs.flush(ctx)
	client.only(t)
	rs.fenced("node-1", []fenceapi.Fenced{{Handle: "vol-a", Epoch: 2}}, t0.Add(time.Second))
	rs.flush(ctx)

	// A new leader loads the open record and continues it.
	next := newRecoveries(client, nil, nil)
	if err := next.load(ctx); err != nil {
		t.Fatal(err)
	}
	if !next.open("node-1") {
		t.Fatal("the new leader does not see the open recovery")
	}
	next.detected("node-1", "", "ready-unknown", t0.Add(2*time.Second)) // must not open a second record
	next.fenced("node-1", []fenceapi.Fenced{{Handle: "vol-b", Epoch: 3}}, t0.Add(3*time.Second))
	next.flush(ctx)
	got := client.only(t)
	if len(got.Status.Volumes) != 2 || got.Status.Phase != v1alpha1.PhaseFenced {
		t.Fatalf("continued record %+v", got.Status)
	}
}

// A rack's failure: 50 records written in the same flushes. Each record's
// answer (resourceVersion, UID) belongs to it alone; when the flush sorted the
// records but not their states, each state took another record's UID and
// every later status write failed its UID precondition (3,585 conflicts in 60 s
// in the 100-node bench, and the records stopped at their first status).
func TestRecoveries_RackOfRecordsWrittenTogether(t *testing.T) {
	client := newFakeRecoveryClient()
	rs := newRecoveries(client, nil, nil)
	ctx := context.Background()
	var nodes []string
	for i := range 50 {
		nodes = append(nodes, fmt.Sprintf("rack-1-node-%d", i+1))
	}
	for _, n := range nodes {
		rs.detected(n, "", "storage-isolated", t0)
	}
	rs.flush(ctx)
	for i, n := range nodes {
		rs.fenced(n, []fenceapi.Fenced{{Handle: "vol-" + n, Epoch: uint64(i + 2)}}, t0.Add(time.Second))
	}
	rs.flush(ctx)
	for _, n := range nodes {
		rs.tainted(n, t0.Add(2*time.Second))
	}
	rs.flush(ctx)
	if client.conflicts != 0 {
		t.Errorf("%d conflicts writing 50 records three times, want 0", client.conflicts)
	}
	for i, n := range nodes {
		got, err := client.Get(ctx, recoveryName(n, t0), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != v1alpha1.PhaseFenced || got.Status.TaintedAt == nil || len(got.Status.Volumes) != 1 ||
			got.Status.Volumes[0].Handle != "vol-"+n || got.Status.Volumes[0].Epoch != uint64(i+2) {
			t.Fatalf("%s: status %+v, want fenced vol-%s at epoch %d and tainted", n, got.Status, n, i+2)
		}
	}
}

func TestRecoveryName_LongNodeNames(t *testing.T) {
	long := strings.Repeat("a", 253)
	n := recoveryName(long, t0)
	if len(n) > 253 || !strings.HasSuffix(n, "-20261120-120000") {
		t.Fatalf("name %q (%d)", n, len(n))
	}
	if recoveryName(long, t0) != n {
		t.Error("not deterministic")
	}
	if other := recoveryName(strings.Repeat("a", 252)+"b", t0); other == n {
		t.Error("two long node names share a record name")
	}
	if got := recoveryName("Node-A", t0); got != "node-a-20261120-120000" {
		t.Errorf("name %q", got)
	}
}

// The owner's pods are taken before the delete: a replacement that its
// StatefulSet made at once, already in the cache when the delete returns,
// still counts as the replacement and closes the recovery.
func TestController_Reap_ReplacementSeenBeforeTheDeleteReturns(t *testing.T) {
	f := newFixture(t, PolicyDeleteStatefulSetPod)
	statefulSetOnDownNode(f)
	f.start()
	f.ctrl.recoveries = newRecoveries(newFakeRecoveryClient(), f.ctrl.metrics, f.ctrl.ownerPodUIDs)
	f.ctrl.recoveries.detected("node-1", "uid-node-1", "ready-unknown", f.now)
	sts := controllerRef("apps/v1", "StatefulSet", "db", "uid-sts")
	replacement := newPod("app", "db-0", "node-2", sts)
	replacement.UID = "uid-db-0-new"
	f.client.PrependReactor("delete", "pods", func(core.Action) (bool, runtime.Object, error) {
		// The informer sees the StatefulSet's new db-0 before Delete returns.
		if err := f.ctrl.podsByNode.Add(toCachedPod(replacement)); err != nil {
			t.Fatal(err)
		}
		return true, nil, nil
	})
	if err := f.ctrl.syncPod(context.Background(), "app", "db-0"); err != nil {
		t.Fatal(err)
	}
	running := replacement.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	f.ctrl.recoveries.observePod(toCachedPod(running), ownerKeyOf("app", running.OwnerReferences), f.now.Add(time.Second))
	st := f.ctrl.recoveries.nodes["node-1"]
	if st == nil || st.obj.Status.Phase != v1alpha1.PhaseRecovered {
		var got any
		if st != nil {
			got = st.obj.Status
		}
		t.Fatalf("recovery of node-1 = %+v; want Recovered by the replacement seen before the delete returned", got)
	}
}
