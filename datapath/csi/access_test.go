package csi

import (
	"context"
	"fmt"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
)

// mountRefusal is the exact message for a multi-node writer mode with mount
// access, after the field name.
func mountRefusal(mode csi.VolumeCapability_AccessMode_Mode) string {
	return fmt.Sprintf("access_mode %s with mount access is not supported: a filesystem mounted read-write on more than one node is corrupted; "+
		"allowed are block access (volumeMode: Block) for multi-node writers, whose applications coordinate their writes, "+
		"MULTI_NODE_READER_ONLY with mount, which is mounted read-only, and the single-node modes with mount", mode)
}

// accessTable is every access mode × access type, with the grant use it gets
// or "" when it is refused.
var accessTable = []struct {
	mode  csi.VolumeCapability_AccessMode_Mode
	block bool
	use   datapath.GrantUse
}{
	{csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false, datapath.UseFilesystemWriter},
	{csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, true, datapath.UseReadWrite},
	{csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, false, datapath.UseReadOnly},
	{csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, true, datapath.UseReadOnly},
	{csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, false, datapath.UseFilesystemWriter},
	{csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, true, datapath.UseReadWrite},
	{csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, false, datapath.UseFilesystemWriter},
	{csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, true, datapath.UseReadWrite},
	{csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, false, datapath.UseReadOnly},
	{csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, true, datapath.UseReadOnly},
	{csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, false, ""},
	{csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER, true, datapath.UseReadWrite},
	{csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false, ""},
	{csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, true, datapath.UseReadWrite},
}

func capOf(mode csi.VolumeCapability_AccessMode_Mode, block bool) *csi.VolumeCapability {
	if block {
		return blockCap(mode)
	}
	return mountCap(mode)
}

func accessName(mode csi.VolumeCapability_AccessMode_Mode, block bool) string {
	if block {
		return mode.String() + "/block"
	}
	return mode.String() + "/mount"
}

// wantRefusal checks that err is InvalidArgument with exactly field + "." +
// mountRefusal(mode).
func wantRefusal(t *testing.T, err error, field string, mode csi.VolumeCapability_AccessMode_Mode) {
	t.Helper()
	want := field + "." + mountRefusal(mode)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != want {
		t.Fatalf("got %v (%q), want InvalidArgument %q", st.Code(), st.Message(), want)
	}
}

func TestGrantUse(t *testing.T) {
	for _, tt := range accessTable {
		t.Run(accessName(tt.mode, tt.block), func(t *testing.T) {
			use, err := GrantUse(tt.mode, tt.block)
			if tt.use == "" {
				if err == nil || err.Error() != mountRefusal(tt.mode) {
					t.Fatalf("GrantUse = %q, %v; want the refusal %q", use, err, mountRefusal(tt.mode))
				}
				return
			}
			if err != nil || use != tt.use {
				t.Fatalf("GrantUse = %q, %v; want %q", use, err, tt.use)
			}
		})
	}
}

func TestControllerServer_CreateVolume_AccessModeTypes(t *testing.T) {
	for _, tt := range accessTable {
		t.Run(accessName(tt.mode, tt.block), func(t *testing.T) {
			c, f := newTestController(t)
			_, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
				Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo), capOf(tt.mode, tt.block)},
			})
			if tt.use != "" {
				if err != nil {
					t.Fatalf("CreateVolume: %v", err)
				}
				return
			}
			wantRefusal(t, err, "volume_capabilities[1]", tt.mode)
			if len(f.mutations()) != 0 {
				t.Fatalf("a refused CreateVolume changed the datapath: %v", f.mutations())
			}
		})
	}
}

func TestControllerServer_ValidateVolumeCapabilities_AccessModeTypes(t *testing.T) {
	c, _ := newTestController(t)
	shared := mustCreate(t, c, "shared", 4096, blockCap(rwx))
	for _, tt := range accessTable {
		t.Run(accessName(tt.mode, tt.block), func(t *testing.T) {
			resp, err := c.ValidateVolumeCapabilities(context.Background(), &csi.ValidateVolumeCapabilitiesRequest{
				VolumeId: shared.GetVolumeId(), VolumeCapabilities: []*csi.VolumeCapability{capOf(tt.mode, tt.block)},
			})
			if err != nil {
				t.Fatalf("ValidateVolumeCapabilities: %v", err)
			}
			if tt.use != "" {
				if resp.GetConfirmed() == nil {
					t.Fatalf("not confirmed: %q", resp.GetMessage())
				}
				return
			}
			want := "volume_capabilities[0]." + mountRefusal(tt.mode)
			if resp.GetConfirmed() != nil || resp.GetMessage() != want {
				t.Fatalf("confirmed = %v, message %q; want no confirmation and %q", resp.GetConfirmed(), resp.GetMessage(), want)
			}
		})
	}
}

func TestControllerServer_ControllerPublishVolume_AccessModeTypes(t *testing.T) {
	for _, tt := range accessTable {
		t.Run(accessName(tt.mode, tt.block), func(t *testing.T) {
			c, f := newTestController(t)
			shared := mustCreate(t, c, "shared", 4096, blockCap(rwx))
			before := len(f.mutations())
			_, err := c.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{
				VolumeId: shared.GetVolumeId(), NodeId: "n1", VolumeCapability: capOf(tt.mode, tt.block),
			})
			if tt.use == "" {
				wantRefusal(t, err, "volume_capability", tt.mode)
				if got := f.mutations()[before:]; len(got) != 0 {
					t.Fatalf("a refused publish changed the datapath: %v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			want := fmt.Sprintf("grant %s n1 %s", shared.GetVolumeId(), tt.use)
			if got := f.mutations()[before:]; len(got) != 1 || got[0] != want {
				t.Fatalf("publish did %v, want [%s]", got, want)
			}
		})
	}
}

// A filesystem is mounted read-write on one node only, even on a multi-node
// volume; readers may join it.
func TestControllerServer_ControllerPublishVolume_SecondFilesystemWriter(t *testing.T) {
	c, _ := newTestController(t)
	shared := mustCreate(t, c, "shared", 4096, blockCap(rwx), mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY))
	publish(t, c, shared.GetVolumeId(), "n1", mountCap(rwo))
	_, err := c.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{
		VolumeId: shared.GetVolumeId(), NodeId: "n2", VolumeCapability: mountCap(rwo),
	})
	wantCode(t, err, codes.FailedPrecondition)
	publish(t, c, shared.GetVolumeId(), "n3", mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY))
}

// GetCapacity answers 0 for a capability Vigil refuses, as the CSI spec asks.
func TestControllerServer_GetCapacity_RefusedAccessIsZero(t *testing.T) {
	c, _ := newTestController(t)
	for _, tt := range []struct {
		vc   *csi.VolumeCapability
		zero bool
	}{{mountCap(rwx), true}, {blockCap(rwx), false}} {
		resp, err := c.GetCapacity(context.Background(), &csi.GetCapacityRequest{VolumeCapabilities: []*csi.VolumeCapability{tt.vc}})
		if err != nil || (resp.GetAvailableCapacity() == 0) != tt.zero {
			t.Errorf("GetCapacity(%v) = %v, %v; want zero %t", tt.vc, resp, err, tt.zero)
		}
	}
}
