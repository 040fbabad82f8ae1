package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/vigil-storage/vigil/datapath"
	"github.com/vigil-storage/vigil/datapath/internal/wire"
)

// WithTokenFile reads the caller's token from path instead of taking it as
// Dial's argument (which must then be empty), and reads it again when the file
// changes: a projected ServiceAccount token is replaced by the kubelet before
// it expires. The file is looked at most every TokenFileRecheck; a read that
// fails or finds an empty file keeps the last good token (the kubelet swaps
// the file atomically, so this covers only a file being set up). Bulk
// connections opened with an older token are replaced by new ones.
func WithTokenFile(path string) Option { return func(o *options) { o.tokenFile = path } }

// TokenFileRecheck is how often a token file given to WithTokenFile is
// looked at for a new token.
const TokenFileRecheck = 30 * time.Second

// WithCAFile makes the client speak TLS and verify the server's certificate
// against the CA certificates (PEM) in path, for gRPC and the bulk channel
// alike. The name checked is the host of Dial's address (a DNS name or an IP
// address in the certificate's SANs).
func WithCAFile(path string) Option { return func(o *options) { o.caFile = path } }

// WithRootCAs is WithCAFile with the CA pool in hand.
func WithRootCAs(pool *x509.CertPool) Option { return func(o *options) { o.roots = pool } }

// WithInsecure allows plaintext to an address off loopback. Without TLS (no
// WithCAFile or WithRootCAs) Dial refuses any address that is not a loopback
// one unless this is given: the token and the data would cross the network
// in the clear.
func WithInsecure() Option { return func(o *options) { o.insecure = true } }

// transport decides how the client reaches addr: TLS with the given roots, or
// plaintext on loopback or when WithInsecure says so. Contradictions and a
// plaintext address off loopback are errors that name what to pass.
func (o *options) transport(addr string) (*tls.Config, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: dial datapath: address %q: %v; want host:port", datapath.ErrInvalidArgument, addr, err)
	}
	roots := o.roots
	if o.caFile != "" {
		if roots != nil {
			return nil, fmt.Errorf("%w: dial datapath %s: give a CA file or a CA pool, not both", datapath.ErrInvalidArgument, addr)
		}
		if roots, err = ReadCAFile(o.caFile); err != nil {
			return nil, err
		}
	}
	switch {
	case roots != nil && o.insecure:
		return nil, fmt.Errorf("%w: dial datapath %s: a CA to verify the server and insecure (plaintext) contradict each other; give one",
			datapath.ErrInvalidArgument, addr)
	case roots != nil:
		return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: host}, nil
	case o.insecure || datapath.IsLoopback(host):
		return nil, nil
	}
	return nil, fmt.Errorf("%w: dial datapath %s: %s is not a loopback address, so the datapath must be reached over TLS: give the CA file "+
		"that signed its certificate, or insecure to send tokens and data in plaintext", datapath.ErrInvalidArgument, addr, host)
}

// ReadCAFile reads PEM CA certificates for verifying the datapath server; a
// file without one is an error naming it.
func ReadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate (want -----BEGIN CERTIFICATE-----)", datapath.ErrInvalidArgument, path)
	}
	return pool, nil
}

// bulkTLS is the TLS configuration of a bulk connection: the client's, with
// the bulk channel's ALPN name and full-size records from the first byte
// (crypto/tls otherwise sends a connection's first 128 KiB in records of
// about one TCP segment, for the latency of web pages; a bulk connection
// carries writes of up to 4 MiB, and every record costs the server a read
// and an open of its own).
func bulkTLS(cfg *tls.Config) *tls.Config {
	if cfg == nil {
		return nil
	}
	c := cfg.Clone()
	c.NextProtos = []string{wire.BulkALPN}
	c.DynamicRecordSizingDisabled = true
	return c
}

// tokenSource is the caller's token: fixed, or a file read again when it
// changes.
type tokenSource struct {
	path    string        // "" : fixed
	recheck time.Duration // TokenFileRecheck; shorter in tests
	mu      sync.Mutex
	token   string
	mtime   time.Time
	checked time.Time
}

func newTokenSource(token, path string) (*tokenSource, error) {
	switch {
	case token != "" && path != "":
		return nil, fmt.Errorf("%w: dial datapath: a token and a token file given; give one", datapath.ErrInvalidArgument)
	case path != "":
		ts := &tokenSource{path: path, recheck: TokenFileRecheck}
		if err := ts.read(); err != nil {
			return nil, err
		}
		return ts, nil
	case token == "":
		return nil, fmt.Errorf("%w: dial datapath: empty token", datapath.ErrInvalidArgument)
	case len(token) > datapath.MaxTokenLen:
		return nil, fmt.Errorf("%w: dial datapath: the token is %d bytes; at most %d are allowed", datapath.ErrInvalidArgument, len(token), datapath.MaxTokenLen)
	}
	return &tokenSource{token: token}, nil
}

func (ts *tokenSource) read() error {
	fi, err := os.Stat(ts.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	tok, err := datapath.ReadTokenFile(ts.path)
	if err != nil {
		return err
	}
	ts.token, ts.mtime, ts.checked = tok, fi.ModTime(), time.Now()
	return nil
}

// get returns the current token, reading the file again if it changed.
func (ts *tokenSource) get() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.path == "" || time.Since(ts.checked) < ts.recheck {
		return ts.token
	}
	ts.checked = time.Now()
	if fi, err := os.Stat(ts.path); err == nil && !fi.ModTime().Equal(ts.mtime) {
		_ = ts.read() // on failure the last good token stays, and the next check tries again
	}
	return ts.token
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (ts *tokenSource) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{datapath.TokenMetadataKey: "Bearer " + ts.get()}, nil
}

// RequireTransportSecurity is false: plaintext is allowed on loopback and with
// WithInsecure; Dial decides (options.transport).
func (*tokenSource) RequireTransportSecurity() bool { return false }
