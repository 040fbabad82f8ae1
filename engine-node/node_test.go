package enginenode

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vigil "github.com/vigil-storage/vigil"
)

const testSize = 64 << 20

func wantCode(t *testing.T, err error, code codes.Code, contains string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
	if !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not mention %q", err, contains)
	}
}

func TestNodeServer_BadInput_InvalidArgument(t *testing.T) {
	n := newTestServer(t, newFakeDatapath(t), "node-a")
	ctx := context.Background()
	noMode := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
	xfs := mountCap()
	xfs.GetMount().FsType = "xfs"
	noEpoch := stageReq("v", "/stage", 1, mountCap())
	noEpoch.PublishContext = nil
	badEpoch := stageReq("v", "/stage", 1, mountCap())
	badEpoch.PublishContext[vigil.PublishContextEpochKey] = "-3"
	cases := []struct {
		name, mention string
		call          func() error
	}{
		{"stage/no volume id", "volume_id", func() error { _, err := n.NodeStageVolume(ctx, stageReq("", "/s", 1, mountCap())); return err }},
		{"stage/no staging path", "staging_target_path", func() error { _, err := n.NodeStageVolume(ctx, stageReq("v", "", 1, mountCap())); return err }},
		{"stage/relative staging path", "not an absolute path", func() error { _, err := n.NodeStageVolume(ctx, stageReq("v", "rel", 1, mountCap())); return err }},
		{"stage/no capability", "volume_capability", func() error { _, err := n.NodeStageVolume(ctx, stageReq("v", "/s", 1, nil)); return err }},
		{"stage/no access mode", "access_mode", func() error { _, err := n.NodeStageVolume(ctx, stageReq("v", "/s", 1, noMode)); return err }},
		{"stage/unsupported fs", `"xfs"`, func() error { _, err := n.NodeStageVolume(ctx, stageReq("v", "/s", 1, xfs)); return err }},
		{"stage/no epoch", vigil.PublishContextEpochKey, func() error { _, err := n.NodeStageVolume(ctx, noEpoch); return err }},
		{"stage/bad epoch", `"-3"`, func() error { _, err := n.NodeStageVolume(ctx, badEpoch); return err }},
		{"publish/no volume id", "volume_id", func() error { _, err := n.NodePublishVolume(ctx, publishReq("", "/s", "/t", mountCap())); return err }},
		{"publish/no staging path", "staging_target_path", func() error { _, err := n.NodePublishVolume(ctx, publishReq("v", "", "/t", mountCap())); return err }},
		{"publish/no target", "target_path", func() error { _, err := n.NodePublishVolume(ctx, publishReq("v", "/s", "", mountCap())); return err }},
		{"publish/no capability", "volume_capability", func() error { _, err := n.NodePublishVolume(ctx, publishReq("v", "/s", "/t", nil)); return err }},
		{"unpublish/no volume id", "volume_id", func() error {
			_, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: "/t"})
			return err
		}},
		{"unpublish/no target", "target_path", func() error {
			_, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "v"})
			return err
		}},
		{"unstage/no volume id", "volume_id", func() error {
			_, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: "/s"})
			return err
		}},
		{"unstage/no staging path", "staging_target_path", func() error {
			_, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "v"})
			return err
		}},
		{"stats/no volume id", "volume_id", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumePath: "/s"})
			return err
		}},
		{"stats/no path", "volume_path", func() error {
			_, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "v"})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantCode(t, c.call(), codes.InvalidArgument, c.mention) })
	}
	if stages, _ := n.journal.Stages(); len(stages) != 0 {
		t.Fatalf("bad input changed the journal: %+v", stages)
	}
}

func TestNodeServer_NodeGetInfo_NodeAndTopology(t *testing.T) {
	n := newTestServer(t, newFakeDatapath(t), "node-a")
	info, err := n.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetNodeId() != "node-a" || info.GetAccessibleTopology().GetSegments()[vigil.TopologyNodeKey] != "node-a" {
		t.Fatalf("info = %+v", info)
	}
	caps, err := n.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	if err != nil || len(caps.GetCapabilities()) != 2 {
		t.Fatalf("caps = %+v, %v", caps, err)
	}
}

func TestNodeServer_Stage_UnknownVolumeNotFound(t *testing.T) {
	requireRealStack(t)
	n := newTestServer(t, newFakeDatapath(t), "node-a")
	_, err := n.NodeStageVolume(context.Background(), stageReq("nope", t.TempDir(), 1, mountCap()))
	wantCode(t, err, codes.NotFound, "nope")
}

func TestNodeServer_Lifecycle_Filesystem(t *testing.T) {
	requireRealStack(t)
	dp := newFakeDatapath(t)
	dp.create(t, "vol-1", testSize)
	epoch := dp.grant("vol-1", "node-a")
	n := newTestServer(t, dp, "node-a")
	ctx := context.Background()
	staging, target := t.TempDir(), filepath.Join(t.TempDir(), "mount")

	for i := 0; i < 2; i++ { // the second call is idempotent
		if _, err := n.NodeStageVolume(ctx, stageReq("vol-1", staging, epoch, mountCap())); err != nil {
			t.Fatalf("stage #%d: %v", i+1, err)
		}
		if _, err := n.NodePublishVolume(ctx, publishReq("vol-1", staging, target, mountCap())); err != nil {
			t.Fatalf("publish #%d: %v", i+1, err)
		}
	}
	if err := os.WriteFile(filepath.Join(target, "hello"), []byte("world"), 0o600); err != nil {
		t.Fatal(err)
	}
	stats, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: target})
	if err != nil || stats.GetUsage()[0].GetTotal() <= 0 || stats.GetUsage()[0].GetTotal() > testSize {
		t.Fatalf("stats = %+v, %v", stats, err)
	}
	if pr, ok, _ := n.journal.Publish(target); !ok || pr.PodUID != "uid-1" || pr.Phase != PhasePublished {
		t.Fatalf("journal publish record = %+v", pr)
	}
	for i := 0; i < 2; i++ {
		if _, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target}); err != nil {
			t.Fatalf("unpublish #%d: %v", i+1, err)
		}
		if _, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: staging}); err != nil {
			t.Fatalf("unstage #%d: %v", i+1, err)
		}
	}
	if exists(target) {
		t.Fatal("target path left behind")
	}
	assertNothingLeaked(t, n.cfg.StateDir)

	// Staged again, the filesystem (not reformatted) still holds the file.
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-1", staging, epoch, mountCap())); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(staging, "hello")); err != nil || string(got) != "world" {
		t.Fatalf("after restage: %q, %v", got, err)
	}
}

func TestNodeServer_Lifecycle_Block(t *testing.T) {
	requireRealStack(t)
	dp := newFakeDatapath(t)
	dp.create(t, "vol-b", testSize)
	epoch := dp.grant("vol-b", "node-a")
	n := newTestServer(t, dp, "node-a")
	ctx := context.Background()
	staging, target := t.TempDir(), t.TempDir() // a directory where a file belongs: replaced
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-b", staging, epoch, blockCap())); err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodePublishVolume(ctx, publishReq("vol-b", staging, target, blockCap())); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(target, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("vigil!"), 1000)
	if _, err := f.WriteAt(payload, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	img, _ := os.ReadFile(dp.imagePath("vol-b"))
	if !bytes.Equal(img[1<<20:1<<20+len(payload)], payload) {
		t.Fatal("block write did not reach the datapath")
	}
	stats, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-b", VolumePath: target})
	if err != nil || stats.GetUsage()[0].GetTotal() != testSize {
		t.Fatalf("stats = %+v, %v", stats, err)
	}
}

func TestNodeServer_Conflicts_Refused(t *testing.T) {
	requireRealStack(t)
	dp := newFakeDatapath(t)
	dp.create(t, "vol-1", testSize)
	old := dp.grant("vol-1", "node-a")
	_ = dp.Release(context.Background(), "vol-1", "node-a")
	epoch := dp.grant("vol-1", "node-a")
	n := newTestServer(t, dp, "node-a")
	ctx := context.Background()
	staging, target := t.TempDir(), filepath.Join(t.TempDir(), "m")

	_, err := n.NodePublishVolume(ctx, publishReq("vol-1", staging, target, mountCap()))
	wantCode(t, err, codes.FailedPrecondition, "not staged")
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-1", staging, epoch, mountCap())); err != nil {
		t.Fatal(err)
	}
	_, err = n.NodeStageVolume(ctx, stageReq("vol-1", t.TempDir(), epoch, mountCap()))
	wantCode(t, err, codes.AlreadyExists, staging)
	_, err = n.NodeStageVolume(ctx, stageReq("vol-1", staging, old, mountCap()))
	wantCode(t, err, codes.FailedPrecondition, "epoch")
	_, err = n.NodePublishVolume(ctx, publishReq("vol-1", staging, target, blockCap()))
	wantCode(t, err, codes.AlreadyExists, "block")
	if _, err := n.NodePublishVolume(ctx, publishReq("vol-1", staging, target, mountCap())); err != nil {
		t.Fatal(err)
	}
	ro := publishReq("vol-1", staging, target, mountCap())
	ro.Readonly = true
	_, err = n.NodePublishVolume(ctx, ro)
	wantCode(t, err, codes.AlreadyExists, "readonly")
	_, err = n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: staging})
	wantCode(t, err, codes.FailedPrecondition, target)
	_, err = n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: t.TempDir()})
	wantCode(t, err, codes.NotFound, "not published")
}
