package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// DefaultStopTimeout is how long Stop lets RPCs in flight finish before it cuts
// the connections.
const DefaultStopTimeout = 10 * time.Second

// ErrBadEndpoint is returned by ParseEndpoint (and Serve) for an endpoint that
// is not a unix socket path.
var ErrBadEndpoint = errors.New("bad CSI endpoint")

// Server serves the identity service, the controller service (when it has
// Volumes) and a node service (when one is passed in) on one unix socket.
type Server struct {
	identity    *IdentityServer
	controller  *ControllerServer
	node        csi.NodeServer
	log         *slog.Logger
	stopTimeout time.Duration
	grpc        *grpc.Server

	ready    chan struct{}
	stopOnce sync.Once
	mu       sync.Mutex
	serving  bool
}

// Option configures a Server.
type Option func(*Server, *[]grpc.ServerOption)

// WithNodes sets how ControllerPublishVolume tells whether a node exists.
func WithNodes(nodes Nodes) Option {
	return func(s *Server, _ *[]grpc.ServerOption) {
		if s.controller != nil {
			s.controller.nodes = nodes
		}
	}
}

// WithNodeService serves node next to identity and controller; the engine-node
// passes its node service here (and nil Volumes, so no controller is served).
func WithNodeService(node csi.NodeServer) Option {
	return func(s *Server, _ *[]grpc.ServerOption) { s.node = node }
}

// WithLogger sets the logger for the served calls; the default is slog.Default.
func WithLogger(log *slog.Logger) Option {
	return func(s *Server, _ *[]grpc.ServerOption) { s.log = log }
}

// WithStopTimeout sets how long Stop waits for calls in flight.
func WithStopTimeout(d time.Duration) Option {
	return func(s *Server, _ *[]grpc.ServerOption) { s.stopTimeout = d }
}

// WithGRPCOptions adds options to the gRPC server (interceptors, limits).
func WithGRPCOptions(opts ...grpc.ServerOption) Option {
	return func(_ *Server, o *[]grpc.ServerOption) { *o = append(*o, opts...) }
}

// NewServer returns a Server for volumes; a nil volumes serves no controller
// service (a node-only plugin). Serve starts it.
func NewServer(volumes Volumes, opts ...Option) *Server {
	s := &Server{log: slog.Default(), stopTimeout: DefaultStopTimeout, ready: make(chan struct{})}
	if volumes != nil {
		s.controller = NewControllerServer(volumes, nil)
	}
	var grpcOpts []grpc.ServerOption
	for _, o := range opts {
		o(s, &grpcOpts)
	}
	s.identity = NewIdentityServer(volumes, s.controller != nil)
	grpcOpts = append(grpcOpts, grpc.ChainUnaryInterceptor(s.logCall))
	s.grpc = grpc.NewServer(grpcOpts...)
	csi.RegisterIdentityServer(s.grpc, s.identity)
	if s.controller != nil {
		csi.RegisterControllerServer(s.grpc, s.controller)
	}
	if s.node != nil {
		csi.RegisterNodeServer(s.grpc, s.node)
	}
	return s
}

// ParseEndpoint returns the socket path of a CSI endpoint: "unix:///path",
// "unix:/path" or a bare path.
func ParseEndpoint(endpoint string) (string, error) {
	path := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		path = rest
	} else if rest, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		path = rest
	} else if strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("%w %q: only unix sockets are served; use unix:///path/csi.sock or a path", ErrBadEndpoint, endpoint)
	}
	if path == "" {
		return "", fmt.Errorf("%w %q: the socket path is empty; use unix:///path/csi.sock or a path", ErrBadEndpoint, endpoint)
	}
	return filepath.Clean(path), nil
}

// Serve listens on the unix socket of endpoint and serves until ctx ends or Stop
// is called; it then stops gracefully, removes the socket and returns nil. A
// stale socket left by a previous run is replaced; any other file at that path
// is an error. A Server serves once.
func (s *Server) Serve(ctx context.Context, endpoint string) error {
	path, err := ParseEndpoint(endpoint)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.serving {
		s.mu.Unlock()
		return errors.New("csi server: Serve called twice; create a new Server")
	}
	s.serving = true
	s.mu.Unlock()
	lis, err := listenUnix(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	stop := context.AfterFunc(ctx, s.Stop)
	defer stop()
	s.log.Info("serving CSI", "endpoint", path, "controller", s.controller != nil, "node", s.node != nil)
	close(s.ready)
	if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve CSI on %s: %w", path, err)
	}
	return nil
}

// listenUnix creates the socket's directory, replaces a stale socket and listens.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create directory of CSI socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("%w %s: a %s is in the way; Vigil replaces only a stale socket", ErrBadEndpoint, path, fi.Mode().Type())
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale CSI socket %s: %w", path, err)
		}
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on CSI socket %s: %w", path, err)
	}
	return lis, nil
}

// Ready is closed once Serve listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Stop lets calls in flight finish (up to the stop timeout), then closes every
// connection and makes Serve return. It may be called more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(s.stopTimeout):
			s.log.Warn("CSI calls still running at stop timeout; cutting them", "timeout", s.stopTimeout)
			s.grpc.Stop()
			<-done
		}
	})
}

// logCall logs every call with its code and duration: failures at Info, the
// rest at Debug (Probe is called every few seconds by the liveness probe, ProbeHandler).
func (s *Server) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	level := slog.LevelDebug
	if err != nil {
		level = slog.LevelInfo
	}
	s.log.Log(ctx, level, "CSI call", "method", info.FullMethod, "code", status.Code(err).String(),
		"duration", time.Since(start), "error", err)
	return resp, err
}
