package csi

import (
	"context"
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/vigil-storage/vigil/datapath"
)

// TestControllerServer_ControllerUnpublishVolume_RealDatapathFences drives the
// controller against the real datapath: after ControllerUnpublishVolume the
// node's writes with the epoch it was published with are refused with
// ErrFenced, the volume can be published to another node with a higher epoch,
// and only then is the old node refused publishing (RWO).
func TestControllerServer_ControllerUnpublishVolume_RealDatapathFences(t *testing.T) {
	dp := startRealDatapath(t, 1<<30)
	c := NewControllerServer(dp, nil)
	ctx := context.Background()
	vol := mustCreate(t, c, "pvc-fence", 1<<20, blockCap(rwo))
	id := vol.GetVolumeId()

	e1 := publish(t, c, id, "node-a", blockCap(rwo))
	if err := dp.WriteAt(ctx, id, "node-a", e1, 0, []byte("before")); err != nil {
		t.Fatalf("write with the published epoch: %v", err)
	}
	_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-b", VolumeCapability: blockCap(rwo)})
	wantCode(t, err, codes.FailedPrecondition)

	if _, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-a"}); err != nil {
		t.Fatalf("unpublish: %v", err)
	}
	if err := dp.WriteAt(ctx, id, "node-a", e1, 0, []byte("zombie")); !errors.Is(err, datapath.ErrFenced) {
		t.Fatalf("write after unpublish = %v, want ErrFenced", err)
	}
	e2 := publish(t, c, id, "node-b", blockCap(rwo))
	if e2 <= e1 {
		t.Fatalf("epoch for node-b = %d, want > %d", e2, e1)
	}
	got, err := dp.ReadAt(ctx, id, "node-b", e2, 0, 6)
	if err != nil || string(got) != "before" {
		t.Fatalf("read by the new node = %q, %v; want %q", got, err, "before")
	}
	// Unpublish is idempotent, and delete needs every grant gone.
	for i := 0; i < 2; i++ {
		if _, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-a"}); err != nil {
			t.Fatalf("repeated unpublish of node-a: %v", err)
		}
	}
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
	wantCode(t, err, codes.FailedPrecondition)
	if _, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("unpublish from all nodes: %v", err)
	}
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatalf("delete after unpublish: %v", err)
	}
}

// TestControllerServer_UnknownIDs_RealDatapath checks that ids the datapath
// never issued (wrong shape) count as "no such volume" in every RPC.
func TestControllerServer_UnknownIDs_RealDatapath(t *testing.T) {
	c := NewControllerServer(startRealDatapath(t, 1<<30), nil)
	ctx := context.Background()
	for _, id := range []string{"fake-vol-id", "vol-0000000000000001", "../../etc/passwd"} {
		if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("delete %q: %v, want success", id, err)
		}
		if _, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}); err != nil {
			t.Errorf("unpublish %q: %v, want success", id, err)
		}
		_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: mountCap(rwo)})
		wantCode(t, err, codes.NotFound)
		_, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)}})
		wantCode(t, err, codes.NotFound)
	}
}

// TestControllerServer_CreateVolume_RealDatapathNoSpace checks the mapping of
// the datapath's ErrNoSpace and that a refused create leaves nothing behind.
func TestControllerServer_CreateVolume_RealDatapathNoSpace(t *testing.T) {
	dp := startRealDatapath(t, 1<<20)
	c := NewControllerServer(dp, nil)
	_, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "too-big", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20},
	})
	wantCode(t, err, codes.ResourceExhausted)
	vols, err := dp.ListVolumes(context.Background())
	if err != nil || len(vols) != 0 {
		t.Fatalf("volumes after refused create = %v, %v; want none", vols, err)
	}
	resp, err := c.GetCapacity(context.Background(), &csi.GetCapacityRequest{})
	if err != nil || resp.GetAvailableCapacity() != 1<<20 {
		t.Fatalf("GetCapacity = %v, %v; want %d", resp, err, 1<<20)
	}
}
