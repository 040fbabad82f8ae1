package enginenode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/engine-node/fdkeeper"
)

// TestKeeperUpgrade_DrainedNode follows the keeper upgrade of
// docs/operations.md with real processes: an engine, a keeper process
// (`vigil-engine-node fd-keeper`) and a real datapath. A volume is staged,
// published and written; the node is drained (unpublish, unstage: the keeper
// holds nothing); the keeper is stopped (SIGTERM) and a new keeper process
// started on the same socket, the engine left running. A volume staged then
// must be deposited with the new keeper (its list shows it), and an engine
// SIGKILL and restart must adopt it while a writer keeps writing: the engine
// holds no connection to the keeper that is gone.
func TestKeeperUpgrade_DrainedNode(t *testing.T) {
	requireRealStack(t)
	ctx := context.Background()
	roles, srv := startRealDatapathServer(t)
	vol, err := roles.CreateVolume(ctx, "pvc-keeper-upgrade", testSize, datapath.AccessRWO)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := roles.Grant(ctx, vol.ID, "node-u")
	if err != nil {
		t.Fatal(err)
	}
	args := engineArgs(t, srv, "node-u")
	stateDir := flagValue(args, "--state-dir")
	dir := filepath.Dir(stateDir)
	sock := filepath.Join(dir, "keeper.sock")
	args = append(args, "--fd-keeper-socket", sock, "--graceful-leave", "0")
	keeperArgs := []string{"vigil-engine-node", "fd-keeper", "--socket", sock}
	keeper, klogs := startLoggedEngine(t, keeperArgs, "fd keeper serving")
	t.Cleanup(func() { tearDownLeftovers(t, stateDir) }) // after the processes' kills

	engine, logs := startLoggedEngine(t, args, "engine-node starting")
	node := nodeClient(t, flagValue(args, "--csi-endpoint"))
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := node.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
		t.Fatalf("stage: %v\n%s", err, logs)
	}
	if _, err := node.NodePublishVolume(ctx, publishReq(vol.ID, staging, target, mountCap())); err != nil {
		t.Fatalf("publish: %v\n%s", err, logs)
	}
	requireKept(t, sock, vol.ID, "after the first stage")
	if err := os.WriteFile(filepath.Join(target, "before"), []byte("written before the keeper upgrade"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The drain: the pod goes, the volume is unpublished and unstaged.
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol.ID, TargetPath: target}); err != nil {
		t.Fatalf("unpublish: %v\n%s", err, logs)
	}
	if _, err := node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol.ID, StagingTargetPath: staging}); err != nil {
		t.Fatalf("unstage: %v\n%s", err, logs)
	}
	requireKept(t, sock, "", "after the drain")

	// The upgrade: the keeper pod is deleted, the DaemonSet starts a new one.
	if err := keeper.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := keeper.Wait(); err != nil {
		t.Fatalf("keeper after SIGTERM: %v\n%s", err, klogs)
	}
	if strings.Contains(klogs.String(), "while holding connections") {
		t.Fatalf("the drained keeper still held connections when stopped:\n%s", klogs)
	}
	_, klogs = startLoggedEngine(t, keeperArgs, "fd keeper serving")

	// The node is uncordoned and a pod uses the volume again.
	if _, err := node.NodeStageVolume(ctx, stageReq(vol.ID, staging, epoch, mountCap())); err != nil {
		t.Fatalf("stage after the keeper upgrade: %v\n%s", err, logs)
	}
	if _, err := node.NodePublishVolume(ctx, publishReq(vol.ID, staging, target, mountCap())); err != nil {
		t.Fatalf("publish after the keeper upgrade: %v\n%s", err, logs)
	}
	if strings.Contains(logs.String(), "did not take the volume's FUSE connection") {
		t.Fatalf("the engine could not deposit with the new keeper:\n%s\nkeeper:\n%s", logs, klogs)
	}
	requireKept(t, sock, vol.ID, "after the stage with the new keeper")
	if got, err := os.ReadFile(filepath.Join(target, "before")); err != nil || string(got) != "written before the keeper upgrade" {
		t.Fatalf("the file written before the upgrade reads %q, %v", got, err)
	}

	writer := startWriter(t, filepath.Join(target, "records"))
	t.Cleanup(func() { abortDisks(stateDir) }) // first: a stuck writer exits only then
	time.Sleep(300 * time.Millisecond)
	if err := engine.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = engine.Wait()
	_, logs = startLoggedEngine(t, args, "engine-node starting")
	if !strings.Contains(logs.String(), "adopted the volume's FUSE connection") {
		t.Fatalf("after the keeper upgrade and an engine SIGKILL the new engine did not adopt the kept connection:\n%s", logs)
	}
	time.Sleep(300 * time.Millisecond)
	if err := writer.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	writer.expect(t, "max")
	if err := os.WriteFile(filepath.Join(target, "records.stop"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	writer.expect(t, "done")
	if err := writer.cmd.Wait(); err != nil {
		t.Fatalf("writer across the engine restart: %v: %s", err, writer.errs)
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vol.ID, TargetPath: target}); err != nil {
		t.Fatalf("unpublish: %v\n%s", err, logs)
	}
	if _, err := node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol.ID, StagingTargetPath: staging}); err != nil {
		t.Fatalf("unstage: %v\n%s", err, logs)
	}
	requireKept(t, sock, "", "after the last unstage")
}

// requireKept fails t unless the keeper at sock holds exactly volume's
// connection, or nothing when volume is "".
func requireKept(t *testing.T, sock, volume, when string) {
	t.Helper()
	held, err := fdkeeper.Client{Path: sock}.List()
	if err != nil {
		t.Fatalf("%s: list the keeper: %v", when, err)
	}
	var got []string
	for _, e := range held {
		got = append(got, e.Volume)
	}
	if want := []string{volume}; volume == "" && len(got) != 0 || volume != "" && (len(got) != 1 || got[0] != want[0]) {
		t.Fatalf("%s the keeper holds %v, want %q", when, got, volume)
	}
}
