package datapath

import (
	"crypto/tls"
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
