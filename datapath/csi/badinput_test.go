package csi

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestControllerServer_BadInput_InvalidArgument sends every controller RPC
// requests with a missing or invalid field and checks that each is refused with
// InvalidArgument, with a message that names the field, and that the datapath saw
// no mutating call. It is one long table on purpose: the table is the list of
// refusals the controller promises.
func TestControllerServer_BadInput_InvalidArgument(t *testing.T) {
	c, f := newTestController(t)
	vol := mustCreate(t, c, "existing", 4096)
	id := vol.GetVolumeId()
	publish(t, c, id, "n1", mountCap(rwo))
	good := []*csi.VolumeCapability{mountCap(rwo)}
	noMode := []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}}
	noType := []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo}}}
	unknownMode := []*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_UNKNOWN)}
	badFs := []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ntfs"}},
	}}
	long := strings.Repeat("x", 300)
	ctx := context.Background()

	tests := []struct {
		name  string
		field string // must appear in the message
		call  func() error
	}{
		{"create: no name", "name", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{VolumeCapabilities: good})
			return err
		}},
		{"create: name too long", "name", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: long, VolumeCapabilities: good})
			return err
		}},
		{"create: control character in name", "name", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "a\nb", VolumeCapabilities: good})
			return err
		}},
		{"create: no capabilities", "volume_capabilities", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new"})
			return err
		}},
		{"create: nil capability", "volume_capabilities[0]", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: []*csi.VolumeCapability{nil}})
			return err
		}},
		{"create: no access mode", "volume_capabilities[0].access_mode", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: noMode})
			return err
		}},
		{"create: unknown access mode", "volume_capabilities[0].access_mode", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: unknownMode})
			return err
		}},
		{"create: no access type", "volume_capabilities[0].access_type", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: noType})
			return err
		}},
		{"create: unsupported fs type", "volume_capabilities[0].mount.fs_type", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: badFs})
			return err
		}},
		{"create: required above limit", "capacity_range", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30, LimitBytes: 1 << 20}})
			return err
		}},
		{"create: unknown parameter", "parameters", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				Parameters: map[string]string{"replica": "3"}})
			return err
		}},
		{"create: replicas zero", `parameters["replicas"] is "0"`, func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				Parameters: map[string]string{"replicas": "0"}})
			return err
		}},
		{"create: replicas above the maximum", `parameters["replicas"] is "6"`, func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				Parameters: map[string]string{"replicas": "6"}})
			return err
		}},
		{"create: replicas not a number", `parameters["replicas"] is "x"`, func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				Parameters: map[string]string{"replicas": "x"}})
			return err
		}},
		{"create: replicas empty", `parameters["replicas"] is ""`, func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				Parameters: map[string]string{"replicas": ""}})
			return err
		}},
		{"create: replicas negative", `parameters["replicas"] is "-1"`, func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				Parameters: map[string]string{"replicas": "-1"}})
			return err
		}},
		{"create: replicas fractional", `parameters["replicas"] is "2.5"`, func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				Parameters: map[string]string{"replicas": "2.5"}})
			return err
		}},
		{"create: content source", "volume_content_source", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
					Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}})
			return err
		}},
		{"create: mutable parameters", "mutable_parameters", func() error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "new", VolumeCapabilities: good,
				MutableParameters: map[string]string{"iops": "100"}})
			return err
		}},
		{"delete: no volume id", "volume_id", func() error {
			_, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{})
			return err
		}},
		{"publish: no volume id", "volume_id", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{NodeId: "n1", VolumeCapability: good[0]})
			return err
		}},
		{"publish: no node id", "node_id", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, VolumeCapability: good[0]})
			return err
		}},
		{"publish: node id too long", "node_id", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: long, VolumeCapability: good[0]})
			return err
		}},
		{"publish: no capability", "volume_capability", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n2"})
			return err
		}},
		{"publish: capability without access type", "volume_capability.access_type", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: noType[0]})
			return err
		}},
		{"publish: readonly", "readonly", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: good[0], Readonly: true})
			return err
		}},
		{"publish: multi-node mode on single-node volume", "access_mode", func() error {
			_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: mountCap(rwx)})
			return err
		}},
		{"unpublish: no volume id", "volume_id", func() error {
			_, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{NodeId: "n1"})
			return err
		}},
		{"unpublish: node id too long", "node_id", func() error {
			_, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: long})
			return err
		}},
		{"validate: no volume id", "volume_id", func() error {
			_, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: good})
			return err
		}},
		{"validate: no capabilities", "volume_capabilities", func() error {
			_, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id})
			return err
		}},
		{"validate: no access mode", "volume_capabilities[0].access_mode", func() error {
			_, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: noMode})
			return err
		}},
		{"list: negative max entries", "max_entries", func() error {
			_, err := c.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: -1})
			return err
		}},
		{"capacity: unknown parameter", "parameters", func() error {
			_, err := c.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"pool": "fast"}})
			return err
		}},
		{"capacity: capability without access type", "volume_capabilities[0].access_type", func() error {
			_, err := c.GetCapacity(ctx, &csi.GetCapacityRequest{VolumeCapabilities: noType})
			return err
		}},
	}
	before := f.mutations()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument {
				t.Fatalf("code = %v (%v), want InvalidArgument", st.Code(), err)
			}
			if !strings.Contains(st.Message(), tt.field) {
				t.Errorf("message %q does not name %s", st.Message(), tt.field)
			}
			if after := f.mutations(); !slices.Equal(after, before) {
				t.Errorf("refused request changed the datapath: %q", after[len(before):])
			}
		})
	}
	if got := f.liveNodes(id); !slices.Equal(got, []string{"n1"}) {
		t.Errorf("grants after bad input = %v, want [n1]", got)
	}
}
