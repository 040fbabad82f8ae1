package csi

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/settings"
)

// ParameterReplicas is the StorageClass parameter that sets how many replicas
// a new volume gets, each on a datapath server of its own ("1" to "5"). A
// StorageClass without it takes the setting default-replica-count.
const ParameterReplicas = "replicas"

// ReplicaDefault gives the replica count of a volume whose StorageClass does
// not name one. `vigil-manager csi serve` passes its live settings (the
// setting default-replica-count, read at each CreateVolume); a controller
// given none makes volumes of one copy.
type ReplicaDefault interface {
	DefaultReplicaCount() int
}

// ReplicaDefaultFunc adapts a function to ReplicaDefault.
type ReplicaDefaultFunc func() int

// DefaultReplicaCount calls f.
func (f ReplicaDefaultFunc) DefaultReplicaCount() int { return f() }

// WithReplicaDefault sets where the replica count of a volume whose
// StorageClass names none comes from.
func WithReplicaDefault(d ReplicaDefault) Option {
	return func(s *Server, _ *[]grpc.ServerOption) {
		if s.controller != nil {
			s.controller.replicas = d
		}
	}
}

// replicaAsk is a replica count and where it came from, for messages.
type replicaAsk struct {
	count int
	from  string // "StorageClass parameter replicas" or "setting default-replica-count"
}

// parseReplicas checks the StorageClass parameter replicas: a whole number
// from 1 to datapath.MaxReplicas.
func parseReplicas(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > datapath.MaxReplicas {
		return 0, invalidArgument("parameters[%q] is %q; it must be a whole number from 1 to %d, each replica on a datapath server of its own "+
			"(leave it out to use the setting %s)", ParameterReplicas, v, datapath.MaxReplicas, settings.NameDefaultReplicaCount)
	}
	return n, nil
}

// replicasFor is the replica count a CreateVolume asks for: the StorageClass
// parameter (checked already by checkParameters), else the default.
func (s *ControllerServer) replicasFor(params map[string]string) (replicaAsk, error) {
	if v, ok := params[ParameterReplicas]; ok {
		n, err := parseReplicas(v)
		return replicaAsk{n, "the StorageClass parameter " + ParameterReplicas}, err
	}
	if s.replicas == nil {
		return replicaAsk{1, "the default of a CSI controller given no settings"}, nil
	}
	n := s.replicas.DefaultReplicaCount()
	if n < 1 || n > datapath.MaxReplicas { // the setting's own check refuses these; kept for safety
		return replicaAsk{}, status.Errorf(codes.Internal, "the setting %s is %d; it must be from 1 to %d", settings.NameDefaultReplicaCount, n, datapath.MaxReplicas)
	}
	return replicaAsk{n, "the setting " + settings.NameDefaultReplicaCount}, nil
}

// checkServers refuses a replica count above the number of datapath servers
// the control group records (a server without a group counts as one), with
// ResourceExhausted: CSI's code for a volume that cannot be provisioned where
// it must be (like a topology without room), not a malformed request (the same
// StorageClass is fine once servers are added), and one the external
// provisioner retries with backoff, so the claim is provisioned by itself once
// the servers exist.
func (s *ControllerServer) checkServers(ctx context.Context, ask replicaAsk) error {
	if ask.count == 1 {
		return nil
	}
	rep, err := s.volumes.AnyServers(ctx)
	if err != nil {
		return statusFromError(err, "read the datapath's servers")
	}
	n := max(len(rep.Servers), 1)
	if ask.count <= n {
		return nil
	}
	return status.Errorf(codes.ResourceExhausted,
		"%d replicas asked (%s), but the datapath has %d server(s) and each replica needs a server of its own; "+
			"add datapath servers, or ask for at most %d: the StorageClass parameter %s, or the setting %s for StorageClasses that do not say",
		ask.count, ask.from, n, n, ParameterReplicas, settings.NameDefaultReplicaCount)
}

// create makes the volume: one copy the way volumes always were made, more
// through the replicated create.
func (s *ControllerServer) create(ctx context.Context, name string, size int64, mode datapath.AccessMode, ask replicaAsk) (datapath.Volume, error) {
	if ask.count == 1 {
		return s.volumes.CreateVolume(ctx, name, size, mode)
	}
	return s.volumes.CreateReplicated(ctx, name, size, mode, ask.count)
}

// withAsk adds the replica count asked and its source to a create's failure.
func withAsk(what string, ask replicaAsk) string {
	return fmt.Sprintf("%s with %d replica(s) from %s", what, ask.count, ask.from)
}
