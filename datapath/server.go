package datapath

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/vigil-storage/vigil"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// DefaultListenAddress is where `vigil-datapath serve` listens unless
// told otherwise: loopback only.
const DefaultListenAddress = vigil.DefaultDatapathAddress

// Server serves a Store over gRPC with the datapath codec and over the bulk
// channel, authenticating every caller and authorizing every call.
type Server struct {
	store *Store
	auth  Authenticator
	tls   *tls.Config // nil: plaintext
	grpc  *grpc.Server
	bulk  bulkServer
	bound *boundIdentities // identities proved per connection (conn_identity.go)
	// bootID is the machine's boot id (WithBootID), reported with every
	// answer; "" reports none.
	bootID string
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithTLS serves TLS with cfg on the one port, gRPC and the bulk channel
// alike: the handshake comes first, then the first bytes tell the two apart.
// cfg is cloned; its NextProtos are set to h2 and the bulk channel's ALPN
// name. ServerTLS builds one from certificate files.
func WithTLS(cfg *tls.Config) ServerOption {
	return func(s *Server) {
		c := cfg.Clone()
		c.NextProtos = []string{"h2", wire.BulkALPN}
		if c.MinVersion < tls.VersionTLS12 {
			c.MinVersion = tls.VersionTLS12
		}
		s.tls = c
	}
}

// NewServer returns a server for store that takes the identity of every
// caller from auth (StaticTokens, datapath/tokenreview, or both chained in
// Authenticators) and lets each identity make only the calls Authorize
// allows.
func NewServer(store *Store, auth Authenticator, opts ...ServerOption) (*Server, error) {
	if auth == nil {
		return nil, fmt.Errorf("%w: datapath server: no authenticator; every caller must prove who it is", ErrInvalidArgument)
	}
	s := &Server{store: store, auth: auth}
	for _, o := range opts {
		o(s)
	}
	if s.bootID != "" {
		if err := CheckBootID(s.bootID); err != nil {
			return nil, fmt.Errorf("datapath server: %w", err)
		}
	}
	s.bound = newBoundIdentities(s.store.log)
	s.grpc = grpc.NewServer(
		grpc.UnaryInterceptor(s.reportBoot),
		grpc.StatsHandler(connEnds{s.bound}),
		grpc.ForceServerCodecV2(wire.Codec{}),
		grpc.MaxRecvMsgSize(wire.MaxBytes+4096),
		grpc.MaxSendMsgSize(wire.MaxBytes+4096),
		grpc.InitialWindowSize(WindowSize),
		grpc.InitialConnWindowSize(WindowSize),
		grpc.ReadBufferSize(SocketBufferSize),
		grpc.WriteBufferSize(SocketBufferSize),
	)
	s.grpc.RegisterService(&serviceDesc, s)
	return s, nil
}

// Serve accepts connections on lis until Stop: gRPC connections and bulk
// connections (told apart by their first bytes, see mux.go). It returns nil
// after Stop.
func (s *Server) Serve(lis net.Listener) error {
	err := s.grpc.Serve(newMuxListener(lis, s))
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop stops accepting calls and waits for calls in progress to finish, up to
// grace; then it cuts the rest. It does not close the store: the caller closes
// it afterwards, which flushes every volume.
func (s *Server) Stop(grace time.Duration) {
	bulkDone := make(chan struct{})
	go func() { s.bulk.stop(grace); close(bulkDone) }()
	defer func() { <-bulkDone }()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.grpc.Stop()
		<-done
	}
}

// reportBoot puts the machine's boot id in the header of every answer to a
// caller the server authenticated (WithBootID).
func (s *Server) reportBoot(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if s.bootID != "" {
		_ = grpc.SetHeader(ctx, metadata.Pairs(BootIDMetadataKey, s.bootID))
	}
	return h(ctx, req)
}

// authenticate takes the "authorization: Bearer <token>" metadata to the
// authenticator.
func (s *Server) authenticate(ctx context.Context) (Identity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(TokenMetadataKey)
	if len(vals) == 0 {
		return Identity{}, fmt.Errorf("%w: no token: send gRPC metadata %q = \"Bearer <token>\" with this caller's datapath token", ErrUnauthenticated, TokenMetadataKey)
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok || tok == "" {
		return Identity{}, fmt.Errorf("%w: metadata %q must be \"Bearer <token>\"", ErrUnauthenticated, TokenMetadataKey)
	}
	if len(tok) > MaxTokenLen {
		return Identity{}, fmt.Errorf("%w: the token is %d bytes; at most %d are allowed", ErrUnauthenticated, len(tok), MaxTokenLen)
	}
	return s.bound.authenticate(ctx, s.auth, peerConn(ctx), tok)
}
