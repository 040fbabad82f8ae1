package csi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultProbeHandlerTimeout bounds one CSI Probe made by ProbeHandler: the
// dial, and the datapath query of the identity service (probeTimeout) with
// room to spare. A probe of the kubelet should wait longer (deploy/ gives
// timeoutSeconds 5).
const DefaultProbeHandlerTimeout = 4 * time.Second

// ProbeHandler answers an HTTP probe with the CSI Probe of the CSI server on
// the unix socket path, as the kubelet would reach it: a new connection per
// request, so a socket that was removed or a gRPC server that stopped
// answering fails the probe. 200 "ok" when the Probe answers ready (or says
// nothing about readiness, which CSI counts as ready); 503 with the reason
// otherwise: the socket cannot be reached, the call failed or timed out, or
// the driver is not ready. It replaces the upstream livenessprobe sidecar.
func ProbeHandler(path string, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := probeSocket(ctx, path); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "CSI Probe on %s: %v\n", path, err)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
}

// probeSocket calls Probe on the CSI server at path; nil when it is ready.
func probeSocket(ctx context.Context, path string) error {
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return err
	}
	if r := resp.GetReady(); r != nil && !r.GetValue() {
		// What IdentityServer.Probe means by it: a controller service
		// whose datapath did not answer (a node service is always ready).
		return fmt.Errorf("the CSI driver reports not ready: its datapath did not answer a capacity query within %s", probeTimeout)
	}
	return nil
}
