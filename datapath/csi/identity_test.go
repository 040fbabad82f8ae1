package csi

import (
	"context"
	"errors"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	vigil "github.com/vigil-storage/vigil"
)

func TestIdentityServer_GetPluginInfo(t *testing.T) {
	resp, err := NewIdentityServer(newFakeVolumes(), true).GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
	if err != nil || resp.GetName() != vigil.DriverName || resp.GetVendorVersion() != vigil.Version {
		t.Fatalf("GetPluginInfo = %v, %v", resp, err)
	}
}

func TestIdentityServer_GetPluginCapabilities_Controller(t *testing.T) {
	resp, err := NewIdentityServer(newFakeVolumes(), true).GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	caps := resp.GetCapabilities()
	if len(caps) != 1 || caps[0].GetService().GetType() != csi.PluginCapability_Service_CONTROLLER_SERVICE {
		t.Fatalf("capabilities = %v, want only CONTROLLER_SERVICE (no topology)", caps)
	}
}

func TestIdentityServer_Probe_FollowsDatapath(t *testing.T) {
	f := newFakeVolumes()
	s := NewIdentityServer(f, true)
	resp, err := s.Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || !resp.GetReady().GetValue() {
		t.Fatalf("Probe with a healthy datapath = %v, %v; want ready", resp, err)
	}
	f.failWith = errors.New("connection refused")
	resp, err = s.Probe(context.Background(), &csi.ProbeRequest{})
	if err != nil || resp.GetReady().GetValue() {
		t.Fatalf("Probe with a failing datapath = %v, %v; want not ready and no error", resp, err)
	}
}
