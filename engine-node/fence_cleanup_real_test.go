package enginenode

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

// TestFenceCleaner_RealStack_TaintToClean drives the whole story on a real
// datapath and real mounts: node-a stages and publishes a volume for a pod; the
// volume is fenced and node-a tainted; the pod is force-deleted. One Sync
// unmounts and detaches everything and releases the grant, the next removes
// the taint; the gate refuses the old epoch and admits a fresh grant. It logs
// the time from the taint to a clean, untainted node.
func TestFenceCleaner_RealStack_TaintToClean(t *testing.T) {
	requireRealStack(t)
	dp := startRealDatapath(t)
	ctx := context.Background()
	vol, err := dp.CreateVolume(ctx, "pvc-reap", testSize, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := dp.Grant(ctx, vol.ID, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	n := newTestServer(t, dp, "node-a")
	staging, target := t.TempDir(), filepath.Join(t.TempDir(), "mount")
	if _, err := n.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodePublishVolume(ctx, publishReq(vol.ID, staging, target, mountCap())); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	client := fake.NewClientset([]runtime.Object{node, pod("web-0", "uid-1", "node-a")}...)
	c := &FenceCleaner{Node: "node-a", Client: client, Server: n, Grants: dp, Recorder: record.NewFakeRecorder(10), Metrics: n.metrics, Log: quiet}
	n.cfg.Gate = c

	// The manager fences, reaps and taints.
	if _, err := dp.Fence(ctx, vol.ID, "node-a"); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = []corev1.Taint{{Key: vigil.FencedTaintKey, Effect: corev1.TaintEffectNoSchedule}}
	if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < 2; i++ {
		if err := c.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	got, _ := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if hasFencedTaint(got) {
		t.Fatal("taint still there after cleanup")
	}
	if _, m, _ := mountAt(target); m || exists(target) {
		t.Fatal("the reaped pod's target is still mounted or present")
	}
	if _, m, _ := mountAt(staging); m {
		t.Fatal("staging path still mounted")
	}
	assertNothingLeaked(t, n.cfg.StateDir)
	t.Logf("taint to clean and untainted: %v (two Sync passes, unmount, loop and FUSE teardown, release)", elapsed)

	// The gate: the old epoch is refused; a fresh grant is admitted.
	_, err = n.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap()))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "fresh grant") {
		t.Fatalf("stage with the fenced epoch: %v, want the gate to refuse (FailedPrecondition)", err)
	}
	fresh, err := dp.Grant(ctx, vol.ID, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodeStageVolume(ctx, stageReq(vol.ID, staging, fresh, mountCap())); err != nil {
		t.Fatalf("stage with the fresh grant (epoch %d): %v", fresh, err)
	}
	if _, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol.ID, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
}
