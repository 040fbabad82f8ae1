package datapath

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
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

// DefaultListenAddress is where `vigil-manager datapath serve` listens unless
// told otherwise: loopback only.
const DefaultListenAddress = vigil.DefaultDatapathAddress

// Server serves a Store over gRPC with the datapath codec, checking the shared
// token on every call.
type Server struct {
	store     *Store
	tokenHash [sha256.Size]byte
	grpc      *grpc.Server
	bulk      bulkServer
}

// NewServer returns a server for store that accepts calls carrying token.
func NewServer(store *Store, token string) (*Server, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: datapath server: empty token", ErrInvalidArgument)
	}
	s := &Server{store: store, tokenHash: sha256.Sum256([]byte(token))}
	s.grpc = grpc.NewServer(
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

// authenticate checks the "authorization: Bearer <token>" metadata in constant
// time (comparing SHA-256 digests, so the token's length does not leak either).
func (s *Server) authenticate(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(TokenMetadataKey)
	if len(vals) == 0 {
		return fmt.Errorf("%w: no token: send gRPC metadata %q = \"Bearer <token>\" with the datapath's shared token", ErrUnauthenticated, TokenMetadataKey)
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok {
		return fmt.Errorf("%w: metadata %q must be \"Bearer <token>\"", ErrUnauthenticated, TokenMetadataKey)
	}
	got := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(got[:], s.tokenHash[:]) != 1 {
		return fmt.Errorf("%w: wrong token: it does not match the datapath server's token file", ErrUnauthenticated)
	}
	return nil
}
