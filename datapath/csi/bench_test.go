package csi

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// BenchmarkServer_PublishUnpublish measures one attach/detach cycle as the
// external-attacher drives it: ControllerPublishVolume (a grant) then
// ControllerUnpublishVolume (attachment lookup, fence, release), over the unix
// socket, against the real datapath over loopback.
func BenchmarkServer_PublishUnpublish(b *testing.B) {
	srv := NewServer(startRealDatapath(b, 1<<30), WithLogger(discardLogger()))
	cc := csi.NewControllerClient(dial(b, serve(b, srv)))
	ctx := context.Background()
	vol, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "bench", VolumeCapabilities: []*csi.VolumeCapability{blockCap(rwo)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
	})
	if err != nil {
		b.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	pub := &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "node-a", VolumeCapability: blockCap(rwo)}
	unpub := &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-a"}
	b.ResetTimer()
	for b.Loop() {
		if _, err := cc.ControllerPublishVolume(ctx, pub); err != nil {
			b.Fatal(err)
		}
		if _, err := cc.ControllerUnpublishVolume(ctx, unpub); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkServer_CreateDeleteVolume measures provisioning and deleting a
// volume over the socket against the real datapath.
func BenchmarkServer_CreateDeleteVolume(b *testing.B) {
	srv := NewServer(startRealDatapath(b, 1<<40), WithLogger(discardLogger()))
	cc := csi.NewControllerClient(dial(b, serve(b, srv)))
	ctx := context.Background()
	req := &csi.CreateVolumeRequest{
		Name: "bench", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30},
	}
	for b.Loop() {
		vol, err := cc.CreateVolume(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId()}); err != nil {
			b.Fatal(err)
		}
	}
}
