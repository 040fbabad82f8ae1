package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// ErrInvalid marks a certificate, key or token that cannot be used; the
// message says which and why.
var ErrInvalid = errors.New("invalid")

// Backdate is how far before now a certificate's validity starts, so that a
// node whose clock is a little behind accepts it at once.
const Backdate = time.Hour

// Lifetime bounds: the CA and the serving certificates.
const (
	MinValidity = 24 * time.Hour
	MaxValidity = 20 * 365 * 24 * time.Hour
)

// CA is a certificate authority with its key, and both in PEM.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed CA named commonName, valid from now-Backdate for
// validity.
func NewCA(commonName string, now time.Time, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := encode(der, key)
	if err != nil {
		return nil, err
	}
	return ParseCA(certPEM, keyPEM, now)
}

// ParseCA reads a CA from PEM and checks it: a CA certificate, valid at now,
// whose key is keyPEM's.
func ParseCA(certPEM, keyPEM []byte, now time.Time) (*CA, error) {
	cert, key, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	switch {
	case !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, fmt.Errorf("%w: the certificate %q is not a CA (it may not sign certificates)", ErrInvalid, cert.Subject.CommonName)
	case now.After(cert.NotAfter):
		return nil, fmt.Errorf("%w: the CA certificate expired at %s", ErrInvalid, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Issue makes a serving certificate for dnsNames (the first is also its
// common name), signed by ca, valid for validity but never past the CA.
func (ca *CA) Issue(dnsNames []string, now time.Time, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if len(dnsNames) == 0 {
		return nil, nil, fmt.Errorf("%w: a serving certificate needs at least one DNS name", ErrInvalid)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    now.Add(-Backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return encode(der, key)
}

// CheckServing checks a serving certificate and its key: they belong
// together, the certificate is valid at now, signed by ca and good for a
// server at every one of dnsNames. It returns the certificate's expiry.
func (ca *CA) CheckServing(certPEM, keyPEM []byte, dnsNames []string, now time.Time) (time.Time, error) {
	cert, _, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return time.Time{}, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, name := range dnsNames {
		_, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: the certificate does not verify for %s with the CA: %v", ErrInvalid, name, err)
		}
	}
	return cert.NotAfter, nil
}

// SameCert reports whether pemBytes holds exactly ca's certificate.
func (ca *CA) SameCert(pemBytes []byte) bool {
	b, _ := pem.Decode(pemBytes)
	return b != nil && b.Type == "CERTIFICATE" && bytes.Equal(b.Bytes, ca.Cert.Raw)
}

// ServiceDNSNames are the names a client may use for service in namespace:
// NAME, NAME.NS, NAME.NS.svc and NAME.NS.svc.DOMAIN.
func ServiceDNSNames(service, namespace, clusterDomain string) []string {
	return []string{
		service + "." + namespace + ".svc",
		service,
		service + "." + namespace,
		service + "." + namespace + ".svc." + clusterDomain,
	}
}

// PeerDNSNames are the names of every pod of the headless Service peers (a
// StatefulSet's pods, POD.PEERS.NAMESPACE.svc), as wildcards.
func PeerDNSNames(peers, namespace, clusterDomain string) []string {
	return []string{"*." + peers + "." + namespace + ".svc", "*." + peers + "." + namespace + ".svc." + clusterDomain}
}

func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%w: the certificate is not PEM (want -----BEGIN CERTIFICATE-----)", ErrInvalid)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the certificate: %v", ErrInvalid, err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, fmt.Errorf("%w: the private key is not PEM", ErrInvalid)
	}
	anyKey, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		if anyKey, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			return nil, nil, fmt.Errorf("%w: the private key: %v", ErrInvalid, err)
		}
	}
	key, ok := anyKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("%w: the private key is a %T, want ECDSA", ErrInvalid, anyKey)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, fmt.Errorf("%w: the private key is not the certificate's", ErrInvalid)
	}
	return cert, key, nil
}

func encode(der []byte, key *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
