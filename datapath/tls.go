package datapath

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// certReloadEvery bounds how often ServerTLS looks at its files for a new
// certificate (cert-manager and friends replace them in place).
const certReloadEvery = 10 * time.Second

// ServerTLS returns the TLS configuration of a server whose certificate
// (PEM, the chain after the leaf) and private key (PEM) are in certFile and
// keyFile. Both are read now: a missing, unreadable or mismatched pair is an
// error naming the files. Later handshakes pick up a replaced pair (checked at
// most every 10 s, by modification time); a replacement that does not load is
// passed over and the last good pair stays in use until one does.
func ServerTLS(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%w: TLS needs both a certificate file and a private key file (got %q and %q)",
			ErrInvalidArgument, certFile, keyFile)
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, nil
}

type certReloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	mtimes            [2]time.Time
	checked           time.Time
}

func (r *certReloader) modTimes() ([2]time.Time, error) {
	var out [2]time.Time
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fi.ModTime()
	}
	return out, nil
}

func (r *certReloader) load() error {
	mt, err := r.modTimes()
	if err != nil {
		return fmt.Errorf("TLS certificate: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("%w: TLS certificate %s with key %s: %v", ErrInvalidArgument, r.certFile, r.keyFile, err)
	}
	r.cert, r.mtimes, r.checked = &cert, mt, time.Now()
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < certReloadEvery {
		return r.cert, nil
	}
	r.checked = time.Now()
	if mt, err := r.modTimes(); err == nil && mt != r.mtimes {
		old := r.cert
		if err := r.load(); err != nil {
			r.cert = old
			return old, nil
		}
	}
	return r.cert, nil
}

// IsLoopback reports whether host (an IP address or "localhost") is on
// loopback: the one place the server and its clients allow plaintext without
// being told to.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PeerTLS returns the TLS configurations of a server's connections with the
// other servers of its group (the Raft transport): mutual TLS, each server
// presenting its serving certificate both ways (certFile and keyFile,
// reloaded as ServerTLS does). accept asks every connecting peer for its
// certificate and takes it only when it chains to the CA in caFile as a
// serving certificate valid for self, this server's own host as its peers
// know it: the servers share a certificate (deploy/'s names every server,
// the sandbox's every node), and another serving certificate of the same CA
// (the manager's) is refused. dial verifies the dialed server for the host
// dialed (set ServerName on a clone).
func PeerTLS(certFile, keyFile, caFile, self string) (accept, dial *tls.Config, err error) {
	if caFile == "" || self == "" {
		return nil, nil, fmt.Errorf("%w: peer TLS needs a CA file and this server's host (got %q and %q)", ErrInvalidArgument, caFile, self)
	}
	srv, err := ServerTLS(certFile, keyFile)
	if err != nil {
		return nil, nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: peer CA: %v", ErrInvalidArgument, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("%w: peer CA %s holds no PEM certificate", ErrInvalidArgument, caFile)
	}
	own := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return srv.GetCertificate(nil) }
	accept = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: srv.GetCertificate, ClientAuth: tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error { return verifyPeer(raw, roots, self) }}
	dial = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, GetClientCertificate: own}
	return accept, dial, nil
}

// verifyPeer checks a connecting peer's certificate chain: of roots, for
// server authentication, valid for host.
func verifyPeer(raw [][]byte, roots *x509.CertPool, host string) error {
	if len(raw) == 0 {
		return fmt.Errorf("%w: the peer sent no certificate", ErrUnauthenticated)
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return fmt.Errorf("%w: the peer's certificate: %v", ErrUnauthenticated, err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return fmt.Errorf("%w: the peer's certificate is not a server certificate of this group (valid for %s, of its CA): %v", ErrUnauthenticated, host, err)
	}
	return nil
}
