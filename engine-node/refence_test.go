package enginenode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// requireFsck is requireRealStack plus e2fsck, which checks a volume's ext4.
func requireFsck(t *testing.T) {
	t.Helper()
	requireRealStack(t)
	testenv.RequireTool(t, "e2fsck", "e2fsprogs")
}

// fsckClean fails t unless e2fsck, forced and read-only, finds nothing wrong
// with the filesystem in image.
func fsckClean(t *testing.T, image string) {
	t.Helper()
	out, err := exec.Command("e2fsck", "-f", "-n", image).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -f -n %s: %v\n%s", image, err, out)
	}
}

// productionGate is the gate the engine runs with: a FenceCleaner over a
// Node without the fenced taint, synced once, asking grants on the datapath.
func productionGate(t *testing.T, n *NodeServer, grants Grants) *FenceCleaner {
	t.Helper()
	name := n.cfg.NodeName
	c := &FenceCleaner{Node: name, Server: n, Grants: grants, Metrics: n.metrics, Log: quiet,
		Recorder: record.NewFakeRecorder(10),
		Client:   fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})}
	if err := c.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.cfg.Gate = c
	return c
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := writeAndSync(path, []byte(content)); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

func mustRead(t *testing.T, path, want, why string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Fatalf("%s: read %s = %q, %v; want %q", why, path, got, err, want)
	}
}

// TestNodeServer_Stage_AfterFenceMountsFresh is the story of a fenced node that returns
// on real mounts, with two NodeServers (own node names and state dirs) and the
// production gate on each. node-a writes and is fenced; node-b is granted,
// sees node-a's data and changes it; node-b is fenced while still mounted (a
// zombie); node-a, which still has the volume staged, is granted again and
// asked to stage it with the new epoch. Its old stack, whose ext4 and caches
// know nothing of node-b's writes, must not resume: a new mount shows
// node-b's writes, takes new ones, and the volume is fsck-clean after it.
// Run against the test double and the real datapath server.
func TestNodeServer_Stage_AfterFenceMountsFresh(t *testing.T) {
	requireFsck(t)
	t.Run("fake datapath", func(t *testing.T) { testStageAfterFence(t, fakeFenceBackend(t)) })
	t.Run("real datapath", func(t *testing.T) { testStageAfterFence(t, realFenceBackend(t)) })
}

func testStageAfterFence(t *testing.T, fb fenceBackend) {
	ctx := context.Background()
	grants := fb.dp.(Grants)
	a, b := newTestServer(t, fb.dp, "node-a"), newTestServer(t, fb.dp, "node-b")
	productionGate(t, a, grants)
	productionGate(t, b, grants)
	stagingA, stagingB := t.TempDir(), t.TempDir()

	first := fb.grant("node-a")
	if _, err := a.NodeStageVolume(ctx, stageReq(fb.id, stagingA, first, mountCap())); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(stagingA, "shared"), "written by node-a")
	mustRead(t, filepath.Join(stagingA, "shared"), "written by node-a", "node-a, before the fence") // cached on node-a
	oldStack := a.live(fb.id)
	fb.fence("node-a")

	if _, err := b.NodeStageVolume(ctx, stageReq(fb.id, stagingB, fb.grant("node-b"), mountCap())); err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(stagingB, "shared"), "written by node-a", "node-b after the fence of node-a")
	mustWrite(t, filepath.Join(stagingB, "shared"), "rewritten by node-b")
	if err := os.Mkdir(filepath.Join(stagingB, "made-by-b"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(stagingB, "made-by-b", "f"), "new file of node-b")
	fb.fence("node-b") // node-b stays mounted: a zombie, refused by the datapath

	again := fb.grant("node-a")
	if again <= first {
		t.Fatalf("the second grant to node-a has epoch %d, not above its first %d", again, first)
	}
	if _, err := a.NodeStageVolume(ctx, stageReq(fb.id, stagingA, again, mountCap())); err != nil {
		t.Fatalf("stage on node-a with the fresh grant (epoch %d): %v", again, err)
	}
	if st := a.live(fb.id); st == nil || st == oldStack || st.backend.epoch != again {
		t.Fatalf("node-a serves the volume with stack %p (the old one was %p), want a new one at epoch %d", st, oldStack, again)
	}
	if rec, _, _ := a.journal.Stage(fb.id); rec.Epoch != again || rec.Phase != PhaseStaged {
		t.Fatalf("journal after the fresh stage: %+v, want staged at epoch %d", rec, again)
	}
	mustRead(t, filepath.Join(stagingA, "shared"), "rewritten by node-b", "node-a after node-b's writes")
	mustRead(t, filepath.Join(stagingA, "made-by-b", "f"), "new file of node-b", "node-a after node-b's writes")
	mustWrite(t, filepath.Join(stagingA, "after"), "node-a writes under its new grant")

	if _, err := a.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: fb.id, StagingTargetPath: stagingA}); err != nil {
		t.Fatal(err)
	}
	fsckClean(t, fb.image)
}

// A volume still published when a stage brings a higher epoch is refused and
// left as it is: the bind mounts hold the old filesystem, only their pods'
// end lets go of it. Once unpublished, the stage builds a fresh stack.
func TestNodeServer_Stage_AfterFenceWhilePublishedRefused(t *testing.T) {
	requireRealStack(t)
	dp := newFakeDatapath(t)
	dp.create(t, "vol-p", testSize)
	n := newTestServer(t, dp, "node-a")
	ctx := context.Background()
	staging, target := t.TempDir(), filepath.Join(t.TempDir(), "m")
	first := dp.grant("vol-p", "node-a")
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-p", staging, first, mountCap())); err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodePublishVolume(ctx, publishReq("vol-p", staging, target, mountCap())); err != nil {
		t.Fatal(err)
	}
	dp.fence("vol-p", "node-a")
	again := dp.grant("vol-p", "node-a")
	_, err := n.NodeStageVolume(ctx, stageReq("vol-p", staging, again, mountCap()))
	wantCode(t, err, codes.FailedPrecondition, target)
	if rec, _, _ := n.journal.Stage("vol-p"); rec.Epoch != first || rec.Phase != PhaseStaged || n.live("vol-p") == nil {
		t.Fatalf("a refused stage changed the stage: %+v (live %t)", rec, n.live("vol-p") != nil)
	}
	if _, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-p", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-p", staging, again, mountCap())); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(staging, "f"), "written under the new grant")
}

// gateFunc is a Gate.
type gateFunc func(ctx context.Context, volumeID string, epoch uint64) error

func (f gateFunc) AllowStage(ctx context.Context, volumeID string, epoch uint64) error {
	return f(ctx, volumeID, epoch)
}

// When the gate refuses the stage that brought a higher epoch, the old stack
// is down all the same and stays down; the next stage the gate admits builds
// a new one.
func TestNodeServer_Stage_AfterFenceGateRefusesOldStackStaysDown(t *testing.T) {
	requireRealStack(t)
	dp := newFakeDatapath(t)
	dp.create(t, "vol-g", testSize)
	n := newTestServer(t, dp, "node-a")
	ctx := context.Background()
	staging := t.TempDir()
	first := dp.grant("vol-g", "node-a")
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-g", staging, first, mountCap())); err != nil {
		t.Fatal(err)
	}
	refuse := true
	n.cfg.Gate = gateFunc(func(context.Context, string, uint64) error {
		if refuse {
			return ErrGated
		}
		return nil
	})
	dp.fence("vol-g", "node-a")
	again := dp.grant("vol-g", "node-a")
	_, err := n.NodeStageVolume(ctx, stageReq("vol-g", staging, again, mountCap()))
	wantCode(t, err, codes.FailedPrecondition, ErrGated.Error())
	if _, m, _ := mountAt(staging); m || n.live("vol-g") != nil {
		t.Fatal("the old stack is still up after a stage with a higher epoch")
	}
	assertNothingLeaked(t, n.cfg.StateDir)
	if rec, ok, _ := n.journal.Stage("vol-g"); !ok || rec.Phase != PhaseUnstaging || rec.Epoch != first {
		t.Fatalf("journal: %+v, %t; want the old stage kept as unstaging", rec, ok)
	}
	refuse = false
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-g", staging, again, mountCap())); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := n.journal.Stage("vol-g"); rec.Epoch != again || rec.Phase != PhaseStaged {
		t.Fatalf("journal after the admitted stage: %+v", rec)
	}
}
