package enginenode

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/vigil-storage/vigil/engine-node/fdkeeper"
)

// inProcessKeeper serves a keeper in this process for NodeServers under test.
func inProcessKeeper(t *testing.T) (*fdkeeper.Keeper, fdkeeper.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "vkeep") // a socket path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	l, err := fdkeeper.Listen(filepath.Join(dir, "k.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := fdkeeper.New(quiet)
	ctx, cancel := context.WithCancel(context.Background())
	go k.Serve(ctx, l)
	t.Cleanup(func() { cancel(); k.Close(); os.RemoveAll(dir) })
	return k, fdkeeper.Client{Path: filepath.Join(dir, "k.sock")}
}

// TestNodeServer_Recover_AdoptsKeptConnectionOnlyWhenIntact restarts a
// NodeServer in this process (the first stops serving and closes, as on
// SIGTERM; the keeper holds the connection): a kept connection of the
// journaled epoch over an intact stack is adopted, the same FUSE mount serving
// on; one the keeper holds under another epoch is not, and the stack is built
// again, whose new connection the keeper then holds.
func TestNodeServer_Recover_AdoptsKeptConnectionOnlyWhenIntact(t *testing.T) {
	requireRealStack(t)
	for _, tc := range []struct {
		name      string
		keptEpoch func(uint64) uint64
		adopted   bool
	}{
		{"intact, same epoch", func(e uint64) uint64 { return e }, true},
		{"kept under another epoch", func(e uint64) uint64 { return e + 1 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dp := newFakeDatapath(t)
			dp.create(t, "vol-h", testSize)
			epoch := dp.grant("vol-h", "node-a")
			keeper, kc := inProcessKeeper(t)
			state, staging := t.TempDir(), t.TempDir()
			first, err := NewNodeServer(ctx, Config{NodeName: "node-a", StateDir: state, BootID: "boot-1",
				Datapath: dp, Keeper: kc, Log: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := first.NodeStageVolume(ctx, stageReq("vol-h", staging, epoch, mountCap())); err != nil {
				t.Fatal(err)
			}
			mustWrite(t, filepath.Join(staging, "before"), "written before the restart")
			diskDir := diskDir(state, "vol-h")
			before, _, _ := mountAt(diskDir)
			var kept keptDisk
			fd, err := kc.Get("vol-h", &kept)
			if err != nil {
				t.Fatalf("the keeper holds nothing after the stage: %v", err)
			}
			kept.Epoch = tc.keptEpoch(kept.Epoch)
			if err := kc.Put("vol-h", fd, kept); err != nil {
				t.Fatal(err)
			}
			unix.Close(fd)
			first.StopServing()
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}

			logs := &syncBuffer{}
			second, err := NewNodeServer(ctx, Config{NodeName: "node-a", StateDir: state, BootID: "boot-1",
				Datapath: dp, Keeper: kc, Log: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cleanupServer(t, second) })
			if second.live("vol-h") == nil {
				t.Fatal("the volume is not served after the restart")
			}
			// A FUSE mount made again may get the device number its
			// predecessor freed, so only the engine's own account tells a
			// rebuilt stack; a new device number tells it too.
			after, _, _ := mountAt(diskDir)
			rebuilt := strings.Contains(logs.String(), "the volume's stack is built again")
			if adopted := after.Dev == before.Dev && !rebuilt; adopted != tc.adopted {
				t.Fatalf("FUSE disk device %s before, %s after the restart, engine log:\n%s\nwant adopted=%v", before.Dev, after.Dev, logs, tc.adopted)
			}
			mustRead(t, filepath.Join(staging, "before"), "written before the restart", "after the restart")
			mustWrite(t, filepath.Join(staging, "after"), "written after the restart")
			unix.Sync()
			var now keptDisk
			fd, err = kc.Get("vol-h", &now)
			if err != nil || now.Epoch != epoch {
				t.Fatalf("the keeper holds %+v (%v) after the restart, want the connection of epoch %d", now, err, epoch)
			}
			unix.Close(fd)
			if _, err := second.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-h", StagingTargetPath: staging}); err != nil {
				t.Fatal(err)
			}
			if keeper.Len() != 0 {
				t.Errorf("after the unstage the keeper holds %d connections, want none", keeper.Len())
			}
		})
	}
}
