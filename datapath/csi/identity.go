package csi

import (
	"context"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"

	vigil "github.com/vigil-storage/vigil"
)

// probeTimeout bounds the datapath call Probe makes, so a hung datapath makes
// the plugin "not ready" instead of hanging the liveness probe (ProbeHandler).
const probeTimeout = 2 * time.Second

// IdentityServer is the CSI identity service: who the plugin is, what it offers,
// and whether it is ready (the datapath answers).
type IdentityServer struct {
	csi.UnimplementedIdentityServer
	volumes Volumes
	// controller is true when the controller service is served alongside.
	controller bool
}

// NewIdentityServer returns the identity service; controller says whether the
// controller service is served next to it (the manager: yes; a node-only
// engine-node: no). Probe asks volumes for capacity; a nil volumes is always ready.
func NewIdentityServer(volumes Volumes, controller bool) *IdentityServer {
	return &IdentityServer{volumes: volumes, controller: controller}
}

// GetPluginInfo returns the driver name and version.
func (s *IdentityServer) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: vigil.DriverName, VendorVersion: vigil.Version}, nil
}

// GetPluginCapabilities advertises the controller service when it is served.
// Vigil volumes live on the datapath and are reachable from every node, so the
// plugin reports no accessibility constraints (no topology).
func (s *IdentityServer) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	resp := &csi.GetPluginCapabilitiesResponse{}
	if s.controller {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
				Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
			}},
		})
	}
	return resp, nil
}

// Probe reports ready when the datapath answers a capacity query within
// probeTimeout. An unreachable datapath is "not ready", not an error: the
// plugin process itself is healthy and restarting it would not help.
func (s *IdentityServer) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if s.volumes == nil {
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := s.volumes.Capacity(ctx)
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(err == nil)}, nil
}
