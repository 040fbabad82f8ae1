package enginenode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/engine-node/fusedisk"
	"github.com/vigil-storage/vigil/engine-node/loopdev"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// fakeDatapath is a Datapath whose volumes are sparse files (so a child
// process can serve the same volume) with the datapath's grant and fence rules
// (datapath.Store): a grant to a node that holds a live grant returns that
// grant's epoch; only a node without one (never granted, fenced or released)
// gets the volume's next epoch, and an RWO volume is granted to one node at a
// time. I/O is accepted only from a node holding a live grant with that
// grant's epoch.
type fakeDatapath struct {
	t   testing.TB
	dir string

	mu         sync.Mutex
	vols       map[string]*fakeVol
	stallAfter int           // reads left before reads stall (<0: never)
	stallWrite bool          // the next write stalls
	stalled    chan struct{} // closed when a read stalls
}

type fakeVol struct {
	size  int64
	f     *os.File
	epoch uint64
	atts  map[string]datapath.Attachment // by node
}

func newFakeDatapath(t testing.TB) *fakeDatapath { return newFakeDatapathIn(t, t.TempDir()) }

// newFakeDatapathIn keeps the volume images in dir, shared with a child process.
func newFakeDatapathIn(t testing.TB, dir string) *fakeDatapath {
	d := &fakeDatapath{t: t, dir: dir, vols: map[string]*fakeVol{}, stallAfter: -1, stalled: make(chan struct{})}
	t.Cleanup(func() {
		for _, v := range d.vols {
			v.f.Close()
		}
	})
	return d
}

func (d *fakeDatapath) imagePath(id string) string { return filepath.Join(d.dir, id+".img") }

// create makes (or, for an existing image, opens) volume id.
func (d *fakeDatapath) create(t testing.TB, id string, size int64) {
	t.Helper()
	f, err := os.OpenFile(d.imagePath(id), os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		err = f.Truncate(size)
	}
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.vols[id] = &fakeVol{size: size, f: f, atts: map[string]datapath.Attachment{}}
}

// grant gives node a live grant on id and returns its epoch: the epoch of the
// node's live grant if it has one, else the volume's next epoch. Granting an
// RWO volume held live by another node fails the test, as the datapath refuses it.
func (d *fakeDatapath) grant(id, node string) uint64 {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.vols[id]
	if a := v.atts[node]; a.Live() {
		return a.Epoch
	}
	for other, a := range v.atts {
		if a.Live() {
			d.t.Fatalf("fake datapath: grant volume %s to %s: %s holds a live grant; fence or release it first", id, node, other)
		}
	}
	return d.move(v, id, node, datapath.StateGranted)
}

// fence revokes node's grant on id under the volume's next epoch.
func (d *fakeDatapath) fence(id, node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.move(d.vols[id], id, node, datapath.StateFenced)
}

// move issues v's next epoch to node in state. The caller holds d.mu.
func (d *fakeDatapath) move(v *fakeVol, id, node string, state datapath.AttachmentState) uint64 {
	v.epoch++
	v.atts[node] = datapath.Attachment{VolumeID: id, Node: node, Epoch: v.epoch, State: state}
	return v.epoch
}

// Release ends node's live grant on id; the epoch stays (Grants).
func (d *fakeDatapath) Release(_ context.Context, id, node string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[id]
	if !ok {
		return fmt.Errorf("volume %s: %w", id, datapath.ErrNotFound)
	}
	if a := v.atts[node]; a.Live() {
		a.State = datapath.StateReleased
		v.atts[node] = a
	}
	return nil
}

// Heartbeat acknowledges every heartbeat (Grants: the datapath answers).
func (d *fakeDatapath) Heartbeat(context.Context, string) error { return nil }

// Attachments lists id's attachment table by node (Grants).
func (d *fakeDatapath) Attachments(_ context.Context, id string) ([]datapath.Attachment, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[id]
	if !ok {
		return nil, fmt.Errorf("volume %s: %w", id, datapath.ErrNotFound)
	}
	out := make([]datapath.Attachment, 0, len(v.atts))
	for _, a := range v.atts {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

func (d *fakeDatapath) check(id, node string, epoch uint64) (*fakeVol, error) {
	v, ok := d.vols[id]
	if !ok {
		return nil, fmt.Errorf("volume %s: %w", id, datapath.ErrNotFound)
	}
	if a := v.atts[node]; !a.Live() || a.Epoch != epoch {
		return nil, fmt.Errorf("volume %s node %s epoch %d: %w", id, node, epoch, datapath.ErrFenced)
	}
	return v, nil
}

func (d *fakeDatapath) GetVolume(_ context.Context, id string) (datapath.Volume, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.vols[id]
	if !ok {
		return datapath.Volume{}, fmt.Errorf("volume %s: %w", id, datapath.ErrNotFound)
	}
	return datapath.Volume{ID: id, Name: id, Size: v.size, Access: datapath.AccessRWO}, nil
}

func (d *fakeDatapath) ReadAt(ctx context.Context, id, node string, epoch uint64, off int64, n int) ([]byte, error) {
	d.mu.Lock()
	v, err := d.check(id, node, epoch)
	stall := false
	if d.stallAfter == 0 {
		stall = true
		d.stallAfter = -1
		close(d.stalled)
	} else if d.stallAfter > 0 {
		d.stallAfter--
	}
	d.mu.Unlock()
	if stall {
		<-ctx.Done() // a datapath that stopped answering
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	p := make([]byte, n)
	if _, err := v.f.ReadAt(p, off); err != nil && err != io.EOF {
		return nil, err
	}
	return p, nil
}

func (d *fakeDatapath) WriteAt(ctx context.Context, id, node string, epoch uint64, off int64, p []byte) error {
	d.mu.Lock()
	if d.stallWrite {
		d.stallWrite = false
		close(d.stalled)
		d.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	defer d.mu.Unlock()
	v, err := d.check(id, node, epoch)
	if err != nil {
		return err
	}
	_, err = v.f.WriteAt(p, off)
	return err
}

func (d *fakeDatapath) Flush(_ context.Context, id, node string, epoch uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.check(id, node, epoch)
	if err != nil {
		return err
	}
	return v.f.Sync()
}

// requireRealStack needs FUSE, loop devices and the ext4 tools (testenv:
// a skip on a developer's machine, a failure in CI).
func requireRealStack(t testing.TB) {
	t.Helper()
	testenv.RequireNoError(t, "FUSE", fusedisk.Usable())
	testenv.RequireNoError(t, "loop devices", loopdev.Usable())
	testenv.RequireTool(t, "mkfs.ext4", "e2fsprogs")
	testenv.RequireTool(t, "blkid", "util-linux")
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newTestServer starts a NodeServer in a fresh state directory; on cleanup it
// unpublishes and unstages whatever is left and checks nothing leaked.
func newTestServer(t testing.TB, dp Datapath, node string) *NodeServer {
	t.Helper()
	return newTestServerIn(t, dp, node, t.TempDir(), "boot-1")
}

// newTestServerIn starts a NodeServer on an existing state directory.
func newTestServerIn(t testing.TB, dp Datapath, node, stateDir, bootID string) *NodeServer {
	t.Helper()
	n, err := NewNodeServer(context.Background(), Config{
		NodeName: node, StateDir: stateDir, BootID: bootID, Datapath: dp,
		IOTimeout: 5 * time.Second, Log: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupServer(t, n) })
	return n
}

func cleanupServer(t testing.TB, n *NodeServer) {
	ctx := context.Background()
	pubs, _ := n.journal.Publishes()
	for _, p := range pubs {
		if _, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: p.VolumeID, TargetPath: p.TargetPath}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	stages, _ := n.journal.Stages()
	for _, s := range stages {
		if _, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: s.VolumeID, StagingTargetPath: s.StagingPath}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	n.Close()
	assertNothingLeaked(t, n.cfg.StateDir)
}

// assertNothingLeaked fails when a FUSE disk or loop device of stateDir remains.
func assertNothingLeaked(t testing.TB, stateDir string) {
	t.Helper()
	root := filepath.Join(stateDir, "disks")
	var devs []string
	for i := 0; i < 100; i++ { // autoclear detaches asynchronously
		var err error
		if devs, err = loopdev.Under(root); err != nil || len(devs) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(devs) > 0 {
		t.Errorf("loop devices leaked: %v", devs)
	}
	all, _ := mounts()
	for _, m := range all {
		if strings.HasPrefix(m.MountPoint, stateDir+"/") {
			t.Errorf("mount leaked: %+v", m)
		}
	}
}

// Requests, built with the defaults the tests use.

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

func stageReq(id, staging string, epoch uint64, c *csi.VolumeCapability) *csi.NodeStageVolumeRequest {
	return &csi.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, VolumeCapability: c,
		PublishContext: map[string]string{vigil.PublishContextEpochKey: fmt.Sprint(epoch)},
	}
}

func publishReq(id, staging, target string, c *csi.VolumeCapability) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: staging, TargetPath: target, VolumeCapability: c,
		VolumeContext: map[string]string{podUIDKey: "uid-1", podNameKey: "web-0", podNamespaceKey: "default"},
	}
}

func bytesReader(s string) *strings.Reader { return strings.NewReader(s) }
