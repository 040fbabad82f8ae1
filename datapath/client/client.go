package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// Option configures a Client.
type Option func(*options)

type options struct {
	timeout    time.Duration
	retries    int
	minBackoff time.Duration
	maxBackoff time.Duration
	dialOpts   []grpc.DialOption
	noBulk     bool
	tokenFile  string
	caFile     string
	roots      *x509.CertPool
	insecure   bool
	servers    []string // WithServers
	applyWait  time.Duration
	// replicaDeadline and noQuorumWait bound a replicated write
	// (replicated.go).
	replicaDeadline time.Duration
	noQuorumWait    time.Duration
}

// WithTimeout sets the timeout of each attempt (default 10s). The caller's
// context bounds all attempts together.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithRetries sets how many times a failed attempt is retried (default 3; 0
// disables retries).
func WithRetries(n int) Option { return func(o *options) { o.retries = n } }

// WithBackoff sets the first and the largest pause between attempts (default
// 50ms and 1s; the pause doubles each time).
func WithBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// WithDialOptions adds gRPC dial options (for tests: a custom dialer).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// Client talks to one datapath server. It is safe for concurrent use.
type Client struct {
	conn    *grpc.ClientConn
	addr    string
	token   *tokenSource
	bulkTLS *tls.Config // the bulk channel's (ALPN vigil-bulk/1); nil: plaintext
	opts    options

	tlsCfg *tls.Config // gRPC's for addr; nil: plaintext

	bulkMu    sync.Mutex
	bulkPools map[string]*bulkPool // by server address
	bulkOff   bool                 // WithBulk(false), or closed
	sessions  writeSessions        // the write sessions, both channels

	// holders: the server holding each volume's data, when not addr
	// (holder.go).
	holders holders

	// views: each written volume's replica set and member epoch
	// (replicas.go).
	views replicaViews

	// group finds the control group's leader (leader.go); dialOpts dial
	// its servers.
	group    leaders
	dialOpts []grpc.DialOption
}

// Dial prepares a client for the server at addr ("host:port"), authenticating
// with token (or, when token is empty, with the file given to WithTokenFile).
// It speaks TLS when given a CA (WithCAFile, WithRootCAs); without one it
// refuses an address off loopback unless WithInsecure. It does not wait for
// the server: the first call does, within its timeout and retries. ctx is
// checked once, before anything is set up.
func Dial(ctx context.Context, addr string, token string, opts ...Option) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dial datapath %s: %w", addr, err)
	}
	if addr == "" {
		return nil, fmt.Errorf("%w: dial datapath: empty address; want host:port", datapath.ErrInvalidArgument)
	}
	o := options{timeout: 10 * time.Second, retries: 3, minBackoff: 50 * time.Millisecond, maxBackoff: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.checkReplicaTimes(); err != nil {
		return nil, fmt.Errorf("dial datapath %s: %w", addr, err)
	}
	ts, err := newTokenSource(token, o.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("dial datapath %s: %w", addr, err)
	}
	tlsCfg, err := o.transport(addr)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	dialOpts := append([]grpc.DialOption{
		// Reconnect within a second of the server's return: gRPC's default
		// backoff grows to 2 minutes, and after a 1.3 s datapath restart an
		// engine's next attempt came 2.6 s later, past the 3 s a node may stay
		// silent before it is judged storage-isolated (the chaos suite saw a
		// node fenced for a datapath restart).
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: 5 * time.Second}),
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(ts),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(wire.Codec{}),
			grpc.MaxCallRecvMsgSize(wire.MaxBytes+4096),
			grpc.MaxCallSendMsgSize(wire.MaxBytes+4096),
		),
		grpc.WithInitialWindowSize(datapath.WindowSize),
		grpc.WithInitialConnWindowSize(datapath.WindowSize),
		grpc.WithReadBufferSize(datapath.SocketBufferSize),
		grpc.WithWriteBufferSize(datapath.SocketBufferSize),
	}, o.dialOpts...)
	conn, err := grpc.NewClient("passthrough:///"+addr, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("dial datapath %s: %w", addr, err)
	}
	for _, s := range o.servers {
		if _, err := o.transport(s); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("WithServers: %w", err)
		}
	}
	servers := append([]string{addr}, o.servers...)
	return &Client{conn: conn, addr: addr, token: ts, bulkTLS: bulkTLS(tlsCfg), tlsCfg: tlsCfg, opts: o, bulkOff: o.noBulk,
		group: leaders{servers: servers, leader: addr, conns: map[string]*grpc.ClientConn{}}, dialOpts: dialOpts}, nil
}

// reconnectBackoff paces the attempts to reach a server that went away: 100 ms
// growing to 1 s, jittered so that the engines of many nodes do not all knock
// at once.
var reconnectBackoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}

// Close closes the connections.
func (c *Client) Close() error {
	c.closeBulk()
	return errors.Join(c.conn.Close(), c.closeGroup())
}

// retryClass says which failures a call may be retried on.
type retryClass int

const (
	// retrySafe: Unavailable and attempt timeouts (reads and metadata calls).
	retrySafe retryClass = iota
	// retryTransport: Unavailable only (writes, flushes, grants, fences).
	retryTransport
)

func (c *Client) invoke(ctx context.Context, method string, req, resp wire.Message, class retryClass) error {
	return c.call(ctx, "", method, req, resp, class)
}

// call is invoke for a call about volume vol ("": none): a call only the
// volume's holder serves goes to the holder the client knows (holder.go)
// and follows a NOT_HOLDER refusal there at once.
func (c *Client) call(ctx context.Context, vol, method string, req, resp wire.Message, class retryClass) error {
	return c.callTo(ctx, vol, "", method, req, resp, class)
}

// callTo is call, sent to the server at pinned when it is not empty (and
// then to no other).
func (c *Client) callTo(ctx context.Context, vol, pinned, method string, req, resp wire.Message, class retryClass) error {
	backoff := c.opts.minBackoff
	var callOpts []grpc.CallOption
	var header metadata.MD
	if datapath.WantsBoot(ctx) {
		callOpts = []grpc.CallOption{grpc.Header(&header)}
	}
	redirects, moves := 0, 0
	for attempt := 0; ; attempt++ {
		conn, addr, err := c.connFor(method)
		if vol != "" || pinned != "" {
			addr = pinned
			if addr == "" {
				addr = c.holderOf(vol)
			}
			conn, err = c.connAt(addr)
		}
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, c.opts.timeout)
		err = conn.Invoke(actx, wire.FullMethod(method), req, resp, callOpts...)
		cancel()
		if err == nil {
			if callOpts != nil {
				recordBoot(ctx, header)
			}
			return nil
		}
		if vol != "" && pinned == "" && ctx.Err() == nil && moves < maxHolderMoves && c.toHolder(vol, addr, err) {
			moves++
			attempt-- // nothing was done: the call goes to the holder at once
			continue
		}
		if vol != "" && pinned == "" && ctx.Err() == nil {
			_ = c.askElsewhere(vol, addr, err) // the next attempt, if any, asks another server
		}
		if pinned == "" && ctx.Err() == nil && redirects < c.maxRedirects() && c.follow(method, addr, err) {
			redirects++
			attempt-- // finding the leader is not a retry of the call
		} else if attempt >= c.opts.retries || !retryable(ctx, err, class) {
			return c.holderError(vol, addr, c.callError(method, addr, attempt, err))
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (last error: %v)", method, ctx.Err(), datapath.FromStatus(err))
		case <-t.C:
		}
		backoff = min(backoff*2, c.opts.maxBackoff)
	}
}

// recordBoot records the boot id an answer's header carries ("" from a
// server that reports none) for the caller (datapath.WithBootRecorder).
func recordBoot(ctx context.Context, header metadata.MD) {
	id := ""
	if v := header.Get(datapath.BootIDMetadataKey); len(v) > 0 {
		id = v[0]
	}
	datapath.RecordBoot(ctx, id)
}

// callError maps a failed call's error to the datapath sentinels; errors that
// are not the server's word (transport failures, timeouts) also name the call,
// the server and the attempts made.
func (c *Client) callError(method, addr string, attempt int, err error) error {
	err = datapath.FromStatus(err)
	var re *datapath.RemoteError
	if errors.As(err, &re) && re.Sentinel != nil {
		return err
	}
	return fmt.Errorf("datapath %s at %s (%d attempts): %w", method, addr, attempt+1, err)
}

func retryable(ctx context.Context, err error, class retryClass) bool {
	if ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return true
	case codes.DeadlineExceeded:
		return class == retrySafe
	}
	return false
}

func volumeFromWire(v *wire.Volume) datapath.Volume {
	return datapath.Volume{
		ID: v.ID, Name: v.Name, Size: v.Size, Access: datapath.AccessMode(v.Access),
		Created: time.Unix(0, v.CreatedUnix).UTC(),
	}
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
