package csi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	vigil "github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath"
)

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	}
}

func blockCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
	}
}

const (
	rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	rwx = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
)

func newTestController(t *testing.T) (*ControllerServer, *fakeVolumes) {
	t.Helper()
	f := newFakeVolumes()
	nodes := NodesFunc(func(_ context.Context, id string) (bool, error) { return id != "ghost", nil })
	return NewControllerServer(f, nodes), f
}

func wantCode(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("code = %v (%v), want %v", got, err, want)
	}
}

func mustCreate(t *testing.T, c *ControllerServer, name string, size int64, caps ...*csi.VolumeCapability) *csi.Volume {
	t.Helper()
	if len(caps) == 0 {
		caps = []*csi.VolumeCapability{mountCap(rwo)}
	}
	resp, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: name, VolumeCapabilities: caps, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
	})
	if err != nil {
		t.Fatalf("CreateVolume(%s): %v", name, err)
	}
	return resp.GetVolume()
}

func TestControllerServer_CreateVolume_Sizes(t *testing.T) {
	tests := []struct {
		name     string
		rng      *csi.CapacityRange
		wantSize int64
		wantCode codes.Code
	}{
		{"no range gets the default", nil, DefaultVolumeSize, codes.OK},
		{"required is kept when aligned", &csi.CapacityRange{RequiredBytes: 1 << 20}, 1 << 20, codes.OK},
		{"required is rounded up", &csi.CapacityRange{RequiredBytes: 1000}, 4096, codes.OK},
		{"limit caps the default", &csi.CapacityRange{LimitBytes: 8192}, 8192, codes.OK},
		{"limit equal to required", &csi.CapacityRange{RequiredBytes: 8192, LimitBytes: 8192}, 8192, codes.OK},
		{"rounding stays under the limit", &csi.CapacityRange{RequiredBytes: 5000, LimitBytes: 9000}, 8192, codes.OK},
		{"no aligned size in range", &csi.CapacityRange{RequiredBytes: 5000, LimitBytes: 6000}, 0, codes.OutOfRange},
		{"larger than the datapath allows", &csi.CapacityRange{RequiredBytes: datapath.MaxVolumeSize + 1}, 0, codes.OutOfRange},
		{"required above limit", &csi.CapacityRange{RequiredBytes: 2 << 20, LimitBytes: 1 << 20}, 0, codes.InvalidArgument},
		{"negative required", &csi.CapacityRange{RequiredBytes: -1}, 0, codes.InvalidArgument},
		{"negative limit", &csi.CapacityRange{LimitBytes: -1}, 0, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := newTestController(t)
			resp, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
				Name: "pvc-1", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)}, CapacityRange: tt.rng,
			})
			wantCode(t, err, tt.wantCode)
			if tt.wantCode != codes.OK {
				if m := f.mutations(); len(m) != 0 {
					t.Errorf("refused request changed the datapath: %q", m)
				}
				return
			}
			if got := resp.GetVolume().GetCapacityBytes(); got != tt.wantSize {
				t.Errorf("capacity = %d, want %d", got, tt.wantSize)
			}
		})
	}
}

func TestControllerServer_CreateVolume_AccessModes(t *testing.T) {
	tests := []struct {
		caps []*csi.VolumeCapability
		want datapath.AccessMode
	}{
		{[]*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, datapath.AccessRWO},
		{[]*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)}, datapath.AccessRWO},
		{[]*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER)}, datapath.AccessRWO},
		{[]*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)}, datapath.AccessRWO},
		{[]*csi.VolumeCapability{blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}, datapath.AccessRWX},
		{[]*csi.VolumeCapability{mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}, datapath.AccessRWX},
		{[]*csi.VolumeCapability{mountCap(rwo), blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)}, datapath.AccessRWX},
	}
	for i, tt := range tests {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			c, f := newTestController(t)
			v := mustCreate(t, c, "pvc", 4096, tt.caps...)
			got, err := f.GetVolume(context.Background(), v.GetVolumeId())
			if err != nil {
				t.Fatal(err)
			}
			if got.Access != tt.want {
				t.Errorf("access = %s, want %s", got.Access, tt.want)
			}
		})
	}
}

func TestControllerServer_CreateVolume_IdempotentByName(t *testing.T) {
	c, f := newTestController(t)
	first := mustCreate(t, c, "pvc-a", 1<<20)
	again := mustCreate(t, c, "pvc-a", 1<<20)
	if first.GetVolumeId() != again.GetVolumeId() {
		t.Fatalf("second create made %s, want the existing %s", again.GetVolumeId(), first.GetVolumeId())
	}
	// A range that the existing 1 MiB volume satisfies returns it, even though
	// the size this request would pick (the default) differs.
	resp, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-a", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
		CapacityRange: &csi.CapacityRange{LimitBytes: 2 << 30},
	})
	if err != nil || resp.GetVolume().GetVolumeId() != first.GetVolumeId() {
		t.Fatalf("compatible range: %v, %v; want the existing volume", resp, err)
	}
	// A different size is a conflict that names both sides.
	_, err = c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-a", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20},
	})
	wantCode(t, err, codes.AlreadyExists)
	// So is a multi-node mode for a single-node volume.
	_, err = c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc-a", VolumeCapabilities: []*csi.VolumeCapability{blockCap(rwx)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
	})
	wantCode(t, err, codes.AlreadyExists)
	if n := len(f.vols); n != 1 {
		t.Errorf("%d volumes exist, want 1", n)
	}
}

func TestControllerServer_CreateVolume_NoSpace(t *testing.T) {
	c, f := newTestController(t)
	f.capacity = 1 << 20
	_, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "big", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20},
	})
	wantCode(t, err, codes.ResourceExhausted)
}

func TestControllerServer_DeleteVolume_Idempotent(t *testing.T) {
	c, f := newTestController(t)
	v := mustCreate(t, c, "pvc", 4096)
	for i := 0; i < 2; i++ {
		if _, err := c.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
			t.Fatalf("delete #%d: %v", i+1, err)
		}
	}
	if len(f.vols) != 0 {
		t.Errorf("volume still exists")
	}
	if _, err := c.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: "vol-unknown"}); err != nil {
		t.Errorf("delete of unknown volume: %v, want success", err)
	}
}

func TestControllerServer_DeleteVolume_InUse(t *testing.T) {
	c, _ := newTestController(t)
	v := mustCreate(t, c, "pvc", 4096)
	publish(t, c, v.GetVolumeId(), "n1", mountCap(rwo))
	_, err := c.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()})
	wantCode(t, err, codes.FailedPrecondition)
}

func publish(t *testing.T, c *ControllerServer, id, node string, vc *csi.VolumeCapability) uint64 {
	t.Helper()
	resp, err := c.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: node, VolumeCapability: vc,
	})
	if err != nil {
		t.Fatalf("publish %s to %s: %v", id, node, err)
	}
	epoch, err := strconv.ParseUint(resp.GetPublishContext()[vigil.PublishContextEpochKey], 10, 64)
	if err != nil || epoch == 0 {
		t.Fatalf("publish context %v has no epoch under %s", resp.GetPublishContext(), vigil.PublishContextEpochKey)
	}
	return epoch
}

func TestControllerServer_ControllerPublishVolume_RWO(t *testing.T) {
	c, _ := newTestController(t)
	v := mustCreate(t, c, "pvc", 4096)
	e1 := publish(t, c, v.GetVolumeId(), "n1", mountCap(rwo))
	if e2 := publish(t, c, v.GetVolumeId(), "n1", mountCap(rwo)); e2 != e1 {
		t.Errorf("publishing again to the same node gave epoch %d, want %d", e2, e1)
	}
	_, err := c.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{
		VolumeId: v.GetVolumeId(), NodeId: "n2", VolumeCapability: mountCap(rwo),
	})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = c.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{
		VolumeId: v.GetVolumeId(), NodeId: "n1", VolumeCapability: mountCap(rwx),
	})
	wantCode(t, err, codes.InvalidArgument)
}

func TestControllerServer_ControllerPublishVolume_RWX(t *testing.T) {
	c, f := newTestController(t)
	v := mustCreate(t, c, "shared", 4096, blockCap(rwx))
	publish(t, c, v.GetVolumeId(), "n1", blockCap(rwx))
	publish(t, c, v.GetVolumeId(), "n2", blockCap(rwo))
	if got := f.liveNodes(v.GetVolumeId()); !slices.Equal(got, []string{"n1", "n2"}) {
		t.Errorf("live nodes = %v, want [n1 n2]", got)
	}
}

func TestControllerServer_ControllerPublishVolume_NotFound(t *testing.T) {
	c, _ := newTestController(t)
	_, err := c.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{
		VolumeId: "vol-missing", NodeId: "n1", VolumeCapability: mountCap(rwo),
	})
	wantCode(t, err, codes.NotFound)
	v := mustCreate(t, c, "pvc", 4096)
	_, err = c.ControllerPublishVolume(context.Background(), &csi.ControllerPublishVolumeRequest{
		VolumeId: v.GetVolumeId(), NodeId: "ghost", VolumeCapability: mountCap(rwo),
	})
	wantCode(t, err, codes.NotFound)
}

func TestControllerServer_ControllerUnpublishVolume_FencesThenReleases(t *testing.T) {
	c, f := newTestController(t)
	v := mustCreate(t, c, "pvc", 4096)
	id := v.GetVolumeId()
	e1 := publish(t, c, id, "n1", mountCap(rwo))
	before := len(f.mutations())
	if _, err := c.ControllerUnpublishVolume(context.Background(), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"fence " + id + " n1", "release " + id + " n1"}
	if got := f.mutations()[before:]; !slices.Equal(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
	// Idempotent: nothing more happens, and the volume moves to another node
	// with a higher epoch.
	if _, err := c.ControllerUnpublishVolume(context.Background(), &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}); err != nil {
		t.Fatal(err)
	}
	if got := f.mutations()[before:]; len(got) != 2 {
		t.Errorf("second unpublish made calls %q", got[2:])
	}
	if e2 := publish(t, c, id, "n2", mountCap(rwo)); e2 <= e1 {
		t.Errorf("epoch after fence = %d, want > %d", e2, e1)
	}
}

func TestControllerServer_ControllerUnpublishVolume_Gone(t *testing.T) {
	c, _ := newTestController(t)
	v := mustCreate(t, c, "pvc", 4096)
	for _, req := range []*csi.ControllerUnpublishVolumeRequest{
		{VolumeId: "vol-missing", NodeId: "n1"},
		{VolumeId: v.GetVolumeId(), NodeId: "never-attached"},
		{VolumeId: v.GetVolumeId()},
	} {
		if _, err := c.ControllerUnpublishVolume(context.Background(), req); err != nil {
			t.Errorf("unpublish %v: %v, want success", req, err)
		}
	}
}

func TestControllerServer_ControllerUnpublishVolume_AllNodes(t *testing.T) {
	c, f := newTestController(t)
	v := mustCreate(t, c, "shared", 4096, blockCap(rwx))
	publish(t, c, v.GetVolumeId(), "n1", blockCap(rwx))
	publish(t, c, v.GetVolumeId(), "n2", blockCap(rwx))
	if _, err := c.ControllerUnpublishVolume(context.Background(), &csi.ControllerUnpublishVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	if got := f.liveNodes(v.GetVolumeId()); len(got) != 0 {
		t.Errorf("live nodes after unpublish from all = %v", got)
	}
}

func TestControllerServer_ValidateVolumeCapabilities(t *testing.T) {
	c, _ := newTestController(t)
	single := mustCreate(t, c, "single", 4096)
	tests := []struct {
		name      string
		caps      []*csi.VolumeCapability
		params    map[string]string
		confirmed bool
	}{
		{"single node on single node volume", []*csi.VolumeCapability{mountCap(rwo), blockCap(rwo)}, nil, true},
		{"multi node on single node volume", []*csi.VolumeCapability{blockCap(rwx)}, nil, false},
		{"unsupported fs type", []*csi.VolumeCapability{{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo},
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "zfs"}},
		}}, nil, false},
		{"unknown parameter", []*csi.VolumeCapability{mountCap(rwo)}, map[string]string{"replica": "3"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.ValidateVolumeCapabilities(context.Background(), &csi.ValidateVolumeCapabilitiesRequest{
				VolumeId: single.GetVolumeId(), VolumeCapabilities: tt.caps, Parameters: tt.params,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.GetConfirmed() != nil; got != tt.confirmed {
				t.Errorf("confirmed = %v (message %q), want %v", got, resp.GetMessage(), tt.confirmed)
			}
			if !tt.confirmed && resp.GetMessage() == "" {
				t.Error("unconfirmed without a message")
			}
		})
	}
	_, err := c.ValidateVolumeCapabilities(context.Background(), &csi.ValidateVolumeCapabilitiesRequest{
		VolumeId: "vol-missing", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
	})
	wantCode(t, err, codes.NotFound)
}

func TestControllerServer_ListVolumes_Pagination(t *testing.T) {
	c, f := newTestController(t)
	var want []string
	for i := 0; i < 7; i++ {
		want = append(want, mustCreate(t, c, fmt.Sprintf("pvc-%d", i), 4096).GetVolumeId())
	}
	slices.Sort(want)
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 7 {
			t.Fatal("pagination does not end")
		}
		resp, err := c.ListVolumes(context.Background(), &csi.ListVolumesRequest{MaxEntries: 3, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(resp.GetEntries()); n > 3 {
			t.Fatalf("page of %d entries, max 3", n)
		}
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetVolume().GetVolumeId())
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
		if pages == 0 {
			// Deleting the last volume of a page does not break the token.
			last := resp.GetEntries()[2].GetVolume().GetVolumeId()
			if err := f.DeleteVolume(context.Background(), last); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	resp, err := c.ListVolumes(context.Background(), &csi.ListVolumesRequest{})
	if err != nil || len(resp.GetEntries()) != 6 || resp.GetNextToken() != "" {
		t.Errorf("unpaged list: %d entries, token %q, %v; want 6, \"\", nil", len(resp.GetEntries()), resp.GetNextToken(), err)
	}
}

func TestControllerServer_ListVolumes_BadToken(t *testing.T) {
	c, _ := newTestController(t)
	for _, tok := range []string{"invalid-token", "bm90LW91cnM", encodeToken("")[:4]} {
		_, err := c.ListVolumes(context.Background(), &csi.ListVolumesRequest{StartingToken: tok})
		wantCode(t, err, codes.Aborted)
	}
}

func TestControllerServer_GetCapacity(t *testing.T) {
	c, f := newTestController(t)
	f.capacity = 10<<20 + 100
	resp, err := c.GetCapacity(context.Background(), &csi.GetCapacityRequest{})
	if err != nil || resp.GetAvailableCapacity() != 10<<20 {
		t.Fatalf("GetCapacity = %v, %v; want %d (aligned down)", resp, err, 10<<20)
	}
	resp, err = c.GetCapacity(context.Background(), &csi.GetCapacityRequest{VolumeCapabilities: []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwo},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "zfs"}},
	}}})
	if err != nil || resp.GetAvailableCapacity() != 0 {
		t.Fatalf("GetCapacity for unsupported fs = %v, %v; want 0", resp, err)
	}
	f.failWith = errors.New("boom")
	_, err = c.GetCapacity(context.Background(), &csi.GetCapacityRequest{})
	wantCode(t, err, codes.Internal)
}

func TestControllerServer_ControllerGetCapabilities(t *testing.T) {
	c, _ := newTestController(t)
	resp, err := c.ControllerGetCapabilities(context.Background(), &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []csi.ControllerServiceCapability_RPC_Type
	for _, cp := range resp.GetCapabilities() {
		got = append(got, cp.GetRpc().GetType())
	}
	for _, want := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	} {
		if !slices.Contains(got, want) {
			t.Errorf("capabilities %v lack %v", got, want)
		}
	}
}

func TestControllerServer_CreateVolume_ConcurrentSameNameAborted(t *testing.T) {
	c, _ := newTestController(t)
	release, err := c.busy.acquire(fmt.Sprintf("volume name %q", "pvc"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "pvc", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
	})
	wantCode(t, err, codes.Aborted)
	release()
	mustCreate(t, c, "pvc", 4096)
}

func TestStatusFromError_Sentinels(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{datapath.ErrNotFound, codes.NotFound},
		{fmt.Errorf("wrapped: %w", datapath.ErrAlreadyExists), codes.AlreadyExists},
		{datapath.ErrAttachedElsewhere, codes.FailedPrecondition},
		{datapath.ErrInUse, codes.FailedPrecondition},
		{datapath.ErrFenced, codes.FailedPrecondition},
		{datapath.ErrOutOfRange, codes.OutOfRange},
		{datapath.ErrInvalidArgument, codes.InvalidArgument},
		{datapath.ErrUnauthenticated, codes.Unauthenticated},
		{datapath.ErrNoSpace, codes.ResourceExhausted},
		{fmt.Errorf("flush: %w", datapath.ErrVolumeFailed), codes.DataLoss},
		{fmt.Errorf("grant: %w, datapath-1 at 10.0.0.2:7070", datapath.ErrNotApplied), codes.Unavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{status.Error(codes.Unavailable, "connection refused"), codes.Unavailable},
		{errors.New("disk on fire"), codes.Internal},
	}
	for _, tt := range tests {
		err := statusFromError(tt.err, "do thing")
		if got := status.Code(err); got != tt.want {
			t.Errorf("statusFromError(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
	if statusFromError(nil, "x") != nil {
		t.Error("statusFromError(nil) != nil")
	}
}
