package kubelet

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/client"
	vcsi "github.com/vigil-storage/vigil/datapath/csi"
	"github.com/vigil-storage/vigil/datapath/datapathtest"
	enginenode "github.com/vigil-storage/vigil/engine-node"
	"github.com/vigil-storage/vigil/engine-node/fusedisk"
	"github.com/vigil-storage/vigil/engine-node/loopdev"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vigil-storage/vigil/internal/testenv"
)

// requireRealStack needs the engine's FUSE + loop + ext4 stack (testenv: a
// skip on a developer's machine, a failure in CI).
func requireRealStack(t *testing.T) {
	t.Helper()
	testenv.RequireNoError(t, "FUSE", fusedisk.Usable())
	testenv.RequireNoError(t, "loop devices", loopdev.Usable())
	testenv.RequireTool(t, "mkfs.ext4", "e2fsprogs")
	testenv.RequireTool(t, "blkid", "util-linux")
}

// mountsUnder lists the mount points below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	return out
}

// startRealNode serves the real node service of testNode over a real datapath
// on a unix socket, the engine with its node's token; it returns a client
// with the controller's. Cleanups stop it after everything registered later.
func startRealNode(t *testing.T) (*client.Client, string, csi.NodeClient) {
	t.Helper()
	requireRealStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dp := datapathtest.Start(t, datapath.Options{})
	dpc, err := client.Dial(ctx, dp.Addr, dp.Token) // the controller's, returned for grants
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dpc.Close() })
	engine, err := client.Dial(ctx, dp.Addr, dp.NodeToken(testNode)) // the engine's own
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close() })
	ns, err := enginenode.NewNodeServer(ctx, enginenode.Config{NodeName: testNode, StateDir: t.TempDir(), BootID: "boot-1", Datapath: engine, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	sockDir, err := os.MkdirTemp("", "kltreal")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	endpoint := "unix://" + filepath.Join(sockDir, "csi.sock")
	srv := vcsi.NewServer(nil, vcsi.WithNodeService(ns), vcsi.WithLogger(quiet))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, endpoint) }()
	t.Cleanup(func() { srv.Stop(); <-served })
	<-srv.Ready()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return dpc, endpoint, csi.NewNodeClient(conn)
}

// newRealVolume creates a 64 MiB volume named pv and grants it to testNode.
func newRealVolume(t *testing.T, dpc *client.Client, pv string) (string, uint64) {
	t.Helper()
	vol, err := dpc.CreateVolume(context.Background(), pv, 64<<20, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := dpc.Grant(context.Background(), vol.ID, testNode)
	if err != nil {
		t.Fatal(err)
	}
	return vol.ID, epoch
}

// TestKubelet_RealNodeService drives the stand-in against the real engine-node
// node service (FUSE disk over a real datapath, loop device, ext4): the pod's
// target path holds a writable filesystem, a restarted stand-in leaves it as
// it is, and after the pod goes nothing of it stays mounted.
func TestKubelet_RealNodeService(t *testing.T) {
	dpc, endpoint, nodeClient := startRealNode(t)
	volID, epoch := newRealVolume(t, dpc, "pv-1")
	pod := newPod("web", claimVolume("data", "claim-1"))
	root := t.TempDir()
	f := newFixtureOn(t, root, endpoint, nodeClient,
		newPVC("claim-1", "pv-1"), newPV("pv-1", volID), newVA("pv-1", volID, true, strconv.FormatUint(epoch, 10)), pod)
	t.Cleanup(func() { // whatever a failure left mounted
		f.remove(pod)
		f.sync()
	})
	target := TargetPath(root, pod.UID, "pv-1", false)
	f.syncRetrying(func() bool { return len(mountsUnder(t, root)) == 2 }) // staging and target
	if err := os.WriteFile(filepath.Join(target, "hello"), []byte("world"), 0o600); err != nil {
		t.Fatalf("write through the published target: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(StagingPath(root, "driver.vigil.io", volID, "pv-1", false), "hello")); err != nil || string(got) != "world" {
		t.Fatalf("read through the staging mount: %q, %v", got, err)
	}
	if got := f.nodeInUse(); len(got) != 1 || got[0] != UniqueVolumeName("driver.vigil.io", volID) {
		t.Errorf("volumesInUse = %v", got)
	}

	// A restarted stand-in stages and publishes again: idempotent on the real
	// node service, the data is still there.
	k, err := newKubelet(f.k.cfg, f.k.csi, f.inf.pods, f.inf, f.rec)
	if err != nil {
		t.Fatal(err)
	}
	f.k = k
	f.sync()
	if w := f.warnings(); len(w) != 0 {
		t.Errorf("restart: %q", w)
	}
	if got, err := os.ReadFile(filepath.Join(target, "hello")); err != nil || string(got) != "world" {
		t.Fatalf("after a restart of the stand-in: %q, %v", got, err)
	}
	if m := mountsUnder(t, root); len(m) != 2 {
		t.Errorf("mounts after restart = %v, want staging and target once each", m)
	}

	f.remove(pod)
	f.syncRetrying(func() bool { return len(mountsUnder(t, root)) == 0 })
	if m := mountsUnder(t, root); len(m) != 0 {
		t.Errorf("still mounted after the pod went: %v", m)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target %s left behind: %v", target, err)
	}
	if got := f.nodeInUse(); len(got) != 0 {
		t.Errorf("volumesInUse = %v, want none", got)
	}
}

// syncRetrying syncs until done holds, letting the backoff of failed
// operations pass between rounds, as the kubelet would retry: the loop
// devices and FUSE are shared with whatever else runs on the machine, and a
// transient failure there is retried, not fatal. Failures are logged.
func (f *fixture) syncRetrying(done func() bool) {
	f.t.Helper()
	for range 5 {
		f.sync()
		for _, w := range f.warnings() {
			f.t.Logf("retried after: %s", w)
		}
		if done() {
			return
		}
		f.clock.Step(DefaultBackoffMax)
	}
	f.t.Fatalf("not done after 5 rounds of retries; mounts under %s: %v", f.root, mountsUnder(f.t, f.root))
}

// TestKubelet_RealNodeService_Block publishes a Block volume: the target is
// the loop device itself.
func TestKubelet_RealNodeService_Block(t *testing.T) {
	dpc, endpoint, nodeClient := startRealNode(t)
	volID, epoch := newRealVolume(t, dpc, "pv-b")
	pv := newPV("pv-b", volID)
	pv.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	pod := newPod("db", claimVolume("dev", "claim-b"))
	root := t.TempDir()
	f := newFixtureOn(t, root, endpoint, nodeClient,
		newPVC("claim-b", "pv-b"), pv, newVA("pv-b", volID, true, strconv.FormatUint(epoch, 10)), pod)
	t.Cleanup(func() {
		f.remove(pod)
		f.sync()
	})
	target := TargetPath(root, pod.UID, "pv-b", true)
	f.syncRetrying(func() bool { return len(mountsUnder(t, root)) == 1 })
	if fi, err := os.Stat(target); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Fatalf("target %s = %v, %v; want the block device", target, fi, err)
	}
	f.remove(pod)
	f.syncRetrying(func() bool { return len(mountsUnder(t, root)) == 0 })
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target %s left behind: %v", target, err)
	}
}
