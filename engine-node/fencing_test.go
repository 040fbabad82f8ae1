package enginenode

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-storage/vigil/datapath"
)

// writerDirEnv makes the test binary a writer process (TestHelperWriter).
const writerDirEnv = "VIGIL_TEST_WRITER_DIR"

func fileContent(i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("file %04d ", i)), 6000) // ~60 KiB
}

// TestHelperWriter is not a test: run with writerDirEnv set, it is the
// application of the fencing test. It writes and fsyncs one file after another,
// printing "ok N" after each fsync and "err N <error>" for each failure, and
// stops after three failures in a row.
func TestHelperWriter(t *testing.T) {
	dir := os.Getenv(writerDirEnv)
	if dir == "" {
		t.Skip("helper process for TestNodeServer_Fence_WritesFailWithEIO")
	}
	failures := 0
	for i := 0; failures < 3 && i < 100000; i++ {
		err := writeAndSync(filepath.Join(dir, fmt.Sprintf("f%04d", i)), fileContent(i))
		if err != nil {
			failures++
			fmt.Printf("err %d %v\n", i, err)
			continue
		}
		failures = 0
		fmt.Printf("ok %d\n", i)
		time.Sleep(5 * time.Millisecond)
	}
	os.Exit(0)
}

func writeAndSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fenceBackend is a datapath the fencing tests drive from the side.
type fenceBackend struct {
	dp    Datapath
	id    string
	image string // the volume's data file on the datapath's side
	grant func(node string) uint64
	fence func(node string)
}

func fakeFenceBackend(t *testing.T) fenceBackend {
	dp := newFakeDatapath(t)
	dp.create(t, "vol-f", testSize)
	return fenceBackend{dp: dp, id: "vol-f", image: dp.imagePath("vol-f"),
		grant: func(node string) uint64 { return dp.grant("vol-f", node) },
		fence: func(node string) { dp.fence("vol-f", node) }}
}

func realFenceBackend(t *testing.T) fenceBackend {
	c, srv := startRealDatapathServer(t)
	ctx := context.Background()
	vol, err := c.CreateVolume(ctx, "pvc-fence", testSize, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	return fenceBackend{dp: c, id: vol.ID, image: srv.Store.DataFile(vol.ID),
		grant: func(node string) uint64 {
			e, err := c.Grant(ctx, vol.ID, node)
			if err != nil {
				t.Fatal(err)
			}
			return e
		},
		fence: func(node string) {
			if _, err := c.Fence(ctx, vol.ID, node); err != nil {
				t.Error(err)
			}
		}}
}

// ackWatch is a Datapath that counts the writes and flushes of one node that
// began after arm and that the datapath acknowledged: once that node is
// fenced, there must be none.
type ackWatch struct {
	Datapath
	node  string
	armed atomic.Bool
	acked atomic.Int64
}

func (w *ackWatch) arm() { w.armed.Store(true) }

func (w *ackWatch) count(node string, armed bool, err error) error {
	if armed && err == nil && node == w.node {
		w.acked.Add(1)
	}
	return err
}

func (w *ackWatch) WriteAt(ctx context.Context, id, node string, epoch uint64, off int64, p []byte) error {
	armed := w.armed.Load()
	return w.count(node, armed, w.Datapath.WriteAt(ctx, id, node, epoch, off, p))
}

func (w *ackWatch) Flush(ctx context.Context, id, node string, epoch uint64) error {
	armed := w.armed.Load()
	return w.count(node, armed, w.Datapath.Flush(ctx, id, node, epoch))
}

func readImage(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// differing counts the bytes in which a and b differ.
func differing(a, b []byte) int {
	n := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// TestNodeServer_Fence_WritesFailWithEIO: an application writes and fsyncs
// files on the mounted volume; the volume is fenced from the side; from then on
// its writes fail with EIO, the datapath takes nothing more from this node, and
// a new node sees exactly the files synced before the fence. Run against the
// test double and the real datapath server; both are checked from the
// datapath's side: it acknowledges nothing node-a begins after the fence, and
// its copy of the volume does not change by a single byte.
func TestNodeServer_Fence_WritesFailWithEIO(t *testing.T) {
	requireRealStack(t)
	t.Run("fake datapath", func(t *testing.T) { testFence(t, fakeFenceBackend(t)) })
	t.Run("real datapath", func(t *testing.T) { testFence(t, realFenceBackend(t)) })
}

func testFence(t *testing.T, fb fenceBackend) {
	watch := &ackWatch{Datapath: fb.dp, node: "node-a"}
	a := newTestServer(t, watch, "node-a")
	ctx := context.Background()
	staging, target := t.TempDir(), filepath.Join(t.TempDir(), "m")
	if _, err := a.NodeStageVolume(ctx, stageReq(fb.id, staging, fb.grant("node-a"), mountCap())); err != nil {
		t.Fatal(err)
	}
	if _, err := a.NodePublishVolume(ctx, publishReq(fb.id, staging, target, mountCap())); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$")
	cmd.Env = append(os.Environ(), writerDirEnv+"="+target)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	okBefore, okAfter, fenced := 0, 0, false
	var frozen []byte // the datapath's copy of the volume when the fence returned
	var failures []string
	for lines.Scan() {
		line := lines.Text()
		switch {
		case strings.HasPrefix(line, "ok ") && fenced:
			okAfter++
		case strings.HasPrefix(line, "ok "):
			okBefore++
			if okBefore == 10 {
				fb.fence("node-a") // from the side, as the manager would
				watch.arm()
				frozen = readImage(t, fb.image)
				fenced = true
			}
		case strings.HasPrefix(line, "err "):
			failures = append(failures, line)
		}
	}
	_ = cmd.Wait()
	if !fenced {
		t.Fatalf("the writer stopped after %d files, before the fence", okBefore)
	}
	if n := watch.acked.Load(); n != 0 {
		t.Fatalf("the datapath acknowledged %d writes or flushes that node-a began after its fence", n)
	}
	if d := differing(frozen, readImage(t, fb.image)); d != 0 {
		t.Fatalf("the datapath's copy of the volume changed by %d bytes after the fence", d)
	}
	// A write+fsync that was in flight when the fence hit may have finished
	// before it; none may succeed once the fence is in force.
	if !fenced || okAfter > 1 {
		t.Fatalf("fenced=%t, %d writes succeeded after the fence", fenced, okAfter)
	}
	if len(failures) < 3 || !strings.Contains(failures[0], "input/output error") {
		t.Fatalf("failures after the fence: %q; want EIO", failures)
	}
	if got := testutil.ToFloat64(a.metrics.writesFenced); got == 0 {
		t.Fatal("vigil_engine_writes_fenced_total did not move")
	}
	t.Logf("%d files synced before the fence, %d after, then %q", okBefore, okAfter, failures[0])

	// The node cleans up despite the dead volume; a new node sees exactly what
	// was synced before the fence.
	if _, err := a.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: fb.id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: fb.id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	b := newTestServer(t, fb.dp, "node-b")
	stagingB := t.TempDir()
	if _, err := b.NodeStageVolume(ctx, stageReq(fb.id, stagingB, fb.grant("node-b"), mountCap())); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < okBefore+okAfter; i++ {
		got, err := os.ReadFile(filepath.Join(stagingB, fmt.Sprintf("f%04d", i)))
		if err != nil || !bytes.Equal(got, fileContent(i)) {
			t.Fatalf("file %d synced before the fence is not intact on node-b: %d bytes, %v", i, len(got), err)
		}
	}
}
