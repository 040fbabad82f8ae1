package enginenode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
)

func capWith(mode csi.VolumeCapability_AccessMode_Mode, block bool) *csi.VolumeCapability {
	c := mountCap()
	if block {
		c = blockCap()
	}
	c.AccessMode.Mode = mode
	return c
}

// TestCheckStage_AccessModes: every access mode × access type. Multi-node
// writers with mount access are refused with the controller's exact message;
// reader modes stage and publish read-only.
func TestCheckStage_AccessModes(t *testing.T) {
	refusal := func(mode csi.VolumeCapability_AccessMode_Mode) string {
		return fmt.Sprintf("volume_capability.access_mode %s with mount access is not supported: a filesystem mounted read-write on more than one node is corrupted; "+
			"allowed are block access (volumeMode: Block) for multi-node writers, whose applications coordinate their writes, "+
			"MULTI_NODE_READER_ONLY with mount, which is mounted read-only, and the single-node modes with mount", mode)
	}
	const refused, rw, ro = "refused", "rw", "ro"
	cases := []struct {
		mode         csi.VolumeCapability_AccessMode_Mode
		mount, block string
	}{
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, rw, rw},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, ro, ro},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, rw, rw},
		{csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, rw, rw},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, ro, ro},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, refused, rw},
		{csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, refused, rw},
	}
	for _, c := range cases {
		for _, block := range []bool{false, true} {
			want := c.mount
			if block {
				want = c.block
			}
			t.Run(fmt.Sprintf("%s/block=%t", c.mode, block), func(t *testing.T) {
				a, err := checkStage(stageReq("v", "/stage", 1, capWith(c.mode, block)))
				p, perr := checkPublish(publishReq("v", "/stage", "/target", capWith(c.mode, block)))
				if want == refused {
					for _, err := range []error{err, perr} {
						if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != refusal(c.mode) {
							t.Fatalf("got %v %q, want InvalidArgument %q", st.Code(), st.Message(), refusal(c.mode))
						}
					}
					return
				}
				if err != nil || perr != nil {
					t.Fatalf("checkStage: %v; checkPublish: %v", err, perr)
				}
				if a.readonly != (want == ro) || p.readonly != (want == ro) {
					t.Fatalf("stage readonly = %t, publish readonly = %t; want %t", a.readonly, p.readonly, want == ro)
				}
			})
		}
	}
}

func TestStageMountFlags(t *testing.T) {
	cases := []struct {
		rec  StageRecord
		want []string
	}{
		{StageRecord{FsType: "ext4", MountFlags: []string{"noatime"}}, []string{"noatime"}},
		{StageRecord{FsType: "ext4", MountFlags: []string{"rw", "noatime"}, ReadOnly: true}, []string{"noatime", "ro", "noload"}},
		{StageRecord{FsType: "xfs", ReadOnly: true}, []string{"ro"}},
	}
	for _, c := range cases {
		if got := stageMountFlags(c.rec); !slices.Equal(got, c.want) {
			t.Errorf("stageMountFlags(%+v) = %q, want %q", c.rec, got, c.want)
		}
	}
}

// TestNodeServer_Stage_ReaderModeMountsReadOnly: a volume staged for a reader
// mode is mounted read-only (a write gets EROFS) and still shows what the
// writer left; a blank volume staged read-only is refused, never formatted;
// a multi-node writer with mount access is refused and nothing is staged.
func TestNodeServer_Stage_ReaderModeMountsReadOnly(t *testing.T) {
	requireRealStack(t)
	dp := newFakeDatapath(t)
	dp.create(t, "vol-1", testSize)
	dp.create(t, "vol-blank", testSize)
	epoch := dp.grant("vol-1", "node-a")
	n := newTestServer(t, dp, "node-a")
	ctx := context.Background()
	staging := t.TempDir()

	if _, err := n.NodeStageVolume(ctx, stageReq("vol-1", staging, epoch, mountCap())); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "hello"), []byte("world"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}

	reader := capWith(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, false)
	if _, err := n.NodeStageVolume(ctx, stageReq("vol-1", staging, epoch, reader)); err != nil {
		t.Fatalf("stage as reader: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(staging, "hello")); err != nil || string(got) != "world" {
		t.Fatalf("reader sees %q, %v; want the writer's file", got, err)
	}
	err := os.WriteFile(filepath.Join(staging, "new"), []byte("x"), 0o600)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on a reader's mount: %v, want EROFS", err)
	}
	m, ok, err := mountAt(staging)
	if err != nil || !ok || !slices.Contains(strings.Split(m.Options, ","), "ro") {
		t.Fatalf("mount at %s = %+v, %t, %v; want it read-only", staging, m, ok, err)
	}
	if rec, _, _ := n.journal.Stage("vol-1"); !rec.ReadOnly {
		t.Fatalf("journal stage record = %+v, want ReadOnly", rec)
	}

	blankEpoch := dp.grant("vol-blank", "node-a")
	_, err = n.NodeStageVolume(ctx, stageReq("vol-blank", t.TempDir(), blankEpoch, reader))
	wantCode(t, err, codes.FailedPrecondition, "never formatted")

	writers := capWith(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false)
	_, err = n.NodeStageVolume(ctx, stageReq("vol-blank", t.TempDir(), blankEpoch, writers))
	wantCode(t, err, codes.InvalidArgument, "volumeMode: Block")
	if _, ok, _ := n.journal.Stage("vol-blank"); ok {
		t.Fatal("a refused stage left a journal record")
	}
}

// A write under a read-only grant is the datapath's answer, not a lost
// request: the engine fails it at once instead of retrying until its timeout.
func TestTransient_ReadOnlyIsDefinitive(t *testing.T) {
	if transient(fmt.Errorf("write volume v at 0: %w", datapath.ErrReadOnly)) {
		t.Fatal("ErrReadOnly is taken as transient")
	}
}
