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

// createWith creates volume name with the StorageClass parameters params.
func createWith(c *ControllerServer, name string, params map[string]string) (*csi.Volume, error) {
	resp, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: name, VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}, Parameters: params,
	})
	return resp.GetVolume(), err
}

// TestControllerServer_CreateVolume_ReplicaCount is the rule of a volume's
// replica count: the StorageClass parameter, else the default (the setting),
// else one copy; the datapath is asked for exactly that many, and the volume's
// context says it.
func TestControllerServer_CreateVolume_ReplicaCount(t *testing.T) {
	tests := []struct {
		name     string
		def      ReplicaDefault // nil: none given
		params   map[string]string
		wantCall string
	}{
		{"no default, no parameter: one copy", nil, nil, "create v 1048576 rwo r=1"},
		{"the default applies", ReplicaDefaultFunc(func() int { return 3 }), nil, "create v 1048576 rwo r=3"},
		{"the parameter beats the default", ReplicaDefaultFunc(func() int { return 3 }), map[string]string{"replicas": "2"}, "create v 1048576 rwo r=2"},
		{"a parameter of one", ReplicaDefaultFunc(func() int { return 3 }), map[string]string{"replicas": "1"}, "create v 1048576 rwo r=1"},
		{"provisioner keys pass", ReplicaDefaultFunc(func() int { return 2 }), map[string]string{"csi.storage.k8s.io/pvc/name": "data"}, "create v 1048576 rwo r=2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := newTestController(t)
			c.replicas = tt.def
			vol, err := createWith(c, "v", tt.params)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.mutations(); !slices.Equal(got, []string{tt.wantCall}) {
				t.Errorf("datapath calls = %q, want [%q]", got, tt.wantCall)
			}
			want := strings.TrimPrefix(tt.wantCall, "create v 1048576 rwo r=")
			if got := vol.GetVolumeContext()["replicas"]; got != want {
				t.Errorf("volume_context[replicas] = %q, want %q", got, want)
			}
		})
	}
}

// TestControllerServer_CreateVolume_MoreReplicasThanServers: a count above the
// number of datapath servers is ResourceExhausted, names the count, where it
// came from, the servers and both ways to fix it, and asks the datapath for
// nothing.
func TestControllerServer_CreateVolume_MoreReplicasThanServers(t *testing.T) {
	tests := []struct {
		name    string
		servers int
		def     int
		params  map[string]string
		want    []string
	}{
		{"the setting, one server", 1, 3, nil,
			[]string{"3 replicas asked (the setting default-replica-count)", "1 server(s)", "at most 1", "StorageClass parameter replicas"}},
		{"a server without a group counts as one", 0, 2, nil,
			[]string{"2 replicas asked", "1 server(s)"}},
		{"the parameter, three servers", 3, 1, map[string]string{"replicas": "5"},
			[]string{"5 replicas asked (the StorageClass parameter replicas)", "3 server(s)", "add datapath servers", "setting default-replica-count"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, f := newTestController(t)
			f.servers = tt.servers
			c.replicas = ReplicaDefaultFunc(func() int { return tt.def })
			_, err := createWith(c, "v", tt.params)
			wantCode(t, err, codes.ResourceExhausted)
			for _, w := range tt.want {
				if !strings.Contains(status.Convert(err).Message(), w) {
					t.Errorf("message %q lacks %q", status.Convert(err).Message(), w)
				}
			}
			if got := f.mutations(); len(got) != 0 {
				t.Errorf("refused create changed the datapath: %q", got)
			}
		})
	}
}

// TestControllerServer_CreateVolume_ReplicaIdempotency: the same name and
// count is the same volume; another count is AlreadyExists naming both, also
// when the request's size range only contains the existing size.
func TestControllerServer_CreateVolume_ReplicaIdempotency(t *testing.T) {
	c, _ := newTestController(t)
	c.replicas = ReplicaDefaultFunc(func() int { return 3 })
	first, err := createWith(c, "v", nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := createWith(c, "v", map[string]string{"replicas": "3"})
	if err != nil {
		t.Fatal(err)
	}
	if again.GetVolumeId() != first.GetVolumeId() {
		t.Errorf("same name and count: volume %s, then %s", first.GetVolumeId(), again.GetVolumeId())
	}
	_, err = createWith(c, "v", map[string]string{"replicas": "2"})
	wantCode(t, err, codes.AlreadyExists)
	for _, w := range []string{"with 3 replicas; asked for 2", "2 replica(s) from the StorageClass parameter replicas"} {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Errorf("message %q lacks %q", status.Convert(err).Message(), w)
		}
	}
	// A range holding the existing size: asked again with that size, the
	// count still decides.
	_, err = c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "v", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 4096, LimitBytes: 1 << 30}, Parameters: map[string]string{"replicas": "1"},
	})
	wantCode(t, err, codes.AlreadyExists)
	if !strings.Contains(status.Convert(err).Message(), "with 3 replicas; asked for 1") {
		t.Errorf("message %q does not name both counts", status.Convert(err).Message())
	}
	resp, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{
		Name: "v", VolumeCapabilities: []*csi.VolumeCapability{mountCap(rwo)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 4096, LimitBytes: 1 << 30},
	})
	if err != nil || resp.GetVolume().GetVolumeId() != first.GetVolumeId() {
		t.Errorf("a range holding the existing size, same count: %v, %v; want volume %s", resp.GetVolume(), err, first.GetVolumeId())
	}
}
