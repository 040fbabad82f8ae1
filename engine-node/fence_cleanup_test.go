package enginenode

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

func TestDecideCleanup_Table(t *testing.T) {
	st := func(id string) StageRecord {
		return StageRecord{VolumeID: id, StagingPath: "/s/" + id, Phase: PhaseStaged}
	}
	pub := func(id, uid string) PublishRecord {
		return PublishRecord{VolumeID: id, TargetPath: "/t/" + id + uid, PodUID: uid, Phase: PhasePublished}
	}
	kubeletPath := PublishRecord{VolumeID: "v3",
		TargetPath: "/var/lib/kubelet/pods/0b9c6a1e-3f51-4a7e-9a55-1c1f9e0d7a11/volumes/kubernetes.io~csi/pv/mount"}
	cases := []struct {
		name string
		snap CleanupSnapshot
		want []CleanupAction
	}{
		{"not fenced: nothing", CleanupSnapshot{Stages: []StageRecord{st("v1")}, Publishes: []PublishRecord{pub("v1", "gone")}}, nil},
		{"fenced and empty: remove taint", CleanupSnapshot{Fenced: true, DatapathAcked: true}, []CleanupAction{{Kind: ActRemoveTaint}}},
		{"fenced and empty, the datapath silent: the taint stays", CleanupSnapshot{Fenced: true}, []CleanupAction{{Kind: ActAwaitDatapath}}},
		{"pod gone: unpublish, unstage, release", CleanupSnapshot{Fenced: true,
			Stages: []StageRecord{st("v1")}, Publishes: []PublishRecord{pub("v1", "gone")}},
			[]CleanupAction{{ActUnpublish, "v1", "/t/v1gone"}, {ActUnstage, "v1", "/s/v1"}, {Kind: ActRelease, VolumeID: "v1"}}},
		{"pod still here: kept", CleanupSnapshot{Fenced: true, PodsHere: map[string]bool{"here": true},
			Stages: []StageRecord{st("v1")}, Publishes: []PublishRecord{pub("v1", "here")}}, nil},
		{"one of two pods here: only the other target goes", CleanupSnapshot{Fenced: true, PodsHere: map[string]bool{"here": true},
			Stages: []StageRecord{st("v1")}, Publishes: []PublishRecord{pub("v1", "here"), pub("v1", "gone")}},
			[]CleanupAction{{ActUnpublish, "v1", "/t/v1gone"}}},
		{"staged, never published: unstage", CleanupSnapshot{Fenced: true, Stages: []StageRecord{st("v2")}},
			[]CleanupAction{{ActUnstage, "v2", "/s/v2"}, {Kind: ActRelease, VolumeID: "v2"}}},
		{"pod unknown: kept", CleanupSnapshot{Fenced: true, Stages: []StageRecord{st("v1")}, Publishes: []PublishRecord{pub("v1", "")}}, nil},
		{"pod uid from the kubelet path", CleanupSnapshot{Fenced: true, Publishes: []PublishRecord{kubeletPath}},
			[]CleanupAction{{ActUnpublish, "v3", kubeletPath.TargetPath}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := decideCleanup(c.snap); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("decideCleanup = %+v, want %+v", got, c.want)
			}
		})
	}
}

// fakeGrants records releases and heartbeats and serves attachments.
type fakeGrants struct {
	mu         sync.Mutex
	released   []string
	releaseErr error
	beatErr    error // a storage-isolated node: every heartbeat fails
	beats      int
	atts       map[string][]datapath.Attachment
}

func (f *fakeGrants) Heartbeat(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beats++
	return f.beatErr
}

func (f *fakeGrants) Release(_ context.Context, volumeID, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.releaseErr != nil {
		return f.releaseErr
	}
	f.released = append(f.released, volumeID+"@"+node)
	return nil
}

func (f *fakeGrants) Attachments(_ context.Context, volumeID string) ([]datapath.Attachment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.atts[volumeID], nil
}

type cleanerFixture struct {
	cleaner  *FenceCleaner
	client   *fake.Clientset
	grants   *fakeGrants
	recorder *record.FakeRecorder
	server   *NodeServer
}

func newCleanerFixture(t *testing.T, pods ...*corev1.Pod) *cleanerFixture {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: vigil.FencedTaintKey, Effect: corev1.TaintEffectNoSchedule},
		{Key: "other", Effect: corev1.TaintEffectNoSchedule},
	}}}
	objs := []runtime.Object{node}
	for _, p := range pods {
		objs = append(objs, p)
	}
	f := &cleanerFixture{client: fake.NewClientset(objs...), grants: &fakeGrants{atts: map[string][]datapath.Attachment{}},
		recorder: record.NewFakeRecorder(20), server: newTestServer(t, newFakeDatapath(t), "node-a")}
	f.cleaner = &FenceCleaner{Node: "node-a", Client: f.client, Server: f.server, Grants: f.grants,
		Recorder: f.recorder, Metrics: f.server.metrics, Log: quiet}
	return f
}

// journalUse records a stage and a publish for uid as if they had happened.
func (f *cleanerFixture) journalUse(t *testing.T, volumeID, uid string) string {
	t.Helper()
	target := filepath.Join(t.TempDir(), "mount")
	if err := f.server.journal.PutStage(StageRecord{VolumeID: volumeID, StagingPath: t.TempDir(), Epoch: 1, Size: testSize,
		DiskDir: diskDir(f.server.cfg.StateDir, volumeID), Phase: PhaseStaged}); err != nil {
		t.Fatal(err)
	}
	if err := f.server.journal.PutPublish(PublishRecord{VolumeID: volumeID, TargetPath: target, PodUID: uid, Phase: PhasePublished}); err != nil {
		t.Fatal(err)
	}
	return target
}

func pod(name, uid, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func (f *cleanerFixture) taints(t *testing.T) []string {
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tt := range n.Spec.Taints {
		out = append(out, tt.Key)
	}
	return out
}

func TestFenceCleaner_Sync_CleansReapedThenRemovesTaint(t *testing.T) {
	f := newCleanerFixture(t, pod("kept", "uid-kept", "node-a"), pod("web-0", "uid-new", "node-b"))
	ctx := context.Background()
	goneTarget := f.journalUse(t, "vol-gone", "uid-old") // web-0 was reaped and replaced on node-b
	f.journalUse(t, "vol-kept", "uid-kept")

	if err := f.cleaner.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := f.server.journal.Stage("vol-gone"); ok || exists(goneTarget) {
		t.Fatal("the reaped pod's volume is still staged or its target exists")
	}
	if _, ok, _ := f.server.journal.Stage("vol-kept"); !ok {
		t.Fatal("the volume of a pod still running here was cleaned")
	}
	if !reflect.DeepEqual(f.grants.released, []string{"vol-gone@node-a"}) {
		t.Fatalf("released %v", f.grants.released)
	}
	if got := f.taints(t); !reflect.DeepEqual(got, []string{vigil.FencedTaintKey, "other"}) {
		t.Fatalf("taints %v: removed while a protected volume is left", got)
	}
	if err := f.cleaner.AllowStage(ctx, "vol-kept", 1); !errors.Is(err, ErrGated) {
		t.Fatalf("gate with cleanup pending: %v, want ErrGated", err)
	}

	if err := f.client.CoreV1().Pods("default").Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // cleanup, then taint removal
		if err := f.cleaner.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.taints(t); !reflect.DeepEqual(got, []string{"other"}) {
		t.Fatalf("taints %v, want only the foreign one", got)
	}
	if ev := <-f.recorder.Events; !strings.Contains(ev, vigil.EventReasonFenceCleared) {
		t.Fatalf("event %q", ev)
	}
	if v := testutil.ToFloat64(f.server.metrics.cleanups.WithLabelValues(CleanupCleaned)); v < 6 {
		t.Fatalf("cleanup_total{cleaned} = %v", v)
	}
}

func TestFenceCleaner_Sync_FailureIsWarningAndRetried(t *testing.T) {
	f := newCleanerFixture(t)
	f.journalUse(t, "vol-x", "uid-old")
	f.grants.releaseErr = errors.New("datapath unreachable")
	if err := f.cleaner.Sync(context.Background()); err == nil {
		t.Fatal("Sync hid a failed release")
	}
	ev := <-f.recorder.Events
	if !strings.HasPrefix(ev, corev1.EventTypeWarning+" "+vigil.EventReasonFenceCleanupFailed) || !strings.Contains(ev, "vol-x") {
		t.Fatalf("event %q, want a warning naming vol-x", ev)
	}
	if got := f.taints(t); len(got) != 2 {
		t.Fatalf("taint removed despite the failure: %v", got)
	}
	if v := testutil.ToFloat64(f.server.metrics.cleanups.WithLabelValues(CleanupFailed)); v != 1 {
		t.Fatalf("cleanup_total{failed} = %v", v)
	}
}

// A storage-isolated node: its release cannot reach the datapath, and once its
// journal is empty it still keeps the taint until the datapath acknowledges a
// heartbeat sent after the taint was read.
func TestFenceCleaner_Sync_IsolatedNodeKeepsItsTaint(t *testing.T) {
	f := newCleanerFixture(t)
	ctx := context.Background()
	f.journalUse(t, "vol-x", "uid-old")
	f.grants.releaseErr = errors.New("datapath unreachable")
	f.grants.beatErr = errors.New("datapath unreachable")
	for i := 0; i < 3; i++ {
		if err := f.cleaner.Sync(ctx); err == nil {
			t.Fatalf("pass %d: Sync reported success while the datapath is unreachable", i)
		}
		if got := f.taints(t); !reflect.DeepEqual(got, []string{vigil.FencedTaintKey, "other"}) {
			t.Fatalf("pass %d: taints %v: an isolated node untainted itself", i, got)
		}
	}
	if !recorded(f.recorder, vigil.EventReasonFenceAwaitDatapath) {
		t.Fatal("no Event says the taint waits for the datapath")
	}
	f.grants.beatErr = nil // the cut heals
	if err := f.cleaner.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.taints(t); !reflect.DeepEqual(got, []string{"other"}) {
		t.Fatalf("taints %v after the datapath answered, want only the foreign one", got)
	}
}

// recorded drains r and reports whether an Event of reason was among them.
func recorded(r *record.FakeRecorder, reason string) bool {
	found := false
	for {
		select {
		case ev := <-r.Events:
			found = found || strings.Contains(ev, reason)
		default:
			return found
		}
	}
}

func TestFenceCleaner_AllowStage_NeedsFreshGrant(t *testing.T) {
	f := newCleanerFixture(t)
	ctx := context.Background()
	if err := f.cleaner.Sync(ctx); err != nil { // empty journal: taint removed, gate open
		t.Fatal(err)
	}
	f.grants.atts["v"] = []datapath.Attachment{{VolumeID: "v", Node: "node-a", Epoch: 4, State: datapath.StateFenced}}
	if err := f.cleaner.AllowStage(ctx, "v", 3); !errors.Is(err, ErrGated) || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("stage while fenced on the datapath: %v", err)
	}
	f.grants.atts["v"] = []datapath.Attachment{{VolumeID: "v", Node: "node-a", Epoch: 5, State: datapath.StateGranted}}
	if err := f.cleaner.AllowStage(ctx, "v", 4); !errors.Is(err, ErrGated) {
		t.Fatalf("stage with an old epoch: %v", err)
	}
	if err := f.cleaner.AllowStage(ctx, "v", 5); err != nil {
		t.Fatalf("stage with the fresh grant: %v", err)
	}
	if err := f.cleaner.AllowStage(ctx, "w", 1); !errors.Is(err, ErrGated) {
		t.Fatalf("stage without any grant: %v", err)
	}
}

func TestFenceCleaner_Run_TaintWakesItWithoutWaitingForTheInterval(t *testing.T) {
	f := newCleanerFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	node, err := f.client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoSchedule}}
	if _, err := f.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	done := make(chan struct{})
	go func() { defer close(done); f.cleaner.Run(ctx, time.Hour) }() // only the watch can wake it again
	t.Cleanup(func() { cancel(); <-done })

	deadline := time.Now().Add(10 * time.Second)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the first pass (a GET of the node)", func() bool {
		for _, a := range f.client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "nodes" {
				return true
			}
		}
		return false
	})
	// Taint the node as the manager does; nothing is left to clean here, so the
	// pass the watch starts removes the taint at once.
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: vigil.FencedTaintKey, Effect: corev1.TaintEffectNoSchedule})
	if _, err := f.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the fenced taint to be removed (interval 1 h, so only the watch can start that pass)", func() bool {
		cur, err := f.client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		return err == nil && !hasFencedTaint(cur) && len(cur.Spec.Taints) == 1
	})
}

// Until its first Sync has read the Node, the gate does not know whether the
// node is fenced and refuses every stage, even one with a live grant.
func TestFenceCleaner_AllowStage_RefusedUntilFirstSync(t *testing.T) {
	f := newCleanerFixture(t)
	ctx := context.Background()
	f.grants.atts["v"] = []datapath.Attachment{{VolumeID: "v", Node: "node-a", Epoch: 5, State: datapath.StateGranted}}
	if err := f.cleaner.AllowStage(ctx, "v", 5); !errors.Is(err, ErrGated) || !strings.Contains(err.Error(), "not known yet") {
		t.Fatalf("stage before the first sync: %v, want ErrGated saying the fence state is not known", err)
	}
	// A Node that does not exist yet tells nothing either.
	if err := f.client.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.cleaner.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.cleaner.AllowStage(ctx, "v", 5); !errors.Is(err, ErrGated) {
		t.Fatalf("stage while the Node is missing: %v, want ErrGated", err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if _, err := f.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.cleaner.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.cleaner.AllowStage(ctx, "v", 5); err != nil {
		t.Fatalf("stage with a live grant once the node is known to be unfenced: %v", err)
	}
}
